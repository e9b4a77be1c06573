"""Issue 26, High 2: each agent speaks only for itself. A status or verify object counts only when
the instance the controller expects wrote it (its ARN ends the key, and IAM lets an instance write
only keys ending in its own ARN): a foothold on one node cannot declare another node done, fail it,
or pass its verification."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cachewarm.contract.status import VerifyResult, status_key, verify_key
from cachewarm_controller.errors import VerifyFailedError
from cachewarm_controller.steps.progress import check_progress
from cachewarm_controller.steps.verification import verify

from tests.controller.agent_sim import arn_of
from tests.controller.steps_support import finish, loop, through_agents
from tests.controller.support import BUCKET, SimNode


def _done(warm_id: str, node: str, role: str, t_ms: int) -> bytes:
    return json.dumps(
        {
            "warm_id": warm_id,
            "node_id": node,
            "role": role,
            "state": "done",
            "heartbeat_ms": t_ms,
            "progress": {"items": 1, "bytes": 1, "files": 1, "keys_listed": 1},
            "error": None,
            "attempt": 1,
        }
    ).encode()


def test_a_forged_done_from_another_instance_is_ignored(world: Any) -> None:
    world.agents.store = world.deps.s3
    # Node 0's populate never finishes: only a forgery could make it done.
    victim = world.source_ids[0]
    world.agents.nodes[victim] = SimNode(finish_after_s=10**9)
    w = through_agents(world)
    plan = world.deps.s3.load_plan(w.prefix, w.warm_id)
    other = plan.node(world.source_ids[1])
    now = world.deps.now_ms()
    forged = [
        # another node's populator writes under its own ARN, naming the victim
        status_key(w.prefix, w.warm_id, "populate", victim, arn_of(str(other.populator_id))),
        # the source node itself writes its populator's object
        status_key(w.prefix, w.warm_id, "populate", victim, arn_of(victim)),
    ]
    for key in forged:
        world.s3.put_object(Bucket=BUCKET, Key=key, Body=_done(w.warm_id, victim, "populate", now))
    world.clock.advance(601)
    out = check_progress(w, 0, world.deps)
    assert not out["done"] and out["nodes_done"] == 2, out
    finish(world, w)


def test_a_verify_result_from_another_instance_is_ignored(world: Any) -> None:
    w = through_agents(world, verify={"sample_keys": 1000})
    world.clock.advance(601)
    plan = world.deps.s3.load_plan(w.prefix, w.warm_id)
    bad = world.source_ids[0]
    world.agents.nodes[bad] = SimNode(verify_differences=400)
    # Another node's populator writes a clean result for `bad` before the real one arrives.
    other = plan.node(world.source_ids[1])
    clean = VerifyResult(w.warm_id, bad, world.deps.now_ms(), source_keys=1000, checked=1000)
    key = verify_key(w.prefix, w.warm_id, bad, arn_of(str(other.populator_id)))
    world.s3.put_object(Bucket=BUCKET, Key=key, Body=clean.to_json())
    # The real (bad) result is judged, not the forged clean one.
    with pytest.raises(VerifyFailedError, match=f"{bad}: 400 of 1000 sampled keys differ"):
        loop(verify, w, world.deps)
    finish(world, w)
