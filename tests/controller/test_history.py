"""No input can make an execution outgrow Step Functions' 25,000-event history: the worst case is
derived here from the ASL file's own graph (its loops and the events each state kind writes) and must
equal the controller's model (`cachewarm_controller.history`), which ValidateInput enforces."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from cachewarm.contract.inputs import MAX_SOURCE_NODES
from cachewarm_controller import history
from cachewarm_controller.errors import InvalidInputError
from cachewarm_controller.model import WarmInput, parse_input
from cachewarm_controller.steps.planning import validate

from tests.controller.support import ASL_PATH, SimNode

STATES: dict[str, dict[str, Any]] = json.loads(ASL_PATH.read_text())["States"]
START = json.loads(ASL_PATH.read_text())["StartAt"]


def successors(name: str) -> list[str]:
    st = STATES[name]
    out = [st[k] for k in ("Next", "Default") if k in st]
    out += [c["Next"] for c in st.get("Choices", [])] + [c["Next"] for c in st.get("Catch", [])]
    return out


def strongly_connected() -> list[list[str]]:
    """Tarjan's algorithm over the state graph."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in successors(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    for s in STATES:
        if s not in index:
            visit(s)
    return out


COMPONENTS = strongly_connected()
LOOPS = {
    c_task: comp
    for comp in COMPONENTS
    if len(comp) > 1
    for c_task in comp
    if STATES[c_task]["Type"] == "Task"
}


def events(name: str) -> int:
    return history.STATE_EVENTS[STATES[name]["Type"]]


def asl_worst_case(inp: WarmInput, nodes: int = MAX_SOURCE_NODES) -> int:
    """The longest path through the ASL's graph of components, each loop taken to its bound."""
    comp_of = {s: tuple(sorted(c)) for c in COMPONENTS for s in c}

    def weight(comp: tuple[str, ...]) -> int:
        if len(comp) == 1:
            return events(comp[0])
        (task,) = [s for s in comp if STATES[s]["Type"] == "Task"]
        return history.passes(task, inp, nodes) * sum(events(s) for s in comp)

    memo: dict[tuple[str, ...], int] = {}

    def longest(comp: tuple[str, ...]) -> int:
        if comp not in memo:
            nxt = {comp_of[t] for s in comp for t in successors(s)} - {comp}
            memo[comp] = weight(comp) + max((longest(n) for n in nxt), default=0)
        return memo[comp]

    return history.EXECUTION_EVENTS + longest(comp_of[START])


def test_every_loop_of_the_asl_is_one_task_the_model_bounds() -> None:
    assert all(len([s for s in c if STATES[s]["Type"] == "Task"]) == 1 for c in COMPONENTS if len(c) > 1)
    assert set(LOOPS) == set(history.LOOP_EVENTS)
    for task, comp in LOOPS.items():
        assert sum(events(s) for s in comp) == history.LOOP_EVENTS[task], task


INTERVALS = [5, 30, 60, 180, 600, 3600]
DEADLINES = [0.5, 24, 72, 240]
WAITS = [1, 40, 200, 500]


@pytest.mark.parametrize(
    ("interval", "deadline", "waits"), list(itertools.product(INTERVALS, DEADLINES, WAITS))
)
def test_the_model_is_the_asls_worst_case_and_validation_keeps_it_in_budget(
    world: Any, interval: int, deadline: float, waits: int
) -> None:
    body = world.make_input(
        polling={"interval_seconds": interval, "deadline_hours": deadline, "resource_wait_attempts": waits}
    )
    inp = parse_input(body)
    worst = asl_worst_case(inp)
    assert history.worst_case_events(inp) == worst
    try:
        validate(body, world.deps)
    except InvalidInputError as exc:
        assert worst > history.HISTORY_BUDGET, exc
        assert "history events" in str(exc)
    else:
        assert worst <= history.HISTORY_BUDGET


def test_the_issues_examples() -> None:
    """Interval 5 s with 240 h allowed ~1.5 M events; 30 s overflowed in 24 h. Both are refused now."""
    base = {
        "warm_id": "w-1x",
        "destination": {"endpoints": ["a:1"]},
        "populator": {"launch_template_id": "lt-01234567"},
    }
    for polling in (
        {"interval_seconds": 5, "deadline_hours": 240},
        {"interval_seconds": 30, "deadline_hours": 24},
    ):
        inp = parse_input({**base, "polling": polling})
        assert history.history_problem(inp) is not None
        assert history.min_interval_s(inp) > polling["interval_seconds"]
        fixed = parse_input({**base, "polling": {**polling, "interval_seconds": history.min_interval_s(inp)}})
        assert history.history_problem(fixed) is None


def test_deployed_defaults_fit() -> None:
    """The input every trigger sends (the rules give only ids, endpoints and the template)."""
    inp = WarmInput.model_validate(
        {
            "warm_id": "w-1x",
            "destination": {"endpoints": ["a:1"]},
            "populator": {"launch_template_id": "lt-01234567"},
        }
    )
    assert history.history_problem(inp) is None
    assert history.worst_case_events(inp) <= history.HISTORY_BUDGET
    est = history.worst_case(inp)
    print(f"\ndefaults: worst case {est.events} events ({est.describe()})")


def test_an_executed_run_stays_within_the_model(world: Any) -> None:
    """A run that revives a node and polls a while writes no more events than the model allows for
    its node count."""
    world.agents.nodes[world.source_ids[0]] = SimNode(silent_attempts=1)
    body = world.make_input()
    ex = world.run(body)
    assert ex.status == "SUCCEEDED"
    assert len(ex.events) <= history.worst_case_events(parse_input(body), nodes=3)
