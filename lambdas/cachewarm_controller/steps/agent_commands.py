"""StartAgents: the SSM commands that run the agents (the dumper on each source node, the populator
loop on each populator); CheckProgress re-sends them to revive an agent."""

from __future__ import annotations

from typing import Any

from cachewarm.contract import inputs
from cachewarm.contract.status import ROLES, Role

from cachewarm_controller.model import NodePlan, RoleRun, WarmInput, WarmPlan
from cachewarm_controller.steps.common import Deps, load_plan


def agent_params(inp: WarmInput, deps: Deps, warm: WarmPlan, row: NodePlan, role: Role) -> dict[str, str]:
    """The SSM document parameters of one role's agent on one node (each passes the document's
    `allowedPattern`, see `cachewarm.contract.inputs.SSM_PARAMETERS`)."""
    common = {
        "warmId": inp.warm_id,
        "nodeId": row.node_id,
        "device": inputs.ebs_device_path(str(row.volume_id)),
        "mount": inputs.mount_point(inp.mount_dir, inp.warm_id),
        "statusBucket": deps.settings.status_bucket,
        "statusPrefix": inp.status_prefix,
    }
    if role == "dump":
        return {
            **common,
            "memcached": f"127.0.0.1:{inp.source.memcached_port}",
            "threads": str(inp.dumper.threads),
            "maxItemsPerSecond": str(inp.dumper.max_items_per_second),
        }
    return {
        **common,
        "to": ",".join(warm.destination_endpoints),
        "mode": inp.populator.mode,
        "maxItemsPerSecond": str(inp.populator.max_items_per_second),
    }


def send_agent(inp: WarmInput, deps: Deps, warm: WarmPlan, row: NodePlan, role: Role) -> None:
    """Send one role's command for one node and record it in the plan row (the caller saves the plan)."""
    run: RoleRun = getattr(row, role)
    doc = deps.settings.dump_document if role == "dump" else deps.settings.populate_document
    target = row.node_id if role == "dump" else str(row.populator_id)
    cid = deps.agents.send(
        doc,
        target,
        agent_params(inp, deps, warm, row, role),
        f"cachewarm {inp.warm_id} {role} {row.node_id}",
    )
    setattr(row, role, RoleRun(command_id=cid, attempt=run.attempt + 1, sent_ms=deps.now_ms()))


def start_agents(inp: WarmInput, deps: Deps) -> dict[str, Any]:
    """Dumper on each source node, populator loop on each populator (skips what a retry already sent)."""
    warm = load_plan(inp, deps)
    sent = 0
    try:
        for row in warm.nodes:
            for role in ROLES:
                if getattr(row, role).command_id is None:
                    send_agent(inp, deps, warm, row, role)
                    sent += 1
    finally:
        deps.s3.save_plan(inp.status_prefix, warm)  # what was sent is recorded even on failure
    return {"commands": sent}
