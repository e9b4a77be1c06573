"""ValidateInput and Plan: the states before anything is created."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError
from cachewarm.contract import tags

from cachewarm_controller.attach import require_nitro
from cachewarm_controller.errors import InvalidInputError, PlanError
from cachewarm_controller.model import NodePlan, WarmInput, WarmPlan, parse_input, volume_size_gib
from cachewarm_controller.steps.common import Deps
from cachewarm_controller.steps.inventory import (
    destination_endpoints,
    inventory,
    node_stats,
    source_nodes,
)


def validate(raw: object, ec2: Any) -> WarmInput:
    """Reject bad input before anything exists; also refuse a warm id that already owns resources
    (another execution, or leftovers a teardown must clean first) — tearing those down would hurt it."""
    inp = parse_input(raw)
    inv = inventory(ec2, inp.warm_id)
    if not inv.empty:
        raise InvalidInputError(
            f"warm_id {inp.warm_id!r} is in use: resources tagged {tags.WARM_ID}={inp.warm_id} exist "
            f"({inv.describe()}); pick a new warm id or run the teardown for it"
        )
    return inp


def _check_launch_template(inp: WarmInput, ec2: Any) -> str:
    """The template exists and launches a Nitro type; returns its instance type."""
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
    replica, nodes = source_nodes(inp, deps.ec2, deps.agents)
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
    endpoints = destination_endpoints(inp, deps.ec2, {n["InstanceId"] for n in nodes})
    stats = node_stats(inp, [n["InstanceId"] for n in nodes], deps.agents)
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
