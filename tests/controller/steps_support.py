"""Driving the steps as plain functions, the way the state machine does (tests of the steps)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cachewarm_controller.model import parse_input
from cachewarm_controller.steps.agent_commands import install_agents, start_agents
from cachewarm_controller.steps.common import Warm
from cachewarm_controller.steps.planning import claim, plan, survey
from cachewarm_controller.steps.resources import attach_volumes, create_volumes, launch_populators
from cachewarm_controller.steps.teardown import TeardownTarget, teardown, teardown_target

EXECUTION = "arn:aws:states:us-east-1:123456789012:execution:cachewarm:steps-"
Step = Callable[[Warm, dict[str, int], Any], dict[str, Any]]


def warm_of(world: Any, **kw: Any) -> Warm:
    return Warm(parse_input(world.make_input(**kw)), EXECUTION + world.warm_id)


def loop(step: Step, w: Warm, deps: Any, limit: int = 30) -> list[dict[str, Any]]:
    """Passes of a looping step until it is ready (the state machine's loop, without the waits)."""
    state: dict[str, int] = {}
    outs = []
    for _ in range(limit):
        out = step(w, state, deps)
        outs.append(out)
        if out["ready"]:
            return outs
        state = {"passes": out["passes"], "waits": out["waits"]}
    raise AssertionError(f"{step.__name__} not ready after {limit} passes")


def planned(world: Any, **kw: Any) -> Warm:
    """Claimed, surveyed and planned."""
    w = warm_of(world, **kw)
    assert claim(w, world.deps)["owned"]
    loop(survey, w, world.deps)
    plan(w, world.deps)
    return w


def through_agents(world: Any, **kw: Any) -> Warm:
    """Run the steps up to and including StartAgents."""
    w = planned(world, **kw)
    for step in (create_volumes, launch_populators, attach_volumes, install_agents, start_agents):
        loop(step, w, world.deps)
    return w


def target(w: Warm) -> TeardownTarget:
    return teardown_target({"execution_arn": w.execution_arn, "input": w.inp.model_dump(mode="json")})


def finish(world: Any, w: Warm) -> list[dict[str, Any]]:
    """Teardown passes until complete (the state machine loops the same way)."""
    state: dict[str, Any] = {}
    outs = []
    for _ in range(20):
        state = teardown(target(w), state, world.deps)
        outs.append(state)
        if state["complete"]:
            return outs
    raise AssertionError("teardown did not complete")


def tags_of(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", [])}
