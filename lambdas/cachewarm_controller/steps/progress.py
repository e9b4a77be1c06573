"""CheckProgress: read the agents' status objects (and, for the agents whose objects say too little,
their SSM command states); revive a stale, failed or stalled agent; fail a node past its revive budget
or the warm past its deadline.

Progress, not heartbeats: a node whose items/bytes/files/keys have not moved for
`polling.stalled_after_seconds` is stalled even while its heartbeat is fresh — revived once, and the
warm fails naming it the second time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cachewarm.contract.status import ROLES, NodeStatus, Role

from cachewarm_controller.agents import FAILED_COMMAND_STATES, NOT_INSTALLED_EXIT, WRONG_VERSION_EXIT
from cachewarm_controller.budget import COMMAND_LOOKUPS_PER_POLL, REVIVES_PER_POLL
from cachewarm_controller.errors import NodeFailedError, WarmTimedOutError
from cachewarm_controller.plan import NodePlan, RoleRun
from cachewarm_controller.steps.agent_commands import CommandRole, reconcile, send_roles
from cachewarm_controller.steps.common import Deps, Warm, load_plan, routed
from cachewarm_controller.store import StatusMap

# A status object this old makes the controller ask SSM about the agent's command (agents write
# theirs every 30 s).
QUIET_AFTER_MS = 90_000
NodeLog = Callable[[dict[str, Any]], None]


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


def progress_mark(mine: dict[str, NodeStatus | None]) -> list[int]:
    """Everything that moves while a node makes progress: both agents' items, bytes, files, keys."""
    mark: list[int] = []
    for role in ROLES:
        st = mine.get(role)
        p = st.progress if st is not None else None
        mark += [p.items, p.bytes, p.files, p.keys_listed] if p is not None else [0, 0, 0, 0]
    return mark


def _lookups(warm: Warm, rows: list[NodePlan], statuses: StatusMap, now: int) -> list[str]:
    """The commands worth asking SSM about: agents not done whose status object is missing or quiet
    (oldest first, at most COMMAND_LOOKUPS_PER_POLL): only this warm's commands, by id."""
    quiet: list[tuple[int, str]] = []
    for row in rows:
        if row.done:
            continue
        for role in ROLES:
            run: RoleRun = getattr(row, role)
            st = statuses.get((role, row.node_id))
            if not run.command_id or (st is not None and st.state == "done"):
                continue
            seen = st.heartbeat_ms if st is not None else 0
            if now - seen > QUIET_AFTER_MS:
                quiet.append((seen, run.command_id))
    return [cid for _, cid in sorted(quiet)[:COMMAND_LOOKUPS_PER_POLL]]


def _fatal_exit(deps: Deps, cid: str) -> str | None:
    """A failed command whose document found no agent (127) or another version (126): not revivable."""
    for inv in deps.agents.invocations(cid).values():
        if inv.response_code in (NOT_INSTALLED_EXIT, WRONG_VERSION_EXIT):
            return f"exit {inv.response_code} on {inv.instance_id}: {inv.output.strip()[-300:]}"
    return None


