"""An agent writes its final S3 object (done status, verify result) and then its SSM command ends.
A step that reads the S3 objects first and the command states second can see an agent that ends in
between as "ended without writing": these tests end the agent exactly there (when the step asks SSM)
and expect the step to read the S3 objects again instead of reviving or failing a finished agent.
(tests/system hit this: an agent ending between the reads failed ~1 run in 3 before b7d8680.)"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cachewarm.contract.status import VerifyResult, verify_key
from cachewarm_controller.steps.progress import check_progress
from cachewarm_controller.steps.verification import verify

from tests.controller.agent_sim import arn_of
from tests.controller.steps_support import finish, loop, through_agents
from tests.controller.support import SimNode


def _write_result(world: Any, store: Any, cid: str) -> None:
    """What the verify agent of command `cid` writes when it ends: 1,000 keys compared, no difference."""
    p = world.agents.commands[cid].parameters
    result = VerifyResult(p["warmId"], p["nodeId"], world.deps.now_ms(), source_keys=1000, checked=1000)
    key = verify_key(
        p["statusPrefix"], p["warmId"], p["nodeId"], arn_of(world.agents.commands[cid].instance_ids[0])
    )
    store.s3.put_object(Bucket=store.bucket, Key=key, Body=result.to_json())


def test_check_progress_rereads_the_status_of_an_agent_that_ended_after_the_first_read(world: Any) -> None:
    w = through_agents(world)
    node = world.source_ids[0]
    world.agents.nodes[node] = SimNode(silent_attempts=1)  # no status object yet: its command is asked about
    real = world.agents.command_states

    def ending(ids: Sequence[str]) -> dict[str, str]:
        # The agent writes `done` and its command ends now: after CheckProgress read the statuses.
        world.agents.nodes[node] = SimNode(finish_after_s=0)
        return dict(real(ids))

    world.agents.command_states = ending
    out = check_progress(w, 0, world.deps)
    assert out["revived"] == [], out["revived"]
    assert world.deps.s3.load_plan(w.prefix, w.warm_id).node(node).done
    world.agents.command_states = real
    finish(world, w)


def test_verify_rereads_the_result_of_an_agent_that_ended_after_the_first_read(world: Any) -> None:
    w = through_agents(world)
    world.clock.advance(601)  # every populate done
    store, world.agents.results = world.agents.results, None  # the verify agents write nothing yet

    def ending(ids: Sequence[str]) -> dict[str, str]:
        # Each verify agent asked about writes its result and ends now: after Verify read the results.
        for cid in ids:
            _write_result(world, store, cid)
        return {cid: "Success" for cid in ids}

    world.agents.command_states = ending
    out = loop(verify, w, world.deps)[-1]
    assert out["ready"] and out["checked_keys"] == 3000 and out["differences"] == 0, out
    finish(world, w)


def test_verify_reads_each_result_once_and_keeps_the_judged_ones_in_the_plan(world: Any) -> None:
    # At 1,000 sampled nodes, re-reading every result on every pass is most of a pass's time.
    w = through_agents(world)
    world.clock.advance(601)  # every populate done
    store, world.agents.results = world.agents.results, None  # the verify agents write nothing yet
    late = sorted(world.source_ids)[0]
    asked: list[list[str]] = []
    held: list[str] = []
    real_read = world.deps.s3.read_verify

    def spy(prefix: str, warm_id: str, writers: dict[str, str]) -> dict[str, VerifyResult]:
        asked.append(sorted(writers))
        return real_read(prefix, warm_id, writers)

    def ending(ids: Sequence[str]) -> dict[str, str]:
        # Asked about, each agent but `late` writes its result and ends; `late` does so a pass later.
        out = {}
        for cid in ids:
            p = world.agents.commands[cid].parameters
            if p["nodeId"] == late and not held:
                held.append(cid)
                out[cid] = "InProgress"
                continue
            _write_result(world, store, cid)
            out[cid] = "Success"
        return out

    world.deps.s3.read_verify = spy
    world.agents.command_states = ending
    outs = loop(verify, w, world.deps)
    assert outs[-1]["ready"] and outs[-1]["checked_keys"] == 3000 and outs[-1]["differences"] == 0, outs[-1]
    everyone = sorted(world.source_ids)
    others = [n for n in everyone if n != late]
    # Sent (nothing to read yet); all three read, two ended and read again; then only `late`, twice.
    assert asked == [everyone, everyone, others, [late], [late]], asked
    plan = world.deps.s3.load_plan(w.prefix, w.warm_id)
    assert all(n.verified == [1000, 0] for n in plan.nodes), [n.verified for n in plan.nodes]
    # A retried pass reads nothing and still reports every node's figures.
    again = verify(w, {"passes": outs[-1]["passes"], "waits": outs[-1]["waits"]}, world.deps)
    assert again["ready"] and again["checked_keys"] == 3000 and again["sampled"] == 3, again
    assert asked[5:] == [[]], asked
    finish(world, w)
