"""CheckProgress and Verify: read the agents' status objects and SSM command states; revive a stale
or failed agent, fail a node past its revive budget or the warm past its deadline; verify the result."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from cachewarm.contract.status import ROLES, NodeStatus, Role

from cachewarm_controller.agents import FAILED_COMMAND_STATES
from cachewarm_controller.errors import NodeFailedError, VerifyFailedError, WarmTimedOutError
from cachewarm_controller.model import NodePlan, RoleRun, WarmInput
from cachewarm_controller.steps.agent_commands import send_agent
from cachewarm_controller.steps.common import Deps, load_plan
from cachewarm_controller.store import StatusMap


@dataclass(frozen=True)
class NodeAssessment:
    """What one poll concludes about one node: done, fine for now, or one agent to revive (and why)."""

    done: bool
    revive: Role | None = None  # the role to re-run
    reason: str = ""


def assess_node(
    row: NodePlan,
    statuses: dict[str, NodeStatus | None],
    commands: dict[str, str],
    now_ms: int,
    stale_after_ms: int,
) -> NodeAssessment:
    """Is this node done, fine, or does one of its agents need a revive (and why)?"""
    pop = statuses.get("populate")
    if pop is not None and pop.state == "done":
        return NodeAssessment(done=True)
    for role in ROLES:
        run: RoleRun = getattr(row, role)
        st = statuses.get(role)
        cmd = commands.get(run.command_id or "", "Unknown")
        if role == "dump" and st is not None and st.state == "done":
            continue  # dump finished; only the populator has work left
        # Only a failure written after the current command was sent counts (an older one is what
        # the resumed agent is about to overwrite); this needs no attempt counter shared with the agent.
        if st is not None and st.state == "failed" and st.heartbeat_ms >= run.sent_ms:
            return NodeAssessment(False, role, f"{role} agent reported failure: {st.error or 'no message'}")
        if cmd in FAILED_COMMAND_STATES:
            return NodeAssessment(False, role, f"{role} SSM command {run.command_id} {cmd}")
        if cmd == "Success":
            return NodeAssessment(
                False, role, f"{role} command {run.command_id} exited without a done status"
            )
        last = max(st.heartbeat_ms if st is not None else 0, run.sent_ms)
        if now_ms - last > stale_after_ms:
            return NodeAssessment(False, role, f"{role} heartbeat stale for {(now_ms - last) // 1000}s")
    return NodeAssessment(done=False)


def check_progress(inp: WarmInput, poll: int, deps: Deps) -> dict[str, Any]:
    """One poll at replica level: aggregate every node's status objects and SSM command status, revive
    stale/failed agents (resume), fail a node past its revive budget or the warm past its deadline."""
    warm = load_plan(inp, deps)
    now = deps.now_ms()
    cmd_ids = [c for r in warm.nodes for c in (r.dump.command_id, r.populate.command_id) if c]
    # Commands first, then status objects: an agent writes `done` before its command ends, so a command
    # seen finished always has its final status object visible here (the other order reads an agent
    # that finishes in between as "exited without a done status").
    commands = deps.agents.statuses(cmd_ids, warm.started_ms)
    statuses: StatusMap = deps.status_reader().read_statuses(inp.status_prefix, inp.warm_id)
    stale_ms = inp.polling.stale_after_seconds * 1000
    revived: list[dict[str, str]] = []
    failures: list[str] = []
    done = dumped = 0
    items = bytes_ = 0
    changed = False
    for row in warm.nodes:
        mine = {role: statuses.get((role, row.node_id)) for role in ROLES}
        pop = mine["populate"]
        if pop is not None:
            items += pop.progress.items
            bytes_ += pop.progress.bytes
        if mine["dump"] is not None and mine["dump"].state == "done":
            dumped += 1
        assessment = assess_node(row, mine, commands, now, stale_ms)
        changed |= row.done != assessment.done
        row.done = assessment.done
        done += assessment.done
        if assessment.revive is None:
            continue
        if row.revives >= inp.polling.max_revives:
            failures.append(
                f"{row.node_id}: {assessment.reason} "
                f"(revived {row.revives}x, max_revives={inp.polling.max_revives})"
            )
            continue
        old = getattr(row, assessment.revive).command_id
        if old and commands.get(old) not in FAILED_COMMAND_STATES | {"Success"}:
            deps.agents.cancel([old])  # hung but still "running": stop it before the resume
        send_agent(inp, deps, warm, row, assessment.revive)
        row.revives += 1
        revived.append({"node": row.node_id, "role": assessment.revive, "reason": assessment.reason})
        # Record each revive at once: SendCommand has no idempotency token, so a crash between the
        # send and this write is the only way a retried poll could start a second agent.
        deps.s3.save_plan(inp.status_prefix, warm)
    if changed:  # most polls change nothing: no plan write
        deps.s3.save_plan(inp.status_prefix, warm)
    if failures:
        raise NodeFailedError(f"{len(failures)} node(s) failed: " + "; ".join(failures[:10]))
    total = len(warm.nodes)
    deadline = warm.started_ms + int(inp.polling.deadline_hours * 3600 * 1000)
    if done < total and now > deadline:
        raise WarmTimedOutError(
            f"warm {inp.warm_id} passed its {inp.polling.deadline_hours} h deadline "
            f"with {done}/{total} nodes done"
        )
    return {
        "done": done == total,
        "poll": poll + 1,
        "nodes": total,
        "nodes_done": done,
        "nodes_dumped": dumped,
        "items": items,
        "bytes": bytes_,
        "revived": revived[:20],
        "revived_count": len(revived),
        "wait_seconds": inp.polling.interval_seconds,
    }


def verify(inp: WarmInput, deps: Deps) -> dict[str, Any]:
    """Every node's populate is done; on a sample of nodes, the populate consumed exactly what the dump
    wrote (files, and items unless disabled) with no error. Deterministic sample per warm id."""
    warm = load_plan(inp, deps)
    statuses = deps.status_reader().read_statuses(inp.status_prefix, inp.warm_id)
    problems: list[str] = []
    for row in warm.nodes:
        pop = statuses.get(("populate", row.node_id))
        if pop is None or pop.state != "done":
            problems.append(f"{row.node_id}: populate not done")
    k = min(inp.verify.sample_nodes, len(warm.nodes))
    sample = random.Random(inp.warm_id).sample(warm.nodes, k)
    for row in sample:
        dump = statuses.get(("dump", row.node_id))
        pop = statuses.get(("populate", row.node_id))
        if dump is None or dump.state != "done":
            problems.append(f"{row.node_id}: dump not done")
            continue
        if pop is None:
            continue
        if pop.error:
            problems.append(f"{row.node_id}: populate error {pop.error}")
        if pop.progress.files != dump.progress.files:
            problems.append(f"{row.node_id}: populated {pop.progress.files} of {dump.progress.files} files")
        if inp.verify.require_item_match and pop.progress.items != dump.progress.items:
            problems.append(f"{row.node_id}: populated {pop.progress.items} of {dump.progress.items} items")
    if problems:
        raise VerifyFailedError(f"{len(problems)} problem(s): " + "; ".join(problems[:10]))
    return {
        "nodes": len(warm.nodes),
        "sampled": k,
        "items": sum(s.progress.items for (role, _), s in statuses.items() if role == "populate"),
    }
