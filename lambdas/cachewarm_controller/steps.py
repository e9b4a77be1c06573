"""The controller's steps: plain typed functions over injected AWS clients/interfaces.

Every step is idempotent (a Retry or a re-run converges instead of duplicating): resources are
found by their warm-id/node tags before anything is created, and EC2 calls carry ClientTokens
derived from warm id + node. Per-node work happens here, inside one call per step, so the state
machine's history grows with the number of polls, not with the number of nodes.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cachewarm_controller.agents import FAILED_COMMAND_STATES, AgentRunner
from cachewarm_controller.attach import LIVE_STATES, VolumeAttacher, require_nitro
from cachewarm_controller.awsutil import (
    TAG_ASG,
    TAG_NODE,
    TAG_REPLICA,
    TAG_ROLE,
    TAG_WARM_ID,
    chunks,
    client_token,
    tag_value,
    tags,
)
from cachewarm_controller.errors import (
    AttachmentLimitError,
    InvalidInputError,
    NodeFailedError,
    PlanError,
    ResourceFailedError,
    VerifyFailedError,
    WaitTimedOutError,
    WarmTimedOutError,
)
from cachewarm_controller.model import (
    MULTI_ATTACH_LIMIT,
    NodePlan,
    NodeStats,
    RoleRun,
    WarmInput,
    WarmPlan,
    device_path,
    parse_input,
    volume_size_gib,
)
from cachewarm_controller.store import NodeStatus, S3Store, StatusMap, StatusReader

LIVE_INSTANCE_STATES = ["pending", "running", "stopping", "stopped", "shutting-down"]
MAX_BACKOFF_S = 60
DEFAULT_MOUNT_DIR = "/mnt/cachewarm"
# Teardown force-detaches after this many polite tries (a hung mount must not keep a volume alive).
FORCE_DETACH_AFTER = 3


@dataclass(frozen=True)
class Settings:
    """What the Lambdas read from their environment (set by the CDK stack)."""

    status_bucket: str
    dump_document: str
    populate_document: str
    kms_key_id: str | None = None


@dataclass
class Deps:
    """Everything a step touches, injected (tests pass moto clients and fakes)."""

    ec2: Any
    s3: S3Store
    agents: AgentRunner
    attacher: VolumeAttacher
    settings: Settings
    statuses: StatusReader | None = None  # defaults to the S3 store
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def status_reader(self) -> StatusReader:
        return self.statuses if self.statuses is not None else self.s3


def backoff_seconds(attempt: int, base: int = 5) -> int:
    return int(min(base * 2 ** min(attempt, 10), MAX_BACKOFF_S))


# ---- inventory (what exists for a warm id) ----------------------------------------------------------


@dataclass
class Inventory:
    volumes: list[dict[str, Any]] = field(default_factory=list)
    instances: list[dict[str, Any]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.volumes and not self.instances

    def describe(self) -> str:
        vols = ", ".join(f"{v['VolumeId']} ({v['State']})" for v in self.volumes[:10])
        insts = ", ".join(f"{i['InstanceId']} ({i['State']['Name']})" for i in self.instances[:10])
        return f"volumes: [{vols}] instances: [{insts}]"


def inventory(ec2: Any, warm_id: str, volumes: bool = True, instances: bool = True) -> Inventory:
    """Every live volume and instance tagged with the warm id (terminated instances do not count)."""
    inv = Inventory()
    flt = [{"Name": f"tag:{TAG_WARM_ID}", "Values": [warm_id]}]
    if volumes:
        for page in ec2.get_paginator("describe_volumes").paginate(Filters=flt):
            inv.volumes.extend(v for v in page["Volumes"] if v["State"] != "deleted")
    if instances:
        for page in ec2.get_paginator("describe_instances").paginate(
            Filters=[*flt, {"Name": "instance-state-name", "Values": LIVE_INSTANCE_STATES}]
        ):
            for res in page["Reservations"]:
                inv.instances.extend(res["Instances"])
    return inv


# ---- 1. validate -------------------------------------------------------------------------------------


def validate(raw: object, ec2: Any) -> WarmInput:
    """Reject bad input before anything exists; also refuse a warm id that already owns resources
    (another execution, or leftovers a teardown must clean first) — tearing those down would hurt it."""
    inp = parse_input(raw)
    inv = inventory(ec2, inp.warm_id)
    if not inv.empty:
        raise InvalidInputError(
            f"warm_id {inp.warm_id!r} is in use: resources tagged {TAG_WARM_ID}={inp.warm_id} exist "
            f"({inv.describe()}); pick a new warm id or run the teardown for it"
        )
    return inp


# ---- 2. plan -----------------------------------------------------------------------------------------


def _running_instances(
    ec2: Any, filters: list[dict[str, Any]], ids: Sequence[str] | None = None
) -> list[dict]:
    found: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"Filters": filters}
    if ids:
        kwargs["InstanceIds"] = list(ids)
    for page in ec2.get_paginator("describe_instances").paginate(**kwargs):
        for res in page["Reservations"]:
            found.extend(res["Instances"])
    return found


def _source_nodes(inp: WarmInput, ec2: Any, agents: AgentRunner) -> tuple[str | None, list[dict]]:
    src = inp.source
    running = [{"Name": "instance-state-name", "Values": ["running"]}]
    if src.instance_ids:
        from botocore.exceptions import ClientError

        try:
            nodes = _running_instances(ec2, running, src.instance_ids)
        except ClientError as exc:
            raise PlanError(f"source.instance_ids: {exc}") from exc
        missing = sorted(set(src.instance_ids) - {n["InstanceId"] for n in nodes})
        if missing:
            raise PlanError(f"source.instance_ids not found or not running: {', '.join(missing)}")
        return src.replica, nodes
    if src.replica:
        nodes = _running_instances(ec2, [*running, {"Name": f"tag:{TAG_REPLICA}", "Values": [src.replica]}])
        if not nodes:
            raise PlanError(f"source.replica {src.replica!r}: no running instance tagged {TAG_REPLICA}")
        return src.replica, nodes
    if src.asg_name:
        nodes = _running_instances(ec2, [*running, {"Name": f"tag:{TAG_ASG}", "Values": [src.asg_name]}])
        if not nodes:
            raise PlanError(f"source.asg_name {src.asg_name!r}: no running instances")
        return src.asg_name, nodes
    # No source given: the replica (other than the destination) holding the most items.
    by_replica: dict[str, list[dict]] = {}
    dst = inp.destination
    for n in _running_instances(ec2, [*running, {"Name": "tag-key", "Values": [TAG_REPLICA]}]):
        name = tag_value(n, TAG_REPLICA) or ""
        in_destination = name == dst.replica or (
            dst.asg_name is not None and tag_value(n, TAG_ASG) == dst.asg_name
        )
        if not in_destination:
            by_replica.setdefault(name, []).append(n)
    if not by_replica:
        raise PlanError(
            f"no source given and no running replica tagged {TAG_REPLICA} (besides the destination)"
        )
    totals = {}
    for name, nodes in sorted(by_replica.items()):
        stats = _stats(inp, [n["InstanceId"] for n in nodes], agents)
        totals[name] = sum(s.items for s in stats.values())
    best = max(sorted(totals), key=lambda r: totals[r])
    return best, by_replica[best]


def _destination_endpoints(inp: WarmInput, ec2: Any, source_ids: set[str]) -> list[str]:
    dst = inp.destination
    if dst.endpoints:
        return list(dst.endpoints)
    running = [{"Name": "instance-state-name", "Values": ["running"]}]
    if dst.replica:
        nodes = _running_instances(ec2, [*running, {"Name": f"tag:{TAG_REPLICA}", "Values": [dst.replica]}])
        what = f"destination.replica {dst.replica!r}"
    else:
        nodes = _running_instances(ec2, [*running, {"Name": f"tag:{TAG_ASG}", "Values": [str(dst.asg_name)]}])
        what = f"destination.asg_name {dst.asg_name!r}"
    if not nodes:
        raise PlanError(f"{what}: no running instances to warm")
    overlap = sorted(source_ids & {n["InstanceId"] for n in nodes})
    if overlap:
        raise PlanError(
            f"{what} includes source nodes {', '.join(overlap[:5])}: a replica cannot warm itself"
        )
    return sorted(f"{n['PrivateIpAddress']}:{dst.port}" for n in nodes)


def _stats(inp: WarmInput, ids: Sequence[str], agents: AgentRunner) -> dict[str, NodeStats]:
    supplied = inp.source.node_stats or {}
    out = {i: supplied[i] for i in ids if i in supplied}
    missing = [i for i in ids if i not in out]
    if missing:
        out.update(agents.memcached_stats(missing, inp.source.memcached_port))
    return out


def _check_launch_template(inp: WarmInput, ec2: Any) -> str:
    """The template exists and launches a Nitro type; returns its instance type."""
    from botocore.exceptions import ClientError

    pop = inp.populator
    ref: dict[str, Any] = (
        {"LaunchTemplateId": pop.launch_template_id}
        if pop.launch_template_id
        else {"LaunchTemplateName": pop.launch_template_name}
    )
    try:
        versions = ec2.describe_launch_template_versions(**ref, Versions=[pop.launch_template_version])
    except ClientError as exc:
        raise PlanError(
            f"populator launch template {ref} version {pop.launch_template_version}: {exc}"
        ) from exc
    data = versions["LaunchTemplateVersions"][0].get("LaunchTemplateData", {})
    itype = data.get("InstanceType")
    if not itype:
        raise PlanError(f"populator launch template {ref} sets no InstanceType (a Nitro type is required)")
    require_nitro(ec2, {f"launch template {next(iter(ref.values()))}": itype})
    return str(itype)


def plan(inp: WarmInput, deps: Deps) -> dict[str, Any]:
    """One row per source node: AZ, subnet, data size, volume size. Saved to S3; a summary returned."""
    replica, nodes = _source_nodes(inp, deps.ec2, deps.agents)
    require_nitro(deps.ec2, {n["InstanceId"]: n["InstanceType"] for n in nodes})
    _check_launch_template(inp, deps.ec2)
    subnets = inp.populator.subnet_ids
    if subnets:
        for sub in deps.ec2.describe_subnets(SubnetIds=sorted(set(subnets.values())))["Subnets"]:
            for az, sid in subnets.items():
                if sid == sub["SubnetId"] and sub["AvailabilityZone"] != az:
                    raise PlanError(
                        f"populator.subnet_ids.{az}: {sid} is in {sub['AvailabilityZone']}, not {az} "
                        "(multi-attach volumes are single-AZ)"
                    )
    endpoints = _destination_endpoints(inp, deps.ec2, {n["InstanceId"] for n in nodes})
    stats = _stats(inp, [n["InstanceId"] for n in nodes], deps.agents)
    rows = []
    for n in sorted(nodes, key=lambda n: n["InstanceId"]):
        az = n["Placement"]["AvailabilityZone"]
        st = stats[n["InstanceId"]]
        rows.append(
            NodePlan(
                node_id=n["InstanceId"],
                az=az,
                subnet_id=subnets.get(az, n.get("SubnetId", "")),
                instance_type=n["InstanceType"],
                items=st.items,
                bytes=st.bytes,
                size_gib=volume_size_gib(st.bytes, inp.volume.headroom, inp.volume.iops),
            )
        )
        if not rows[-1].subnet_id:
            raise PlanError(f"source node {n['InstanceId']} has no subnet; give populator.subnet_ids.{az}")
    warm = WarmPlan(
        warm_id=inp.warm_id,
        source_replica=replica,
        started_ms=deps.now_ms(),
        destination_endpoints=endpoints,
        nodes=rows,
    )
    deps.s3.save_plan(inp.status_prefix, warm)
    return {
        "source_replica": replica,
        "nodes": len(rows),
        "azs": sorted({r.az for r in rows}),
        "items": sum(r.items for r in rows),
        "bytes": sum(r.bytes for r in rows),
        "volume_gib": sum(r.size_gib for r in rows),
        "destination_endpoints": len(endpoints),
    }


def _load_plan(inp: WarmInput, deps: Deps) -> WarmPlan:
    warm = deps.s3.load_plan(inp.status_prefix, inp.warm_id)
    if warm is None:
        raise PlanError(
            f"no plan for warm {inp.warm_id} in s3://{deps.settings.status_bucket} (Plan did not run?)"
        )
    return warm


def _tagged(ec2: Any, kind: str, warm_id: str, role: str) -> dict[str, dict]:
    """node id -> live tagged resource of `kind` (volume | instance) for this warm."""
    inv = inventory(ec2, warm_id, volumes=kind == "volume", instances=kind == "instance")
    items = inv.volumes if kind == "volume" else inv.instances
    out: dict[str, dict] = {}
    for r in items:
        node = tag_value(r, TAG_NODE)
        if node and tag_value(r, TAG_ROLE) == role:
            out[node] = r
    return out


# ---- 3. volumes --------------------------------------------------------------------------------------


def create_volumes(inp: WarmInput, deps: Deps) -> dict[str, Any]:
    warm = _load_plan(inp, deps)
    existing = _tagged(deps.ec2, "volume", inp.warm_id, "volume")
    kms = inp.volume.kms_key_id or deps.settings.kms_key_id
    created = 0
    for row in warm.nodes:
        if row.node_id in existing:  # a retried step: adopt what the earlier try made
            row.volume_id = existing[row.node_id]["VolumeId"]
            continue
        kwargs: dict[str, Any] = {
            "AvailabilityZone": row.az,
            "Size": row.size_gib,
            "VolumeType": "io2",
            "Iops": inp.volume.iops,
            "MultiAttachEnabled": True,
            "Encrypted": True,
            "ClientToken": client_token(inp.warm_id, row.node_id, "volume"),
            "TagSpecifications": [
                {"ResourceType": "volume", "Tags": tags(inp.warm_id, row.node_id, "volume")}
            ],
        }
        if kms:
            kwargs["KmsKeyId"] = kms
        row.volume_id = deps.ec2.create_volume(**kwargs)["VolumeId"]
        created += 1
        if created % 25 == 0:
            deps.s3.save_plan(inp.status_prefix, warm)
    deps.s3.save_plan(inp.status_prefix, warm)
    return {"volumes": len(warm.nodes), "created": created, "gib": sum(r.size_gib for r in warm.nodes)}


def _wait_result(ready: bool, attempt: int, limit: int, what: str, pending: Sequence[str]) -> dict[str, Any]:
    if not ready and attempt + 1 >= limit:
        raise WaitTimedOutError(
            f"{what} not ready after {limit} checks; still waiting for: {', '.join(list(pending)[:10])}"
        )
    return {
        "ready": ready,
        "attempt": attempt + 1,
        "wait_seconds": backoff_seconds(attempt),
        "pending": len(pending),
    }


def check_volumes(inp: WarmInput, attempt: int, deps: Deps) -> dict[str, Any]:
    warm = _load_plan(inp, deps)
    ids = [r.volume_id for r in warm.nodes if r.volume_id]
    if len(ids) != len(warm.nodes):
        raise PlanError("plan has nodes without a volume (CreateVolumes incomplete)")
    pending: list[str] = []
    for batch in chunks(ids, 200):
        for v in deps.ec2.describe_volumes(VolumeIds=list(batch))["Volumes"]:
            if v["State"] in {"error", "deleting", "deleted"}:
                raise ResourceFailedError(f"volume {v['VolumeId']} is {v['State']}")
            if v["State"] != "available":
                pending.append(v["VolumeId"])
    return _wait_result(not pending, attempt, inp.polling.resource_wait_attempts, "volumes", pending)


# ---- 4. populators -----------------------------------------------------------------------------------


def launch_populators(inp: WarmInput, deps: Deps) -> dict[str, Any]:
    warm = _load_plan(inp, deps)
    existing = _tagged(deps.ec2, "instance", inp.warm_id, "populator")
    pop = inp.populator
    template: dict[str, str] = {"Version": pop.launch_template_version}
    if pop.launch_template_id:
        template["LaunchTemplateId"] = pop.launch_template_id
    else:
        template["LaunchTemplateName"] = str(pop.launch_template_name)
    launched = 0
    for row in warm.nodes:
        if row.node_id in existing:
            row.populator_id = existing[row.node_id]["InstanceId"]
            continue
        node_tags = tags(inp.warm_id, row.node_id, "populator")
        resp = deps.ec2.run_instances(
            LaunchTemplate=template,
            MinCount=1,
            MaxCount=1,
            # The source node's AZ (via its subnet): a multi-attach volume is single-AZ.
            SubnetId=row.subnet_id,
            ClientToken=client_token(inp.warm_id, row.node_id, "populator"),
            TagSpecifications=[
                {"ResourceType": "instance", "Tags": node_tags},
                {"ResourceType": "volume", "Tags": node_tags},
            ],
        )
        inst = resp["Instances"][0]
        got_az = inst.get("Placement", {}).get("AvailabilityZone")
        row.populator_id = inst["InstanceId"]
        if got_az and got_az != row.az:
            raise PlanError(
                f"populator {inst['InstanceId']} for {row.node_id} landed in {got_az}, not {row.az}"
            )
        launched += 1
        if launched % 25 == 0:
            deps.s3.save_plan(inp.status_prefix, warm)
    deps.s3.save_plan(inp.status_prefix, warm)
    return {"populators": len(warm.nodes), "launched": launched}


def check_populators(inp: WarmInput, attempt: int, deps: Deps) -> dict[str, Any]:
    """Running and SSM-online (the agent can receive commands)."""
    warm = _load_plan(inp, deps)
    ids = [r.populator_id for r in warm.nodes if r.populator_id]
    if len(ids) != len(warm.nodes):
        raise PlanError("plan has nodes without a populator (LaunchPopulators incomplete)")
    running: list[str] = []
    pending: list[str] = []
    for batch in chunks(ids, 200):
        for page in deps.ec2.get_paginator("describe_instances").paginate(InstanceIds=list(batch)):
            for res in page["Reservations"]:
                for i in res["Instances"]:
                    state = i["State"]["Name"]
                    if state in {"shutting-down", "terminated", "stopping", "stopped"}:
                        reason = i.get("StateReason", {}).get("Message", "")
                        raise ResourceFailedError(f"populator {i['InstanceId']} is {state} {reason}".strip())
                    (running if state == "running" else pending).append(i["InstanceId"])
    if running:
        online = deps.agents.online(running)
        pending.extend(i for i in running if i not in online)
    return _wait_result(not pending, attempt, inp.polling.resource_wait_attempts, "populators", pending)


# ---- 5. attach ---------------------------------------------------------------------------------------


def _describe(ec2: Any, instance_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for batch in chunks(list(instance_ids), 200):
        for page in ec2.get_paginator("describe_instances").paginate(InstanceIds=list(batch)):
            for res in page["Reservations"]:
                out.update({i["InstanceId"]: i for i in res["Instances"]})
    return out


def _free_device(instance: dict[str, Any], preferred: str) -> str:
    """A device name not used by the instance's own block devices (sdf..sdp)."""
    used = {m["DeviceName"] for m in instance.get("BlockDeviceMappings", [])}
    prefix = preferred[:-1]
    candidates = [preferred] + [f"{prefix}{c}" for c in "fghijklmnop" if f"{prefix}{c}" != preferred]
    for dev in candidates:
        if dev not in used:
            return dev
    raise ResourceFailedError(
        f"instance {instance['InstanceId']} has no free device name among {candidates[0]}..{candidates[-1]}"
    )


