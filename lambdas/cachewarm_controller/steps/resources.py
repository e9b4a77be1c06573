"""CreateVolumes, LaunchPopulators, AttachVolumes: one io2 multi-attach volume and one populator
instance per source node, the volume attached to both; CreateTransport instead of the volumes for
the S3 transport (a bucket per execution; the populators in the input's `s3.subnet_ids`).

Each is a looping step: one pass creates (or attaches) at most a batch, paced under EC2's rate limits,
then reports whether everything is ready; the state machine waits and runs the next pass. A node's
create is recorded as requested in the plan before the call and its id right after; a retried or
repeated pass re-issues the call with the same ClientToken and gets the same resource back
(`ownership`): nothing is ever found, let alone adopted, by its tags.
"""

from __future__ import annotations

from typing import Any

from cachewarm.contract import tags

from cachewarm_controller import transport
from cachewarm_controller.attach import LIVE_STATES, require_nitro
from cachewarm_controller.awsutil import chunks
from cachewarm_controller.budget import ATTACHMENTS_PER_PASS, POPULATORS_PER_PASS, VOLUMES_PER_PASS
from cachewarm_controller.errors import (
    AttachmentLimitError,
    PlanError,
    ResourceFailedError,
    TransportError,
)
from cachewarm_controller.history import passes
from cachewarm_controller.model import MULTI_ATTACH_LIMIT
from cachewarm_controller.ownership import populator_token, volume_request
from cachewarm_controller.plan import NodePlan, WarmPlan
from cachewarm_controller.steps.common import Deps, Warm, load_plan, pass_result, populator_clients
from cachewarm_controller.steps.inventory import describe_instances

FAILED_VOLUME_STATES = frozenset({"error", "deleting", "deleted"})
FAILED_INSTANCE_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})


def _request(warm: Warm, deps: Deps, plan: WarmPlan, rows: list[NodePlan], flag: str) -> None:
    """Record that these nodes' resources are being created (saved before the calls)."""
    fresh = [r for r in rows if not getattr(r, flag)]
    for r in fresh:
        setattr(r, flag, True)
    if fresh:
        deps.s3.save_plan(warm.prefix, plan)


# ---- volumes ----------------------------------------------------------------------------------------


def create_volumes(warm: Warm, state: dict[str, int], deps: Deps) -> dict[str, Any]:
    inp = warm.inp
    plan = load_plan(warm, deps)
    pacer = deps.ec2_pacer()
    created = 0
    todo = [r for r in plan.nodes if r.volume_id is None][:VOLUMES_PER_PASS]
    _request(warm, deps, plan, todo, "volume_requested")
    try:
        for row in todo:
            if deps.deadline.running_out():
                break
            pacer.wait()
            # A repeat (this node's volume was made by a pass that ended before saving) returns it.
            row.volume_id = deps.ec2.create_volume(**volume_request(plan, row, deps.settings.stack_tag))[
                "VolumeId"
            ]
            created += 1
    finally:
        if created:
            deps.s3.save_plan(warm.prefix, plan)
    pending = [r.node_id for r in plan.nodes if r.volume_id is None]
    ids = [str(r.volume_id) for r in plan.nodes if r.volume_id]
    for batch in chunks(ids, 200):
        for v in deps.ec2.describe_volumes(VolumeIds=list(batch))["Volumes"]:
            if v["State"] in FAILED_VOLUME_STATES:
                raise ResourceFailedError(f"volume {v['VolumeId']} is {v['State']}")
            if v["State"] != "available":
                pending.append(v["VolumeId"])
    return pass_result(
        state,
        ready=not pending,
        progressed=created > 0,
        limit=passes("CreateVolumes", inp, len(plan.nodes)),
        what="volumes",
        pending=pending,
        volumes=len(plan.nodes),
        created=created,
        gib=sum(r.size_gib for r in plan.nodes),
    )


# ---- populators -------------------------------------------------------------------------------------


