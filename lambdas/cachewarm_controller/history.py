"""The worst-case size of an execution's history, from the input: no valid input can make an execution
reach Step Functions' hard limit of 25,000 events.

Every loop of `statemachine/warm.asl.json` runs one Task per pass and has a bound that the Task itself
enforces (it raises once the bound is reached): `passes()` below. A run that takes every loop to its
bound, then fails and tears down, is the longest; `worst_case_events()` counts it without Lambda
retries, and ValidateInput refuses input above `HISTORY_BUDGET`. The 5,000 events between the budget
and the limit are the room for retried Lambda attempts (3 events each: ~1,600 retries per execution).

`tests/controller/test_history.py` derives the same count from the ASL file's own graph (its cycles,
and the events each state kind writes) and checks it against this model and against executed runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cachewarm.contract.inputs import MAX_SOURCE_NODES, SSM_MAX_TARGETS

from cachewarm_controller import budget
from cachewarm_controller.model import WarmInput

HISTORY_LIMIT = 25_000
HISTORY_BUDGET = 20_000

# Events one visit of a state writes, without retries (Task: entered, scheduled, started, succeeded,
# exited; a failed attempt that is retried adds scheduled, started, failed).
STATE_EVENTS = {"Task": 5, "Choice": 2, "Wait": 2, "Pass": 2, "Succeed": 2, "Fail": 1}
EXECUTION_EVENTS = 2  # ExecutionStarted + ExecutionSucceeded/Failed
RETRY_EVENTS = 3

# The loops' Tasks and the events of one pass: Task + Choice (+ Wait when the loop waits).
LOOP_EVENTS = {
    "SurveyReplicas": 9,
    "CreateVolumes": 9,
    "LaunchPopulators": 9,
    "AttachVolumes": 9,
    "InstallAgents": 9,
    "StartAgents": 7,
    "CheckProgress": 9,
    "Verify": 9,
    "Teardown": 9,
}
# The states on the longest path that are in no loop: ValidateInput, ClaimWarmId, WarmIdClaimed?,
# Plan, WhichTransport?, VolumesOrBucket?, WarmOutcome, WarmSucceeded. (The volume transport's path is
# the longest: the S3 transport skips the CreateVolumes and AttachVolumes loops for one CreateTransport.)
LINEAR_EVENTS = 5 + 5 + 2 + 5 + 2 + 2 + 2 + 2

# Teardown passes that only wait (detaching, terminating) besides the passes that do its calls.
TEARDOWN_WAIT_PASSES = 60
# Calls a teardown of MAX_SOURCE_NODES makes at most: cancel two commands per node, detach and
# delete one volume per node, the unmount commands (50 instances each), terminate batches of 500.
TEARDOWN_CALLS = 4 * MAX_SOURCE_NODES + 2 * math.ceil(2 * MAX_SOURCE_NODES / SSM_MAX_TARGETS)
TEARDOWN_MAX_PASSES = math.ceil(TEARDOWN_CALLS / budget.TEARDOWN_CALLS_PER_PASS) + TEARDOWN_WAIT_PASSES


def polls(inp: WarmInput) -> int:
    """CheckProgress runs once per interval until the deadline (measured from Plan), then fails."""
    return math.floor(inp.polling.deadline_hours * 3600 / inp.polling.interval_seconds) + 2


def passes(task: str, inp: WarmInput, nodes: int = MAX_SOURCE_NODES) -> int:
    """The most passes the loop of `task` makes (the Task raises WaitTimedOutError at this bound)."""
    waits = inp.polling.resource_wait_attempts
    commands_out = math.ceil(2 * nodes / SSM_MAX_TARGETS)
    bounds = {
        "SurveyReplicas": 1 + waits,
        "CreateVolumes": math.ceil(nodes / budget.VOLUMES_PER_PASS) + waits,
        "LaunchPopulators": math.ceil(nodes / budget.POPULATORS_PER_PASS) + waits,
        "AttachVolumes": math.ceil(2 * nodes / budget.ATTACHMENTS_PER_PASS) + waits,
        "InstallAgents": math.ceil(commands_out / budget.COMMANDS_PER_PASS) + waits,
        "StartAgents": math.ceil(2 * nodes / budget.COMMANDS_PER_PASS),
        "CheckProgress": polls(inp),
        # A first pass checks the agents' counts, then passes send the commands and wait.
        "Verify": 1 + math.ceil(min(inp.verify.sample_nodes, nodes) / budget.COMMANDS_PER_PASS) + waits,
        "Teardown": TEARDOWN_MAX_PASSES,
    }
    return bounds[task]


@dataclass(frozen=True)
class HistoryEstimate:
    events: int
    by_loop: dict[str, int]

    def describe(self) -> str:
        top = sorted(self.by_loop.items(), key=lambda kv: -kv[1])[:3]
        return ", ".join(f"{name} {n}" for name, n in top)


def worst_case(inp: WarmInput, nodes: int = MAX_SOURCE_NODES) -> HistoryEstimate:
    by_loop = {task: passes(task, inp, nodes) * per for task, per in LOOP_EVENTS.items()}
    return HistoryEstimate(EXECUTION_EVENTS + LINEAR_EVENTS + sum(by_loop.values()), by_loop)


def worst_case_events(inp: WarmInput, nodes: int = MAX_SOURCE_NODES) -> int:
    return worst_case(inp, nodes).events


def history_problem(inp: WarmInput) -> str | None:
    """Why this input could make an execution's history too long (None: it cannot)."""
    est = worst_case(inp)
    if est.events <= HISTORY_BUDGET:
        return None
    p = inp.polling
    return (
        f"polling: an execution could write {est.events} history events (largest: {est.describe()}), "
        f"above the budget of {HISTORY_BUDGET} (Step Functions stops at {HISTORY_LIMIT}): with "
        f"deadline_hours={p.deadline_hours} use an interval_seconds of at least "
        f"{min_interval_s(inp)}, or lower deadline_hours or resource_wait_attempts"
    )


def min_interval_s(inp: WarmInput) -> int:
    """The shortest polling interval that keeps this input within the budget (others unchanged)."""
    rest = worst_case_events(inp) - polls(inp) * LOOP_EVENTS["CheckProgress"]
    room_polls = max(1, (HISTORY_BUDGET - rest) // LOOP_EVENTS["CheckProgress"] - 2)
    return math.ceil(inp.polling.deadline_hours * 3600 / room_polls)
