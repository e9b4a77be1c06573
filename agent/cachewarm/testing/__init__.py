"""Helpers for tests, benchmarks and the demo: real local memcached servers."""
