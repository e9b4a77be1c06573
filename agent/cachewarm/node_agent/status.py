"""The heartbeat thread that publishes an agent's status object and keeps it fresh.

The object (`NodeStatus`) and where it lives (`StatusLocation`) are `cachewarm.contract.status`'s.
The controller's CheckProgress reads it; a node whose `heartbeat_ms` stops moving is stale and gets
revived.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal

from botocore.exceptions import BotoCoreError, ClientError
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

# The object and its S3 layout are the contract's; this module only publishes them. (`Progress` is
# imported from here by the jobs too.)
from cachewarm.contract.status import (
    MAX_ERROR_CHARS,
    NodeStatus,
    Progress,
    StatusFormatError,
    StatusLocation,
    writer_account,
)
from cachewarm.node_agent.errors import AgentError, ExitCode


class StatusPublisher:
    """Publishes this agent's status now and every `interval_s` from a background thread.

    `update()` only changes the in-memory snapshot; the thread uploads it. A failed heartbeat is
    reported on stderr and retried next tick (a long dump must not die of one S3 blip); the first
    and the final publish must succeed, else the agent exits with ExitCode.STATUS.
    """

    def __init__(
        self,
        s3: Any,
        where: StatusLocation,
        interval_s: float = 30.0,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        log: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True),
    ) -> None:
        self._s3 = s3
        self.where = where
        # The status bucket is this account's: the writer's (its instance ARN's) account must own it.
        account = writer_account(where.writer)
        self._owned = {"ExpectedBucketOwner": account} if account else {}
        self.interval_s = interval_s
        self._now_ms = now_ms
        self._log = log
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.published = 0
        self.status = NodeStatus(
            warm_id=where.warm_id,
            node_id=where.node_id,
            role=where.role,
            state="running",
            heartbeat_ms=now_ms(),
            attempt=self._previous_attempt() + 1,
        )

    def _previous_attempt(self) -> int:
        try:
            body = self._s3.get_object(Bucket=self.where.bucket, Key=self.where.key, **self._owned)[
                "Body"
            ].read()
            return NodeStatus.from_json(body).attempt
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return 0
            raise AgentError(
                ExitCode.STATUS, f"cannot read s3://{self.where.bucket}/{self.where.key}: {e}"
            ) from e
        except StatusFormatError:
            return 0  # a corrupt previous object: start counting again rather than fail the node
        except BotoCoreError as e:
            raise AgentError(
                ExitCode.STATUS, f"cannot reach the status bucket {self.where.bucket}: {e}"
            ) from e

    # ---- the snapshot -------------------------------------------------------------------------
    def update(self, progress: Progress) -> None:
        with self._lock:
            self.status = replace(self.status, progress=progress)

    def _snapshot(self) -> NodeStatus:
        with self._lock:
            self.status = replace(self.status, heartbeat_ms=self._now_ms())
            return self.status

    # ---- uploads ------------------------------------------------------------------------------
    @retry(
        retry=retry_if_exception_type((ClientError, BotoCoreError)),
        stop=stop_after_attempt(5),
        wait=wait_exponential(multiplier=0.5, max=10),
        reraise=True,
    )
    def _put(self, status: NodeStatus) -> None:
        self._s3.put_object(
            Bucket=self.where.bucket,
            Key=self.where.key,
            Body=status.to_json().encode(),
            ContentType="application/json",
            **self._owned,
        )
        self.published += 1

    def publish(self) -> None:
        """Upload now; raise AgentError(STATUS) if S3 keeps refusing."""
        try:
            self._put(self._snapshot())
        except (ClientError, BotoCoreError) as e:
            raise AgentError(
                ExitCode.STATUS, f"cannot write s3://{self.where.bucket}/{self.where.key}: {e}"
            ) from e

    def start(self) -> None:
        self.publish()
        self._thread = threading.Thread(target=self._beat, name="cachewarm-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._put(self._snapshot())
            except (ClientError, BotoCoreError) as e:
                self._log(f"heartbeat to s3://{self.where.bucket}/{self.where.key} failed (will retry): {e}")

    def finish(self, state: Literal["done", "failed"], error: str | None = None) -> None:
        """Stop the heartbeat thread, then publish the final state."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self.status = replace(self.status, state=state, error=error[-MAX_ERROR_CHARS:] if error else None)
        self.publish()
