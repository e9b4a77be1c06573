"""The status prefixes another agent can flood (issue 33, Low): any agent may write objects whose key
ends in its own instance ARN anywhere under the status prefix — IAM cannot bound how many. The
controller never lists what agents write for its progress: a poll reads each expected writer's
exact key, so thousands of objects another instance wrote under a warm's prefixes change neither
what a poll concludes nor how many requests it makes; teardown deletes a bounded number of them and
leaves the rest to the status bucket's lifecycle rule."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from cachewarm.contract.status import status_key, verify_key
from cachewarm_controller import store
from cachewarm_controller.steps.progress import check_progress

from tests.controller.agent_sim import arn_of
from tests.controller.steps_support import finish, through_agents
from tests.controller.support import BUCKET

FLOOD = 1500
INTRUDER = "i-0feedfacefeedface"


def _requests(world: Any) -> Counter[str]:
    seen: Counter[str] = Counter()
    world.s3.meta.events.register("provide-client-params.s3", lambda model, **_: seen.update([model.name]))
    return seen


def _flood(world: Any, warm_id: str, victim: str) -> None:
    """One intruder's objects, each ending in its own ARN, under every prefix the controller reads."""
    body = json.dumps(
        {"warm_id": warm_id, "node_id": victim, "role": "dump", "state": "done", "heartbeat_ms": 1}
    )
    me = arn_of(INTRUDER)
    for n in range(FLOOD):
        key = [
            status_key("warms", warm_id, "dump", f"i-0{n:016x}", me),
            status_key("warms", warm_id, "populate", victim, f"x/{n}/{me}"),
            verify_key("warms", warm_id, f"n{n}", me),
        ][n % 3]
        world.s3.put_object(Bucket=BUCKET, Key=key, Body=body)


def test_a_flood_of_another_instances_objects_changes_no_poll(world: Any, monkeypatch: Any) -> None:
    world.agents.store = world.deps.s3
    w = through_agents(world)
    world.clock.advance(601)
    quiet = _requests(world)
    before = check_progress(w, 0, world.deps)
    assert before["done"] and before["nodes_done"] == 3, before
    calls = dict(quiet)
    assert "ListObjectsV2" not in calls, calls
    _flood(world, w.warm_id, world.source_ids[0])
    flooded = _requests(world)
    after = check_progress(w, 0, world.deps)
    assert {k: v for k, v in after.items() if k != "passes"} == {
        k: v for k, v in before.items() if k != "passes"
    }
    # The same reads as before the flood: no listing, one GET per expected object.
    assert "ListObjectsV2" not in flooded and flooded["GetObject"] == calls["GetObject"], (flooded, calls)
    assert world.deps.s3.foreign == []  # never read, so never judged
    # Teardown deletes at most a bounded number of agent objects (the lifecycle rule takes the rest).
    monkeypatch.setattr(store, "AGENT_OBJECTS_DELETED", 500)
    outs = finish(world, w)
    assert outs[-1]["complete"] and outs[-1]["deleted_objects"] <= 500 + 10, outs[-1]
