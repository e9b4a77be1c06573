"""What every step shares: its injected dependencies, the Lambdas' settings, the plan, backoff."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cachewarm_controller.agents import AgentRunner
from cachewarm_controller.attach import VolumeAttacher
from cachewarm_controller.errors import PlanError, WaitTimedOutError
from cachewarm_controller.model import WarmInput, WarmPlan
from cachewarm_controller.store import S3Store, StatusReader

MAX_BACKOFF_S = 60


@dataclass(frozen=True)
class Settings:
    """What the Lambdas read from their environment (set by the CDK stack)."""

    status_bucket: str
    dump_document: str
    populate_document: str
    kms_key_id: str | None = None


@dataclass
class Deps:
    """Everything a step touches, injected (tests pass moto clients and fakes)."""

    ec2: Any
    s3: S3Store
    agents: AgentRunner
    attacher: VolumeAttacher
    settings: Settings
    statuses: StatusReader | None = None  # defaults to the S3 store
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def status_reader(self) -> StatusReader:
        return self.statuses if self.statuses is not None else self.s3


def backoff_seconds(attempt: int, base: int = 5) -> int:
    return int(min(base * 2 ** min(attempt, 10), MAX_BACKOFF_S))


def load_plan(inp: WarmInput, deps: Deps) -> WarmPlan:
    """The plan Plan saved; every later step starts from it."""
    warm = deps.s3.load_plan(inp.status_prefix, inp.warm_id)
    if warm is None:
        raise PlanError(
            f"no plan for warm {inp.warm_id} in s3://{deps.settings.status_bucket} (Plan did not run?)"
        )
    return warm


def wait_result(ready: bool, attempt: int, limit: int, what: str, pending: Sequence[str]) -> dict[str, Any]:
    """The output of one check of a bounded wait loop (the ASL waits `wait_seconds`, then checks again)."""
    if not ready and attempt + 1 >= limit:
        raise WaitTimedOutError(
            f"{what} not ready after {limit} checks; still waiting for: {', '.join(list(pending)[:10])}"
        )
    return {
        "ready": ready,
        "attempt": attempt + 1,
        "wait_seconds": backoff_seconds(attempt),
        "pending": len(pending),
    }
