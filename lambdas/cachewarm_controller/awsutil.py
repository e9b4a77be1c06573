"""Small AWS helpers shared by the steps: retry config, error mapping, tag lookup (client tokens are
`ownership`'s).

The tag names and the tags every created resource carries are `cachewarm.contract.tags`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from botocore.config import Config
from botocore.exceptions import ClientError

# Adaptive mode: exponential backoff with jitter plus client-side rate limiting on throttling
# (RequestLimitExceeded, Throttling...). What still fails after this becomes TransientError and the
# ASL retries the whole (idempotent) step with its own backoff.
RETRY_CONFIG = Config(retries={"mode": "adaptive", "max_attempts": 10}, connect_timeout=10, read_timeout=30)

THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "TooManyRequestsException",
        "SlowDown",
        "InternalError",
        "InternalFailure",
        "ServiceUnavailable",
        "Unavailable",
        "InsufficientInstanceCapacity",
    }
)

T = TypeVar("T")


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def is_throttling(exc: BaseException) -> bool:
    return isinstance(exc, ClientError) and error_code(exc) in THROTTLING_CODES


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def tag_value(resource: dict[str, Any], key: str) -> str | None:
    for tag in resource.get("Tags", []) or []:
        if tag.get("Key") == key:
            return str(tag.get("Value"))
    return None
