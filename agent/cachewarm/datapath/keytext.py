"""How a memcached key is shown to a person: its text when it is printable ASCII (what memcached's
text protocol allows: 0x21..0x7E), else with each other byte escaped as `\\xNN` (and `\\` as `\\\\`), so
a binary key is still one unambiguous word on a line — never Python's `b'...'`."""

from __future__ import annotations


def key_text(key: bytes) -> str:
    return "".join("\\\\" if b == 0x5C else chr(b) if 0x21 <= b <= 0x7E else f"\\x{b:02x}" for b in key)


def keys_text(keys: list[bytes]) -> str:
    return ", ".join(key_text(k) for k in keys)