def attach_volumes(inp: WarmInput, deps: Deps) -> dict[str, Any]:
    """Attach each node's volume to its source node and its populator, then wait (bounded) until all
    attachments are `attached`."""
    warm = _load_plan(inp, deps)
    rows = [r for r in warm.nodes if r.volume_id and r.populator_id]
    if len(rows) != len(warm.nodes):
        raise PlanError("plan has nodes without volume or populator")
    pairs = [(str(r.volume_id), iid) for r in rows for iid in (r.node_id, str(r.populator_id))]
    described = _describe(deps.ec2, sorted({i for _, i in pairs}))
    gone = sorted({i for _, i in pairs} - described.keys())
    if gone:
        raise ResourceFailedError(f"instances not found: {', '.join(gone[:10])}")
    require_nitro(
        deps.ec2, {str(r.populator_id): described[str(r.populator_id)]["InstanceType"] for r in rows}
    )
    devices = {iid: _free_device(inst, inp.volume.device_name) for iid, inst in described.items()}
    volumes = [str(r.volume_id) for r in rows]
    current = deps.attacher.attachments(volumes)
    for vol, iid in pairs:
        live = [a for a in current.get(vol, []) if a.state in LIVE_STATES]
        if any(a.instance_id == iid for a in live):
            continue
        if len(live) >= MULTI_ATTACH_LIMIT:
            raise AttachmentLimitError(
                f"volume {vol} already has {len(live)} attachments; io2 multi-attach allows at most "
                f"{MULTI_ATTACH_LIMIT} Nitro instances"
            )
        deps.attacher.attach(vol, iid, devices[iid])
    waiting: list[str] = []
    for attempt in range(inp.polling.resource_wait_attempts):
        current = deps.attacher.attachments(volumes)
        waiting = [
            f"{vol}->{iid}"
            for vol, iid in pairs
            if not any(a.instance_id == iid and a.state == "attached" for a in current.get(vol, []))
        ]
        if not waiting:
            return {"attachments": len(pairs)}
        deps.sleep(min(2 + attempt, 10))
    raise WaitTimedOutError(f"attachments not attached: {', '.join(waiting[:10])}")


