"""CreateVolumes, CheckVolumes, LaunchPopulators, CheckPopulators, AttachVolumes: one io2
multi-attach volume and one populator instance per source node, the volume attached to both."""

from __future__ import annotations

from typing import Any

from cachewarm.contract import tags

from cachewarm_controller.attach import LIVE_STATES, require_nitro
from cachewarm_controller.awsutil import chunks, client_token
from cachewarm_controller.errors import (
    AttachmentLimitError,
    PlanError,
    ResourceFailedError,
    WaitTimedOutError,
)
from cachewarm_controller.model import MULTI_ATTACH_LIMIT, WarmInput
from cachewarm_controller.steps.common import Deps, load_plan, wait_result
from cachewarm_controller.steps.inventory import describe_instances, tagged


def _every_node_has(ids: list[str | None], what: str) -> list[str]:
    """`ids` (one per node in the plan), each set: else the step that sets them has not finished."""
    present = [i for i in ids if i]
    if len(present) != len(ids):
        raise PlanError(f"plan has nodes without {what}")
    return present


# ---- volumes ----------------------------------------------------------------------------------------


def create_volumes(inp: WarmInput, deps: Deps) -> dict[str, Any]:
    warm = load_plan(inp, deps)
    existing = tagged(deps.ec2, "volume", inp.warm_id, "volume")
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
                {"ResourceType": "volume", "Tags": tags.resource_tags(inp.warm_id, row.node_id, "volume")}
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


def check_volumes(inp: WarmInput, attempt: int, deps: Deps) -> dict[str, Any]:
    warm = load_plan(inp, deps)
    ids = _every_node_has([r.volume_id for r in warm.nodes], "a volume (CreateVolumes incomplete)")
    pending: list[str] = []
    for batch in chunks(ids, 200):
        for v in deps.ec2.describe_volumes(VolumeIds=list(batch))["Volumes"]:
            if v["State"] in {"error", "deleting", "deleted"}:
                raise ResourceFailedError(f"volume {v['VolumeId']} is {v['State']}")
            if v["State"] != "available":
                pending.append(v["VolumeId"])
    return wait_result(not pending, attempt, inp.polling.resource_wait_attempts, "volumes", pending)


# ---- populators -------------------------------------------------------------------------------------


def launch_populators(inp: WarmInput, deps: Deps) -> dict[str, Any]:
    warm = load_plan(inp, deps)
    existing = tagged(deps.ec2, "instance", inp.warm_id, "populator")
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
        node_tags = tags.resource_tags(inp.warm_id, row.node_id, "populator")
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
    warm = load_plan(inp, deps)
    ids = _every_node_has([r.populator_id for r in warm.nodes], "a populator (LaunchPopulators incomplete)")
    running: list[str] = []
    pending: list[str] = []
    for i in describe_instances(deps.ec2, ids).values():
        state = i["State"]["Name"]
        if state in {"shutting-down", "terminated", "stopping", "stopped"}:
            reason = i.get("StateReason", {}).get("Message", "")
            raise ResourceFailedError(f"populator {i['InstanceId']} is {state} {reason}".strip())
        (running if state == "running" else pending).append(i["InstanceId"])
    if running:
        online = deps.agents.online(running)
        pending.extend(i for i in running if i not in online)
    return wait_result(not pending, attempt, inp.polling.resource_wait_attempts, "populators", pending)


# ---- attachments ------------------------------------------------------------------------------------


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
    warm = load_plan(inp, deps)
    rows = [r for r in warm.nodes if r.volume_id and r.populator_id]
    if len(rows) != len(warm.nodes):
        raise PlanError("plan has nodes without volume or populator")
    pairs = [(str(r.volume_id), iid) for r in rows for iid in (r.node_id, str(r.populator_id))]
    described = describe_instances(deps.ec2, sorted({i for _, i in pairs}))
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
