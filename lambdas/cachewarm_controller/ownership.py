"""What this execution created — the plan's ids, and nothing found by a tag.

Every volume and populator is recorded in the plan (S3, under the controller's own prefix) when it is
created, and only those are ever attached, detached, deleted or terminated: a tag is a label anyone
with `ec2:CreateTags` can copy, so it never decides.

The create calls carry EC2 ClientTokens. EC2 answers a request repeated with the same token and the
same parameters with the resource the first one made instead of making another (EC2 API reference,
"Ensuring idempotency"; a RunInstances token stays valid at least 24 h after the instance is
terminated). The tokens hash the plan's random nonce with the node and the kind: nobody else can
compute one, so nobody can make a resource that a create call of ours would hand back.

A resource created but not recorded (the Lambda ended between the call and the save) is recovered by
its token, not by a search: the node's `*_requested` flag is saved before the call, then
- a populator: DescribeInstances' `client-token` filter finds it (nothing is made);
- a volume: DescribeVolumes has no token filter and a volume does not show its token, so the identical
  CreateVolume is issued again — EC2 returns the volume the token made, or makes it now if the first
  call never arrived; either way its id is then recorded, and a teardown deletes it.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Sequence
from typing import Any

from cachewarm.contract import tags

from cachewarm_controller.awsutil import chunks
from cachewarm_controller.plan import NodePlan, WarmPlan

LIVE_INSTANCE_STATES = ["pending", "running", "stopping", "stopped", "shutting-down"]
# DescribeInstances takes at most 200 values per filter.
FILTER_VALUES = 200


def new_nonce() -> str:
    return secrets.token_hex(16)


def client_token(nonce: str, node_id: str, kind: str) -> str:
    """EC2 idempotency token (<= 64 ASCII characters): one per plan, node and kind."""
    digest = hashlib.sha256(f"{nonce}|{node_id}|{kind}".encode()).hexdigest()[:48]
    return f"cw-{kind[:8]}-{digest}"


def populator_token(plan: WarmPlan, row: NodePlan) -> str:
    return client_token(plan.nonce, row.node_id, "populator")


def volume_request(plan: WarmPlan, row: NodePlan, stack_tag: str | None) -> dict[str, Any]:
    """The CreateVolume request of the node's volume: built from the plan alone, so a later pass or a
    teardown issues exactly the same one."""
    request: dict[str, Any] = {
        "AvailabilityZone": row.az,
        "Size": row.size_gib,
        "VolumeType": "io2",
        "Iops": plan.volume_iops,
        "MultiAttachEnabled": True,
        "Encrypted": True,
        "ClientToken": client_token(plan.nonce, row.node_id, "volume"),
        "TagSpecifications": [
            {
                "ResourceType": "volume",
                "Tags": tags.resource_tags(
                    plan.warm_id, row.node_id, "volume", plan.execution_arn, stack_tag
                ),
            }
        ],
    }
    if plan.volume_kms_key_id:
        request["KmsKeyId"] = plan.volume_kms_key_id
    return request


def recover_volumes(ec2: Any, plan: WarmPlan, stack_tag: str | None, take: Callable[[], bool]) -> bool:
    """Record the volumes requested but not recorded (re-issuing their CreateVolume, `take()` allowing
    each call); True when the plan changed."""
    changed = False
    for row in plan.nodes:
        if row.volume_requested and row.volume_id is None and take():
            row.volume_id = ec2.create_volume(**volume_request(plan, row, stack_tag))["VolumeId"]
            changed = True
    return changed


def recover_populators(ec2: Any, plan: WarmPlan) -> bool:
    """Record the populators launched but not recorded, found by their ClientToken; True when the plan
    changed. A token EC2 does not know launched nothing."""
    wanted = {
        populator_token(plan, r): r for r in plan.nodes if r.populator_requested and r.populator_id is None
    }
    changed = False
    for batch in chunks(sorted(wanted), FILTER_VALUES):
        resp = ec2.describe_instances(Filters=[{"Name": "client-token", "Values": list(batch)}])
        for res in resp["Reservations"]:
            for inst in res["Instances"]:
                row = wanted.get(str(inst.get("ClientToken", "")))
                if row is not None and row.populator_id is None:
                    row.populator_id = inst["InstanceId"]
                    changed = True
    return changed


def volume_ids(plan: WarmPlan) -> list[str]:
    return [str(r.volume_id) for r in plan.nodes if r.volume_id]


def populator_ids(plan: WarmPlan) -> list[str]:
    return [str(r.populator_id) for r in plan.nodes if r.populator_id]


def live_volumes(ec2: Any, ids: Sequence[str]) -> list[dict[str, Any]]:
    """The volumes among `ids` that still exist (a filter, not VolumeIds: one deleted id does not fail
    the call)."""
    found: list[dict[str, Any]] = []
    for batch in chunks(list(ids), FILTER_VALUES):
        for page in ec2.get_paginator("describe_volumes").paginate(
            Filters=[{"Name": "volume-id", "Values": list(batch)}]
        ):
            found.extend(v for v in page["Volumes"] if v["State"] != "deleted")
    return found


def live_instances(ec2: Any, ids: Sequence[str]) -> list[dict[str, Any]]:
    """The instances among `ids` not yet terminated."""
    found: list[dict[str, Any]] = []
    for batch in chunks(list(ids), FILTER_VALUES):
        for page in ec2.get_paginator("describe_instances").paginate(
            Filters=[
                {"Name": "instance-id", "Values": list(batch)},
                {"Name": "instance-state-name", "Values": LIVE_INSTANCE_STATES},
            ]
        ):
            for res in page["Reservations"]:
                found.extend(res["Instances"])
    return found
