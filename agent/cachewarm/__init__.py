"""cachewarm: warm a new memcached replica from an existing one."""

__version__ = "0.1.0"