def launch_populators(warm: Warm, state: dict[str, int], deps: Deps) -> dict[str, Any]:
    """Launch at most a batch of populators (each in its source node's AZ); ready when all are running
    and online in SSM."""
    inp = warm.inp
    plan = load_plan(warm, deps)
    # A cross-region S3 warm's populators: launched, described and found online in their region.
    there = populator_clients(warm, deps)
    pop = inp.populator
    template: dict[str, str] = {"Version": pop.launch_template_version}
    if pop.launch_template_id:
        template["LaunchTemplateId"] = pop.launch_template_id
    else:
        template["LaunchTemplateName"] = str(pop.launch_template_name)
    pacer = deps.ec2_pacer()
    launched = 0
    todo = [r for r in plan.nodes if r.populator_id is None][:POPULATORS_PER_PASS]
    _request(warm, deps, plan, todo, "populator_requested")
    try:
        for row in todo:
            if deps.deadline.running_out():
                break
            node_tags = tags.resource_tags(
                warm.warm_id, row.node_id, "populator", warm.execution_arn, deps.settings.stack_tag
            )
            pacer.wait()
            resp = there.ec2.run_instances(
                LaunchTemplate=template,
                MinCount=1,
                MaxCount=1,
                # The source node's AZ (via its subnet): a multi-attach volume is single-AZ. With the S3
                # transport, the subnet Plan picked from s3.subnet_ids.
                SubnetId=row.subnet_id,
                # A repeat (launched by a pass that ended before saving) returns the same instance.
                ClientToken=populator_token(plan, row),
                TagSpecifications=[
                    {"ResourceType": "instance", "Tags": node_tags},
                    {"ResourceType": "volume", "Tags": node_tags},
                ],
            )
            inst = resp["Instances"][0]
            row.populator_id = inst["InstanceId"]
            launched += 1
            got_az = inst.get("Placement", {}).get("AvailabilityZone")
            if got_az and got_az != row.az:
                raise PlanError(
                    f"populator {inst['InstanceId']} for {row.node_id} landed in {got_az}, not {row.az}"
                )
    finally:
        if launched:
            deps.s3.save_plan(warm.prefix, plan)
    pending = [r.node_id for r in plan.nodes if r.populator_id is None]
    running: list[str] = []
    ids = [str(r.populator_id) for r in plan.nodes if r.populator_id]
    for i in describe_instances(there.ec2, ids).values():
        st = i["State"]["Name"]
        if st in FAILED_INSTANCE_STATES:
            reason = i.get("StateReason", {}).get("Message", "")
            raise ResourceFailedError(f"populator {i['InstanceId']} is {st} {reason}".strip())
        (running if st == "running" else pending).append(i["InstanceId"])
    if running:
        online = there.agents.online(running)
        pending.extend(i for i in running if i not in online)
    return pass_result(
        state,
        ready=not pending,
        progressed=launched > 0,
        limit=passes("LaunchPopulators", inp, len(plan.nodes)),
        what="populators (running, SSM online)",
        pending=pending,
        populators=len(plan.nodes),
        launched=launched,
    )


# ---- attachments ------------------------------------------------------------------------------------


def _free_device(instance: dict[str, Any], preferred: str, taken: set[str]) -> str:
    """A device name not used by the instance's block devices nor by an attachment of this pass."""
    used = {m["DeviceName"] for m in instance.get("BlockDeviceMappings", [])} | taken
    prefix = preferred[:-1]
    candidates = [preferred] + [f"{prefix}{c}" for c in "fghijklmnop" if f"{prefix}{c}" != preferred]
    for dev in candidates:
        if dev not in used:
            return dev
    raise ResourceFailedError(
        f"instance {instance['InstanceId']} has no free device name among {candidates[0]}..{candidates[-1]}"
    )


