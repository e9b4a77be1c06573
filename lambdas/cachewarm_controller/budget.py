"""How much work one Lambda call may do, so that no call runs into its timeout.

Nothing waits inside a Lambda: every wait is a Wait state, and per-node work is split into passes of
at most the sizes below (the state machine loops the step until it reports `ready`). Within a pass,
EC2 mutations are paced under EC2's request-rate buckets (mutating and resource-intensive actions
refill at ~5 tokens/s per account and region; we use 2/s and leave the rest to everyone else).

`tests/controller/test_budget.py` runs every step for 300 nodes (and for `MAX_SOURCE_NODES`) against
clients that count the AWS calls each pass makes, prices them with `ASSUMED_CALL_S` and asserts the
worst pass fits in `WORST_CASE_SHARE` of `LAMBDA_TIMEOUT_S`. At run time a pass also stops early when
less than `RESERVE_S` of the Lambda's time is left (slow AWS); the next pass continues.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

# The controller Lambdas' timeout (infra/cachewarm_infra/props.py; a test keeps the two equal).
LAMBDA_TIMEOUT_S = 300
WORST_CASE_SHARE = 0.5
RESERVE_S = 90.0

# Assumed worst latency of one AWS call that succeeds (botocore's adaptive retries included once).
ASSUMED_CALL_S = {
    "mutate": 2.0,  # EC2 Create/Run/Attach/Detach/Delete/Terminate, SSM SendCommand/CancelCommand
    "read": 1.0,  # EC2 Describe*, SSM List*/Describe*, Auto Scaling Describe*
    "s3": 0.25,  # one S3 GET/PUT/LIST/DELETE of a small object
}

# EC2 mutations per second, paced in-process (Pacer).
EC2_MUTATIONS_PER_S = 2.0
# Per pass of a looping step.
VOLUMES_PER_PASS = 50
POPULATORS_PER_PASS = 50
ATTACHMENTS_PER_PASS = 50
COMMANDS_PER_PASS = 50  # SendCommand calls (agent starts, verify commands)
# Per CheckProgress poll.
COMMAND_LOOKUPS_PER_POLL = 40  # ListCommands by id, for agents whose status objects say too little
REVIVES_PER_POLL = 15  # each is a CancelCommand + SendCommand; the rest wait for the next poll
# Per Teardown pass: EC2/SSM mutations (cancel, unmount sends, detach, terminate batches, delete).
# The pass also describes the plan's volumes and populators by id (200 per call: ~10 reads for 1,000
# nodes), so two fewer mutations keep its worst pass inside the share.
TEARDOWN_CALLS_PER_PASS = 43
# Parallel S3 GETs of the status objects (S3Store.workers).
STATUS_READERS = 16


@dataclass
class Pacer:
    """At most `rate` calls per second: `wait()` before each call."""

    rate: float
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    _next: float = field(default=0.0, init=False)

    def wait(self) -> None:
        now = self.clock()
        if now < self._next:
            self.sleep(self._next - now)
            now = self._next
        self._next = now + 1.0 / self.rate


@dataclass
class Deadline:
    """The Lambda's remaining time (from its context); `None` = unlimited (tests, tools)."""

    remaining_ms: Callable[[], int] | None = None

    def left_s(self) -> float:
        return float("inf") if self.remaining_ms is None else self.remaining_ms() / 1000.0

    def running_out(self) -> bool:
        """True when a pass should stop taking on work and return (the next pass continues)."""
        return self.left_s() < RESERVE_S
