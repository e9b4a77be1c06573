"""How a key is named to memcached, and the one error every connection to it raises.

Shared by the meta client (`meta.py`), the binary protocol (`binproto.py`), the encoder (`encode.py`)
and the populator; it imports nothing of cachewarm, so any of them can take it.

- keys: plain text when memcached's text protocol takes the key as is; else base64 with the meta `b`
  flag while that fits a key token; else only the binary protocol can name it.
- `DestinationUnavailable`: the server refused, reset or closed the connection; the caller retries
  (`retry_while_unavailable`).
"""

from __future__ import annotations

import base64
import re

import tenacity

# memcached's KEY_MAX_LENGTH: the key token on the wire, plain or base64.
MAX_WIRE_KEY = 250
# The longest binary key whose base64 form fits in MAX_WIRE_KEY (186 bytes); longer ones (up to the
# format's 250) go through the binary protocol.
MAX_BINARY_KEY = MAX_WIRE_KEY // 4 * 3
# Keys made only of these bytes (printable ASCII but space) travel as they are.
PLAIN_KEY_BYTES = (0x21, 0x7E)

# A plain key (the encoder's hot loop matches it directly).
PLAIN_KEY = re.compile(b"[\\x%02x-\\x%02x]{1,%d}" % (*PLAIN_KEY_BYTES, MAX_WIRE_KEY))


def is_plain_key(key: bytes | memoryview) -> bool:
    """A key memcached's text protocol takes as is: 1..250 bytes in 0x21..0x7E."""
    return PLAIN_KEY.fullmatch(key) is not None


def meta_expressible(key: bytes | memoryview) -> bool:
    """Whether a meta command can name the key (plain, or base64 of at most MAX_WIRE_KEY chars)."""
    return is_plain_key(key) or len(key) <= MAX_BINARY_KEY


def wire_key(key: bytes) -> tuple[bytes, bytes]:
    """(key token, extra flag) for a meta command: base64 + ` b` for keys with other bytes."""
    if is_plain_key(key):
        return key, b""
    enc = base64.b64encode(key)
    if len(enc) > MAX_WIRE_KEY:
        raise ValueError(
            f"key of {len(key)} bytes is too long for a base64 meta key (max {MAX_BINARY_KEY} bytes)"
        )
    return enc, b" b"


# How memcached's text protocol answers a command it failed (meta commands too).
ERROR_REPLIES = (b"SERVER_ERROR", b"CLIENT_ERROR", b"ERROR")


class DestinationUnavailable(ConnectionError):
    """The server refused, reset or closed the connection: retry the file after a backoff."""


def retry_while_unavailable(timeout: float) -> tenacity.Retrying:
    """Retries on DestinationUnavailable with exponential backoff for up to `timeout` seconds, then
    raises the last one."""
    return tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(DestinationUnavailable),
        wait=tenacity.wait_exponential(multiplier=0.1, max=5),
        stop=tenacity.stop_after_delay(timeout),
        reraise=True,
    )