def attach_volumes(warm: Warm, state: dict[str, int], deps: Deps) -> dict[str, Any]:
    """Attach each node's volume to its source node and its populator, at most a batch per pass;
    ready when every attachment is `attached`."""
    inp = warm.inp
    plan = load_plan(warm, deps)
    rows = [r for r in plan.nodes if r.volume_id and r.populator_id]
    if len(rows) != len(plan.nodes):
        raise PlanError("plan has nodes without volume or populator")
    pairs = [(str(r.volume_id), iid) for r in rows for iid in (r.node_id, str(r.populator_id))]
    volumes = [str(r.volume_id) for r in rows]
    current = deps.attacher.attachments(volumes)

    def live(vol: str) -> list[Any]:
        return [a for a in current.get(vol, []) if a.state in LIVE_STATES]

    todo = [(v, i) for v, i in pairs if not any(a.instance_id == i for a in live(v))]
    attached = 0
    if todo:
        batch = todo[:ATTACHMENTS_PER_PASS]
        described = describe_instances(deps.ec2, sorted({i for _, i in batch}))
        gone = sorted({i for _, i in batch} - described.keys())
        if gone:
            raise ResourceFailedError(f"instances not found: {', '.join(gone[:10])}")
        populators = {str(r.populator_id) for r in rows}
        require_nitro(deps.ec2, {i: d["InstanceType"] for i, d in described.items() if i in populators})
        pacer = deps.ec2_pacer()
        taken: dict[str, set[str]] = {}
        for vol, iid in batch:
            if deps.deadline.running_out():
                break
            if len(live(vol)) >= MULTI_ATTACH_LIMIT:
                raise AttachmentLimitError(
                    f"volume {vol} already has {len(live(vol))} attachments; io2 multi-attach allows at "
                    f"most {MULTI_ATTACH_LIMIT} Nitro instances"
                )
            device = _free_device(described[iid], inp.volume.device_name, taken.setdefault(iid, set()))
            taken[iid].add(device)
            pacer.wait()
            deps.attacher.attach(vol, iid, device)
            attached += 1
        current = deps.attacher.attachments(volumes)
    pending = [
        f"{vol}->{iid}"
        for vol, iid in pairs
        if not any(a.instance_id == iid and a.state == "attached" for a in current.get(vol, []))
    ]
    return pass_result(
        state,
        ready=not pending,
        progressed=attached > 0,
        limit=passes("AttachVolumes", inp, len(plan.nodes)),
        what="attachments",
        pending=pending,
        attachments=len(pairs),
        attached=attached,
    )


# ---- the S3 transport's bucket ------------------------------------------------------------------------


def transport_spec(warm: Warm, deps: Deps, name: str) -> transport.BucketSpec:
    spec = warm.inp.s3
    if spec is None:
        raise PlanError(f"warm {warm.warm_id} has transport {warm.inp.transport}: no bucket to create")
    key, controller = deps.settings.kms_key_id, deps.settings.controller_role_arn
    if not key or not controller:
        raise TransportError(
            "the S3 transport needs the stack's KMS key and the controller's role (KMS_KEY_ID, "
            "CONTROLLER_ROLE_ARN: the stack sets both)"
        )
    return transport.BucketSpec(
        name=name,
        region=warm.region,
        warm_id=warm.warm_id,
        execution_arn=warm.execution_arn,
        stack_tag=deps.settings.stack_tag,
        expire_days=spec.expire_days,
        kms_key_id=key,
        controller_role_arn=controller,
        account=warm.account,
        reader_role_arns=deps.settings.populator_role_arns,
    )


def create_transport(warm: Warm, state: dict[str, int], deps: Deps) -> dict[str, Any]:
    """The S3 transport's bucket of this execution (transport.py says what it carries), in the
    controller's region — the source's. Its name (a random token in it) is recorded first, in the
    controller's state and the plan; a retried pass finds the record and adopts the bucket."""
    plan = load_plan(warm, deps)
    prefix = deps.settings.transport_bucket_prefix
    drawn = transport.bucket_name(warm.warm_id, transport.new_token(), prefix)
    name = transport.recorded_bucket(deps.s3.record_transport(warm.prefix, warm.execution_arn, drawn), prefix)
    if name is None:
        raise TransportError(f"the transport record of {warm.execution_arn} names no bucket of this stack")
    if plan.transport_bucket != name:
        plan.transport_bucket = name
        deps.s3.save_plan(warm.prefix, plan)
    spec = transport_spec(warm, deps, name)
    created = transport.ensure_bucket(deps.s3.s3, spec)
    return pass_result(
        state,
        ready=True,
        progressed=created,
        limit=1,
        what="transport bucket",
        pending=[],
        bucket=spec.name,
        created=created,
    )
