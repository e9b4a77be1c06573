"""InstallAgents and StartAgents: the SSM commands that put this deployment's agent on every instance
and start the agents (the dumper on each source node, the populator loop on each populator); the
re-sends with which CheckProgress revives an agent and the verify commands go through `send_roles`.

SendCommand has no idempotency token, so every send is recorded in the plan (S3) *before* it is made:
a retried pass that finds a recorded send without a command id looks the command up by its comment
(ListCommands for that instance, document and time window) and adopts it instead of sending again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from cachewarm.contract import inputs
from cachewarm.contract.status import ROLES

from cachewarm_controller import transport
from cachewarm_controller.agents import FAILED_COMMAND_STATES, RUNNING_COMMAND_STATES
from cachewarm_controller.awsutil import chunks
from cachewarm_controller.budget import COMMANDS_PER_PASS
from cachewarm_controller.errors import AgentInstallError, TransportError
from cachewarm_controller.history import passes
from cachewarm_controller.plan import NodePlan, Probe, RoleRun, WarmPlan
from cachewarm_controller.steps.common import Deps, Warm, load_plan, pass_result, routed

CommandRole = Literal["dump", "populate", "verify"]


def adaptive_parameter(adaptive: bool, target: float) -> str:
    """The dump document's `adaptive`: off, on (the default threshold), or the threshold itself, in
    the form its pattern takes (at most 2 decimals)."""
    if not adaptive:
        return "off"
    if target == inputs.DEFAULT_ADAPTIVE_TARGET:
        return "on"
    return f"{round(target, 2):g}"


def agent_params(warm: Warm, deps: Deps, plan: WarmPlan, row: NodePlan, role: CommandRole) -> dict[str, str]:
    """The SSM document parameters of one role's command on one node (each passes the document's
    `allowedPattern`, see `cachewarm.contract.inputs.SSM_PARAMETERS`)."""
    inp = warm.inp
    status = {
        "warmId": inp.warm_id,
        "nodeId": row.node_id,
        "statusBucket": deps.settings.status_bucket,
        "statusPrefix": inp.status_prefix,
    }
    if role == "verify":
        return {
            **status,
            "source": f"{row.private_ip}:{inp.source.memcached_port}",
            "to": ",".join(plan.destination_endpoints),
            "sampleKeys": str(inp.verify.sample_keys),
            "placement": inp.populator.placement,
        }
    common = {
        **status,
        # With the S3 transport there is no volume: the mount point is the agent's local work dir.
        "device": "none" if inp.transport == "s3" else inputs.ebs_device_path(str(row.volume_id)),
        "mount": inputs.mount_point(inp.mount_dir, inp.warm_id),
    }
    if inp.transport == "s3":
        if not plan.transport_bucket or not row.populator_id:
            raise TransportError(f"{row.node_id}: no transport bucket or populator in the plan yet")
        # The pair's own prefix: the source's and its populator's IAM reach only keys naming them.
        to_s3, from_s3 = transport.pair_urls(
            plan.transport_bucket,
            warm.region,
            warm.account,
            row.node_id,
            row.populator_id,
            warm.populator_region,
        )
        common["s3Region"] = warm.region  # the bucket's region (the populators' may differ)
        if role == "dump":
            common["toS3"] = to_s3
            common["uploadRate"] = str(inp.s3.upload_bytes_per_second if inp.s3 else 0)
        else:
            common["fromS3"] = from_s3
    if role == "dump":
        return {
            **common,
            "memcached": f"127.0.0.1:{inp.source.memcached_port}",
            "threads": str(inp.dumper.threads),
            "maxItemsPerSecond": str(inp.dumper.max_items_per_second),
            "maxBytesPerSecond": str(inp.dumper.max_bytes_per_second),
            "adaptive": adaptive_parameter(inp.dumper.adaptive, inp.dumper.adaptive_target),
            "order": inp.dumper.order,
            "crawlSleepUs": "server" if inp.dumper.crawl_sleep_us is None else str(inp.dumper.crawl_sleep_us),
        }
    # Add mode re-checks each file against the source node; a populator in another region cannot
    # reach it (security groups do not cross regions): it runs without, and its summary says so.
    recheck = "none" if warm.populator_region else f"{row.private_ip}:{inp.source.memcached_port}"
    return {
        **common,
        "to": ",".join(plan.destination_endpoints),
        "recheckSource": recheck,
        "mode": inp.populator.mode,
        "placement": inp.populator.placement,
        "maxItemsPerSecond": str(inp.populator.max_items_per_second),
        "maxBytesPerSecond": str(inp.populator.max_bytes_per_second),
    }


def _document(deps: Deps, role: CommandRole) -> str:
    docs = deps.settings.documents
    return {"dump": docs.dump, "populate": docs.populate, "verify": docs.verify}[role]


def _target(row: NodePlan, role: CommandRole) -> str:
    return row.node_id if role == "dump" else str(row.populator_id)


def _comment(warm: Warm, row: NodePlan, role: CommandRole, attempt: int) -> str:
    return f"cachewarm {warm.warm_id} {role} {row.node_id} #{attempt}"


def send_roles(warm: Warm, deps: Deps, plan: WarmPlan, todo: Sequence[tuple[NodePlan, CommandRole]]) -> int:
    """Send one command per (node, role): record the intent, save, send, save. Returns how many were
    sent (fewer when the Lambda's time runs short: the rest stay recorded as not sent)."""
    now = deps.now_ms()
    for row, role in todo:
        run: RoleRun = getattr(row, role)
        setattr(row, role, RoleRun(attempt=run.attempt + 1, sending_ms=now, sent_ms=run.sent_ms))
    deps.s3.save_plan(warm.prefix, plan)
    sent = 0
    try:
        for row, role in todo:
            if deps.deadline.running_out():
                break
            run = getattr(row, role)
            cid = deps.agents.send(
                _document(deps, role),
                [_target(row, role)],
                agent_params(warm, deps, plan, row, role),
                _comment(warm, row, role, run.attempt),
            )
            setattr(row, role, RoleRun(command_id=cid, attempt=run.attempt, sent_ms=deps.now_ms()))
            sent += 1
    finally:
        deps.s3.save_plan(warm.prefix, plan)
    return sent


def reconcile(warm: Warm, deps: Deps, plan: WarmPlan, roles: Sequence[CommandRole]) -> bool:
    """Adopt the commands an interrupted send made (recorded as sending, no id); sends that never
    happened are cleared so they are sent again. True if the plan changed."""
    changed = False
    for row in plan.nodes:
        for role in roles:
            run: RoleRun = getattr(row, role)
            if run.command_id or not run.sending_ms:
                continue
            cid = deps.agents.find_sent(
                _document(deps, role),
                _target(row, role),
                run.sending_ms,
                _comment(warm, row, role, run.attempt),
            )
            if cid:
                setattr(row, role, RoleRun(command_id=cid, attempt=run.attempt, sent_ms=run.sending_ms))
            else:  # never sent: back to the previous attempt; the caller sends it now
                setattr(row, role, RoleRun(attempt=run.attempt - 1, sent_ms=run.sent_ms))
            changed = True
    return changed


# ---- InstallAgents ------------------------------------------------------------------------------------


def install_agents(warm: Warm, state: dict[str, int], deps: Deps) -> dict[str, Any]:
    """Install this deployment's agent on every source node and populator (the install-agent document:
    on populators it first waits for cloud-init, whose user data installed the same version; on source
    nodes it installs or finds the version already there), 50 instances per command. Ready when every
    instance reports success: the agent is there and `cachewarm --version` is this deployment's."""
    plan = load_plan(warm, deps)
    deps = routed(deps, warm.populator_region, plan)
    sources = {r.node_id for r in plan.nodes}
    populators = {str(r.populator_id) for r in plan.nodes}
    targets = sorted(sources | populators)
    doc = deps.settings.documents.install
    fresh = not plan.install_commands
    if fresh:
        # One command reaches one region: a cross-region warm's populators get their own batches.
        groups = [sorted(sources), sorted(populators)] if warm.populator_region else [targets]
        batches = [b for g in groups for b in chunks(g, inputs.SSM_MAX_TARGETS)]
        plan.install_commands = [Probe(command_id="", instance_ids=list(b)) for b in batches]
        plan.install_sending_ms = deps.now_ms()
        deps.s3.save_plan(warm.prefix, plan)
    sent = 0
    for n, probe in enumerate(plan.install_commands):
        if probe.command_id or sent >= COMMANDS_PER_PASS or deps.deadline.running_out():
            continue
        comment = f"cachewarm {warm.warm_id} install {n}"
        found = (
            None
            if fresh
            else deps.agents.find_sent(doc, probe.instance_ids[0], plan.install_sending_ms, comment)
        )
        probe.command_id = found or deps.agents.send(doc, probe.instance_ids, {}, comment)
        sent += 1
    if sent:
        deps.s3.save_plan(warm.prefix, plan)
    pending: list[str] = []
    for probe in plan.install_commands:
        if not probe.command_id or sent:  # just sent: look at the results next pass
            pending.extend(probe.instance_ids)
            continue
        results = deps.agents.invocations(probe.command_id)
        for iid in probe.instance_ids:
            inv = results.get(iid)
            if inv is None or inv.status in RUNNING_COMMAND_STATES:
                pending.append(iid)
            elif inv.status in FAILED_COMMAND_STATES or inv.status != "Success":
                raise AgentInstallError(
                    f"installing the agent on {iid} failed ({inv.status}, exit {inv.response_code}): "
                    f"{inv.output.strip()[-500:]} (docs/runbook.md §4)"
                )
    ready = not pending
    if ready and not plan.installed:
        plan.installed = True
        deps.s3.save_plan(warm.prefix, plan)
    return pass_result(
        state,
        ready=ready,
        progressed=False,
        limit=passes("InstallAgents", warm.inp, len(plan.nodes)),
        what="agent installs",
        pending=pending,
        instances=len(targets),
        commands=len(plan.install_commands),
    )


# ---- StartAgents --------------------------------------------------------------------------------------


def start_agents(warm: Warm, state: dict[str, int], deps: Deps) -> dict[str, Any]:
    """Dumper on each source node, populator loop on each populator: at most a batch of commands per
    pass, each recorded before it is sent (a retry adopts or re-sends, never doubles)."""
    plan = load_plan(warm, deps)
    deps = routed(deps, warm.populator_region, plan)
    if reconcile(warm, deps, plan, ROLES):
        deps.s3.save_plan(warm.prefix, plan)
    todo = [(r, role) for r in plan.nodes for role in ROLES if getattr(r, role).command_id is None]
    sent = send_roles(warm, deps, plan, todo[:COMMANDS_PER_PASS]) if todo else 0
    left = len(todo) - sent
    return pass_result(
        state,
        ready=left == 0,
        progressed=True,
        limit=passes("StartAgents", warm.inp, len(plan.nodes)),
        what="agent starts",
        pending=[f"{r.node_id}/{role}" for r, role in todo[sent:]],
        commands=sent,
    )