# ---- 6. agents ---------------------------------------------------------------------------------------


def _agent_params(inp: WarmInput, deps: Deps, warm: WarmPlan, row: NodePlan, role: str) -> dict[str, str]:
    common = {
        "warmId": inp.warm_id,
        "nodeId": row.node_id,
        "device": device_path(str(row.volume_id)),
        "mount": f"{inp.mount_dir}/{inp.warm_id}",
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


def _send(inp: WarmInput, deps: Deps, warm: WarmPlan, row: NodePlan, role: str) -> None:
    run: RoleRun = getattr(row, role)
    doc = deps.settings.dump_document if role == "dump" else deps.settings.populate_document
    target = row.node_id if role == "dump" else str(row.populator_id)
    cid = deps.agents.send(
        doc,
        target,
        _agent_params(inp, deps, warm, row, role),
        f"cachewarm {inp.warm_id} {role} {row.node_id}",
    )
    setattr(row, role, RoleRun(command_id=cid, attempt=run.attempt + 1, sent_ms=deps.now_ms()))


def start_agents(inp: WarmInput, deps: Deps) -> dict[str, Any]:
    """Dumper on each source node, populator loop on each populator (skips what a retry already sent)."""
    warm = _load_plan(inp, deps)
    sent = 0
    try:
        for row in warm.nodes:
            for role in ("dump", "populate"):
                if getattr(row, role).command_id is None:
                    _send(inp, deps, warm, row, role)
                    sent += 1
    finally:
        deps.s3.save_plan(inp.status_prefix, warm)  # what was sent is recorded even on failure
    return {"commands": sent}


# ---- 7. progress -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    done: bool
    revive: str | None = None  # the role to re-run
    reason: str = ""


def assess_node(
    row: NodePlan,
    statuses: dict[str, NodeStatus | None],
    commands: dict[str, str],
    now_ms: int,
    stale_after_ms: int,
) -> Verdict:
    """Is this node done, fine, or does one of its agents need a revive (and why)?"""
    pop = statuses.get("populate")
    if pop is not None and pop.state == "done":
        return Verdict(done=True)
    for role in ("dump", "populate"):
        run: RoleRun = getattr(row, role)
        st = statuses.get(role)
        cmd = commands.get(run.command_id or "", "Unknown")
        if role == "dump" and st is not None and st.state == "done":
            continue  # dump finished; only the populator has work left
        # Only a failure written after the current command was sent counts (an older one is what
        # the resumed agent is about to overwrite); this needs no attempt counter shared with the agent.
        if st is not None and st.state == "failed" and st.heartbeat_ms >= run.sent_ms:
            return Verdict(False, role, f"{role} agent reported failure: {st.error or 'no message'}")
        if cmd in FAILED_COMMAND_STATES:
            return Verdict(False, role, f"{role} SSM command {run.command_id} {cmd}")
        if cmd == "Success":
            return Verdict(False, role, f"{role} command {run.command_id} exited without a done status")
        last = max(st.heartbeat_ms if st is not None else 0, run.sent_ms)
        if now_ms - last > stale_after_ms:
            return Verdict(False, role, f"{role} heartbeat stale for {(now_ms - last) // 1000}s")
    return Verdict(done=False)


def check_progress(inp: WarmInput, poll: int, deps: Deps) -> dict[str, Any]:
    """One poll at replica level: aggregate every node's status objects and SSM command status, revive
    stale/failed agents (resume), fail a node past its revive budget or the warm past its deadline."""
    warm = _load_plan(inp, deps)
    now = deps.now_ms()
    statuses: StatusMap = deps.status_reader().read_statuses(inp.status_prefix, inp.warm_id)
    cmd_ids = [c for r in warm.nodes for c in (r.dump.command_id, r.populate.command_id) if c]
    commands = deps.agents.statuses(cmd_ids, warm.started_ms)
    stale_ms = inp.polling.stale_after_seconds * 1000
    revived: list[dict[str, str]] = []
    failures: list[str] = []
    done = dumped = 0
    items = bytes_ = 0
    changed = False
    for row in warm.nodes:
        mine = {role: statuses.get((role, row.node_id)) for role in ("dump", "populate")}
        pop = mine["populate"]
        if pop is not None:
            items += pop.progress.items
            bytes_ += pop.progress.bytes
        if mine["dump"] is not None and mine["dump"].state == "done":
            dumped += 1
        verdict = assess_node(row, mine, commands, now, stale_ms)
        changed |= row.done != verdict.done
        row.done = verdict.done
        done += verdict.done
        if verdict.revive is None:
            continue
        if row.revives >= inp.polling.max_revives:
            failures.append(
                f"{row.node_id}: {verdict.reason} "
                f"(revived {row.revives}x, max_revives={inp.polling.max_revives})"
            )
            continue
        old = getattr(row, verdict.revive).command_id
        if old and commands.get(old) not in FAILED_COMMAND_STATES | {"Success"}:
            deps.agents.cancel([old])  # hung but still "running": stop it before the resume
        _send(inp, deps, warm, row, verdict.revive)
        row.revives += 1
        revived.append({"node": row.node_id, "role": verdict.revive, "reason": verdict.reason})
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


# ---- 8. verify ---------------------------------------------------------------------------------------


def verify(inp: WarmInput, deps: Deps) -> dict[str, Any]:
    """Every node's populate is done; on a sample of nodes, the populate consumed exactly what the dump
    wrote (files, and items unless disabled) with no error. Deterministic sample per warm id."""
    warm = _load_plan(inp, deps)
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


# ---- 9. teardown -------------------------------------------------------------------------------------


def teardown(
    warm_id: str,
    status_prefix: str,
    attempt: int,
    max_attempts: int,
    deps: Deps,
    mount_dir: str = DEFAULT_MOUNT_DIR,
) -> dict[str, Any]:
    """Idempotent, from any stage: stop agents, unmount on the source nodes, detach, terminate
    populators, delete volumes, and (once nothing is left) the warm's S3 objects. Everything is found
    by the warm-id tag; the plan (if any) only names the commands to cancel."""
    warm = deps.s3.load_plan(status_prefix, warm_id)
    if warm is not None:
        live = [c for r in warm.nodes for c in (r.dump.command_id, r.populate.command_id) if c]
        if live:
            running = deps.agents.statuses(live, warm.started_ms)
            deps.agents.cancel([c for c in live if running.get(c) not in FAILED_COMMAND_STATES | {"Success"}])
    inv = inventory(deps.ec2, warm_id)
    if inv.empty:
        # Nothing (left) in EC2: the warm's S3 objects go last, so a crash before here retries cleanly.
        objects = deps.s3.delete_warm(status_prefix, warm_id)
        return {"complete": True, "attempt": attempt + 1, "wait_seconds": 0, "deleted_objects": objects}
    if attempt + 1 >= max_attempts:
        raise WaitTimedOutError(
            f"teardown of {warm_id} incomplete after {max_attempts} tries; left: {inv.describe()}"
        )
    force = attempt >= FORCE_DETACH_AFTER
    vol_ids = [v["VolumeId"] for v in inv.volumes]
    atts = deps.attacher.attachments(vol_ids) if vol_ids else {}
    if warm is not None and attempt == 0:
        # The source nodes are production cache nodes: unmount there before the detach, so no dead
        # mount is left behind (populators are terminated, nothing to clean on them).
        sources = {r.node_id for r in warm.nodes}
        mounted = sorted({a.instance_id for al in atts.values() for a in al if a.instance_id in sources})
        if mounted:
            deps.agents.unmount(mounted, f"{mount_dir}/{warm_id}", f"cachewarm {warm_id} teardown")
    for vol, alist in atts.items():
        for a in alist:
            if a.state in LIVE_STATES or (force and a.state == "detaching"):
                deps.attacher.detach(vol, a.instance_id, force)
    to_terminate = [i["InstanceId"] for i in inv.instances if i["State"]["Name"] != "shutting-down"]
    for batch in chunks(to_terminate, 500):
        deps.ec2.terminate_instances(InstanceIds=list(batch))
    deleted = 0
    for v in inv.volumes:
        if v["State"] == "available" and not atts.get(v["VolumeId"]):
            deps.ec2.delete_volume(VolumeId=v["VolumeId"])
            deleted += 1
    # Not complete yet: the next pass (after a backoff) confirms nothing is left.
    return {
        "complete": False,
        "attempt": attempt + 1,
        "wait_seconds": backoff_seconds(attempt),
        "deleted_volumes": deleted,
        "terminated": len(to_terminate),
        "volumes_left": len(inv.volumes) - deleted,
        "instances_left": len(inv.instances),
    }


_WARM_ID = re.compile(r"^[a-z0-9][a-z0-9-]{2,47}$")
_MOUNT_DIR = re.compile(r"^/[A-Za-z0-9/_.-]{1,200}$")


@dataclass(frozen=True)
class TeardownTarget:
    warm_id: str
    status_prefix: str
    mount_dir: str


def teardown_target(event: dict[str, Any]) -> TeardownTarget:
    """What to tear down, from the state machine's state or from an EventBridge 'Step Functions
    Execution Status Change' event (whose detail.input is the execution input): a rule on ABORTED /
    TIMED_OUT executions can run the same teardown, since no Catch runs for those. The values are
    checked here too: that input may never have passed ValidateInput."""
    body: Any = event
    if "detail" in event and isinstance(event["detail"], dict) and "input" in event["detail"]:
        body = json.loads(event["detail"]["input"] or "{}")
    inp = body.get("input", body) if isinstance(body, dict) else {}
    inp = inp if isinstance(inp, dict) else {}
    warm_id = inp.get("warm_id")
    if not isinstance(warm_id, str) or not _WARM_ID.match(warm_id):
        raise InvalidInputError(f"teardown needs a valid warm_id, got {warm_id!r}")
    prefix = str(inp.get("status_prefix") or "warms")
    mount_dir = inp.get("mount_dir") or DEFAULT_MOUNT_DIR
    if not isinstance(mount_dir, str) or not _MOUNT_DIR.match(mount_dir):
        mount_dir = DEFAULT_MOUNT_DIR
    return TeardownTarget(warm_id, prefix, mount_dir)
