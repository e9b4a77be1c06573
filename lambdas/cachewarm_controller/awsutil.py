"""Small AWS helpers shared by the steps: client tokens, retry config, error mapping, tag lookup.

The tag names and the tags every created resource carries are `cachewarm.contract.tags`.
"""

from __future__ import annotations

import hashlib
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


def client_token(execution_arn: str, node_id: str, kind: str) -> str:
    """EC2 idempotency token (<= 64 ASCII chars): the same execution + node + kind => the same
    resource (the execution ARN names the warm id too; another execution never shares a token)."""
    digest = hashlib.sha256(f"{execution_arn}|{node_id}|{kind}".encode()).hexdigest()[:48]
    return f"cw-{kind[:8]}-{digest}"


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