def check_progress(warm: Warm, poll: int, deps: Deps, log: NodeLog = lambda fields: None) -> dict[str, Any]:
    """One poll at replica level (docs/status-objects.md has the rules)."""
    inp = warm.inp
    plan = load_plan(warm, deps)
    deps = routed(deps, warm.populator_region, plan)  # populators' commands: their region's SSM
    now = deps.now_ms()
    changed = reconcile(warm, deps, plan, ROLES)
    writers = plan.status_writers(warm.populator_region)
    statuses: StatusMap = deps.status_reader().read_statuses(inp.status_prefix, inp.warm_id, writers)
    commands = deps.agents.command_states(_lookups(warm, plan.nodes, statuses, now))
    if any(s == "Success" or s in FAILED_COMMAND_STATES for s in commands.values()):
        # An agent writes its final status before its command ends: one that ended after the read
        # above has it written now (unread, it looks like "exited without a done status").
        statuses = deps.status_reader().read_statuses(inp.status_prefix, inp.warm_id, writers)
    stale_ms = inp.polling.stale_after_seconds * 1000
    stalled_ms = inp.polling.stalled_after_seconds * 1000
    revive: list[tuple[NodePlan, CommandRole, str]] = []
    failures: list[str] = []
    done = dumped = 0
    items = bytes_ = 0
    # The dumpers' pace now (running dumps only): items/s read from the sources in all, and how many
    # are backing off to spare their source's live clients (the adaptive guard).
    dump_rate = backing_off = 0
    for row in plan.nodes:
        mine = {role: statuses.get((role, row.node_id)) for role in ROLES}
        pop, dump = mine["populate"], mine["dump"]
        if pop is not None:
            items += pop.progress.items
            bytes_ += pop.progress.bytes
        dumped += dump is not None and dump.state == "done"
        dumping = dump is not None and dump.state not in ("done", "failed")
        pace = dump.progress if dump is not None and dumping else None
        if pace is not None:
            dump_rate += pace.items_per_s
            backing_off += pace.backing_off
        verdict = assess_node(row, mine, commands, now, stale_ms)
        mark = progress_mark(mine)
        if mark != row.progress_mark or not row.progress_ms:
            row.progress_mark, row.progress_ms, changed = mark, now, True
        still_s = (now - row.progress_ms) // 1000
        if not verdict.done and verdict.revive is None and now - row.progress_ms > stalled_ms:
            role: Role = "dump" if dump is None or dump.state != "done" else "populate"
            if row.stall_revives >= 1:
                failures.append(f"{row.node_id}: stalled, no progress for {still_s}s after a revive ({role})")
            else:
                verdict = NodeAssessment(False, role, f"stalled: no progress for {still_s}s")
                row.stall_revives += 1
        changed |= row.done != verdict.done
        row.done = verdict.done
        done += verdict.done
        log(
            {
                "node_id": row.node_id,
                "dump_state": dump.state if dump else "none",
                "populate_state": pop.state if pop else "none",
                "items": pop.progress.items if pop else 0,
                "bytes": pop.progress.bytes if pop else 0,
                "files": pop.progress.files if pop else 0,
                "dump_items": dump.progress.items if dump else 0,
                "dump_items_per_s": pace.items_per_s if pace else 0,
                "dump_limit_items_per_s": pace.limit_items_per_s if pace else 0,
                "dump_backing_off": int(pace.backing_off) if pace else 0,
                # What the source's clients feel (the guard's probes; a done dump: its whole run).
                "dump_probe_p99_us": dump.progress.probe_p99_us if dump else 0,
                "dump_probe_baseline_us": dump.progress.probe_baseline_us if dump else 0,
                "dump_backed_off_ms": dump.progress.backed_off_ms if dump else 0,
                "still_s": still_s,
                "revives": row.revives,
            }
        )
        if verdict.revive is None:
            continue
        old = getattr(row, verdict.revive).command_id
        fatal = _fatal_exit(deps, old) if old and commands.get(old) == "Failed" else None
        if fatal:
            failures.append(f"{row.node_id}: {verdict.revive} agent cannot run: {fatal}")
        elif row.revives >= inp.polling.max_revives:
            failures.append(
                f"{row.node_id}: {verdict.reason} "
                f"(revived {row.revives}x, max_revives={inp.polling.max_revives})"
            )
        else:
            revive.append((row, verdict.revive, verdict.reason))
    if failures:
        if changed:
            deps.s3.save_plan(inp.status_prefix, plan)
        raise NodeFailedError(f"{len(failures)} node(s) failed: " + "; ".join(failures[:10]))
    revive = revive[:REVIVES_PER_POLL]  # the rest are found again next poll
    for row, role, _ in revive:
        old = getattr(row, role).command_id
        if old and commands.get(old) not in FAILED_COMMAND_STATES | {"Success"}:
            deps.agents.cancel([old])  # hung but still "running": stop it before the resume
        row.revives += 1
        row.progress_ms = now  # give the resumed agent a full stall window
    if revive:
        send_roles(warm, deps, plan, [(row, role) for row, role, _ in revive])  # saves the plan
    elif changed:
        deps.s3.save_plan(inp.status_prefix, plan)
    total = len(plan.nodes)
    deadline = plan.started_ms + int(inp.polling.deadline_hours * 3600 * 1000)
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
        "revived": [{"node": r.node_id, "role": role, "reason": why} for r, role, why in revive][:20],
        "revived_count": len(revive),
        "dump_items_per_s": dump_rate,
        "dumps_backing_off": backing_off,
        "wait_seconds": inp.polling.interval_seconds,
    }
