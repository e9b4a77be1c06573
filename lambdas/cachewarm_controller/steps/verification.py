"""Verify: every node's populate is done, and on a sample of source nodes the destination really holds
the source's items — `cachewarm agent verify` (the `cachewarm verify --sample` comparison) runs on
each sampled node's populator against that source node and the destination, and writes its result
to `<prefix>/<warm-id>/verify/<node-id>.json`. A looping step: the first pass sends the commands,
later passes read the results.
"""

from __future__ import annotations

import random
from typing import Any

from cachewarm.contract.status import VerifyResult

from cachewarm_controller.agents import FAILED_COMMAND_STATES
from cachewarm_controller.budget import COMMAND_LOOKUPS_PER_POLL, COMMANDS_PER_PASS
from cachewarm_controller.errors import VerifyFailedError
from cachewarm_controller.history import passes
from cachewarm_controller.plan import NodePlan, WarmPlan
from cachewarm_controller.steps.agent_commands import reconcile, send_roles
from cachewarm_controller.steps.common import Deps, Warm, load_plan, pass_result, routed

ENDED = FAILED_COMMAND_STATES | {"Success"}  # command states of an agent that runs no more


def sample_nodes(warm: Warm, plan: WarmPlan) -> list[NodePlan]:
    """The nodes verified: a deterministic sample per warm id."""
    k = min(warm.inp.verify.sample_nodes, len(plan.nodes))
    return random.Random(warm.warm_id).sample(plan.nodes, k)


def _count_problems(warm: Warm, plan: WarmPlan, sample: list[NodePlan], deps: Deps) -> list[str]:
    """The agents' own accounts: every populate done; on the sample, populate consumed every file
    (and item) the dump published, with no error."""
    statuses = deps.status_reader().read_statuses(
        warm.prefix, warm.warm_id, plan.status_writers(warm.populator_region)
    )
    problems: list[str] = []
    for row in plan.nodes:
        pop = statuses.get(("populate", row.node_id))
        if pop is None or pop.state != "done":
            problems.append(f"{row.node_id}: populate not done")
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
        if warm.inp.verify.require_item_match and pop.progress.items != dump.progress.items:
            problems.append(f"{row.node_id}: populated {pop.progress.items} of {dump.progress.items} items")
    return problems


def judge(result: VerifyResult, max_ratio: float) -> str | None:
    """Why this node's comparison fails the warm (None: it passes)."""
    if result.error:
        return f"verify could not compare: {result.error}"
    if result.checked == 0:
        return f"verify compared no keys (source listed {result.source_keys})" if result.source_keys else None
    if result.differences > max_ratio * result.checked:
        return (
            f"{result.differences} of {result.checked} sampled keys differ (missing {result.missing}, "
            f"value {result.value_mismatch}, flags {result.flags_mismatch}, ttl {result.ttl_mismatch}); "
            f"allowed {max_ratio:.4%}" + (f"; e.g. {result.examples[0]}" if result.examples else "")
        )
    return None


def verify(warm: Warm, state: dict[str, int], deps: Deps) -> dict[str, Any]:
    plan = load_plan(warm, deps)
    deps = routed(deps, warm.populator_region, plan)  # populators' commands: their region's SSM
    sample = sample_nodes(warm, plan)
    if not state.get("passes"):  # first pass: the agents' own accounts; the comparisons follow
        problems = _count_problems(warm, plan, sample, deps)
        if problems:
            raise VerifyFailedError(f"{len(problems)} problem(s): " + "; ".join(problems[:10]))
        return pass_result(
            state,
            ready=not sample,
            progressed=True,
            limit=passes("Verify", warm.inp, len(plan.nodes)) + 1,
            what="verify results",
            pending=[r.node_id for r in sample],
            nodes=len(plan.nodes),
            sampled=len(sample),
            checked_keys=0,
            differences=0,
        )
    problems: list[str] = []
    if reconcile(warm, deps, plan, ("verify",)):
        deps.s3.save_plan(warm.prefix, plan)
    todo = [(r, "verify") for r in sample if r.verify.command_id is None]
    sent = send_roles(warm, deps, plan, todo[:COMMANDS_PER_PASS]) if todo else 0  # type: ignore[arg-type]
    # Only the results not judged on an earlier pass are read (a judged one is kept in the plan).
    unjudged = [r for r in sample if not r.verified]
    writers = plan.verify_writers([r.node_id for r in unjudged], warm.populator_region)
    results = deps.s3.read_verify(warm.prefix, warm.warm_id, writers)
    waiting = [r for r in unjudged if r.node_id not in results]
    ask = [str(r.verify.command_id) for r in waiting if r.verify.command_id][:COMMAND_LOOKUPS_PER_POLL]
    commands = deps.agents.command_states(ask) if ask and not sent else {}
    ended = [r for r in waiting if commands.get(str(r.verify.command_id)) in ENDED]
    if ended:
        # The agent writes its result before its command ends: one that ended after the read above
        # has it written now (unread, it looks like "ended without a result").
        results.update(
            deps.s3.read_verify(
                warm.prefix,
                warm.warm_id,
                plan.verify_writers([r.node_id for r in ended], warm.populator_region),
            )
        )
        waiting = [r for r in unjudged if r.node_id not in results]
    for row in waiting:
        status = commands.get(str(row.verify.command_id))
        if status in ENDED:
            problems.append(
                f"{row.node_id}: the verify command on {row.populator_id} ended {status} without a result"
            )
    judged = False
    for row in unjudged:
        res = results.get(row.node_id)
        if res is None:
            continue
        why = judge(res, warm.inp.verify.max_difference_ratio)
        if why:
            problems.append(f"{row.node_id}: {why}")
        else:
            row.verified, judged = [res.checked, res.differences], True
    pending = [r.node_id for r in waiting]
    if problems:
        raise VerifyFailedError(f"{len(problems)} problem(s): " + "; ".join(problems[:10]))
    if judged:
        deps.s3.save_plan(warm.prefix, plan)
    return pass_result(
        state,
        ready=not pending,
        progressed=False,
        limit=passes("Verify", warm.inp, len(plan.nodes)) + 1,
        what="verify results",
        pending=pending,
        nodes=len(plan.nodes),
        sampled=len(sample),
        checked_keys=sum(r.verified[0] for r in sample if r.verified),
        differences=sum(r.verified[1] for r in sample if r.verified),
    )
