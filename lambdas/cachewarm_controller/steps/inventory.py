"""What exists in EC2: a warm's tagged resources, and the source and destination replicas' nodes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError
from cachewarm.contract import tags

from cachewarm_controller.awsutil import chunks, tag_value
from cachewarm_controller.errors import InvalidInputError, PlanError
from cachewarm_controller.model import WarmInput

LIVE_INSTANCE_STATES = ["pending", "running", "stopping", "stopped", "shutting-down"]


def tag_filter(key: str, value: str) -> dict[str, Any]:
    return {"Name": f"tag:{key}", "Values": [value]}


# ---- a warm's resources -----------------------------------------------------------------------------


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


def inventory(
    ec2: Any, execution_arn: str, warm_id: str | None = None, volumes: bool = True, instances: bool = True
) -> Inventory:
    """Every live volume and instance this execution created (tagged with its ARN, and with the warm
    id when given; terminated instances do not count). Another execution's resources never match,
    even for the same warm id."""
    inv = Inventory()
    flt = [tag_filter(tags.EXECUTION, execution_arn)]
    if warm_id is not None:
        flt.append(tag_filter(tags.WARM_ID, warm_id))
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


def tagged(ec2: Any, kind: str, execution_arn: str, warm_id: str, role: str) -> dict[str, dict]:
    """node id -> live tagged resource of `kind` (volume | instance) of this execution."""
    inv = inventory(ec2, execution_arn, warm_id, volumes=kind == "volume", instances=kind == "instance")
    items = inv.volumes if kind == "volume" else inv.instances
    out: dict[str, dict] = {}
    for r in items:
        node = tag_value(r, tags.NODE)
        if node and tag_value(r, tags.ROLE) == role:
            out[node] = r
    return out


def describe_instances(ec2: Any, instance_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """instance id -> DescribeInstances' view of it, in batches (an unknown id is EC2's error)."""
    out: dict[str, dict[str, Any]] = {}
    for batch in chunks(list(instance_ids), 200):
        for page in ec2.get_paginator("describe_instances").paginate(InstanceIds=list(batch)):
            for res in page["Reservations"]:
                out.update({i["InstanceId"]: i for i in res["Instances"]})
    return out


# ---- the replicas -----------------------------------------------------------------------------------


def running_instances(
    ec2: Any,
    filters: Sequence[dict[str, Any]] = (),
    ids: Sequence[str] | None = None,
    vpc_id: str | None = None,
) -> list[dict]:
    """The running instances that match `filters` (and are among `ids`, if given) in this account
    (DescribeInstances sees no other) and, with `vpc_id`, in the stack's VPC only."""
    found: list[dict[str, Any]] = []
    in_vpc = [{"Name": "vpc-id", "Values": [vpc_id]}] if vpc_id else []
    kwargs: dict[str, Any] = {
        "Filters": [{"Name": "instance-state-name", "Values": ["running"]}, *in_vpc, *filters]
    }
    if ids:
        kwargs["InstanceIds"] = list(ids)
    for page in ec2.get_paginator("describe_instances").paginate(**kwargs):
        for res in page["Reservations"]:
            found.extend(res["Instances"])
    return found


def candidate_sources(inp: WarmInput, ec2: Any, vpc_id: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """The running nodes of the stack's VPC that may be the source, per replica name, by the input's
    selector; with no selector, every replica tagged cachewarm:replica except the destination (Plan
    picks the one with the most items). A replica given by instance ids is named by `source.replica`
    or ""."""
    src = inp.source
    if src.instance_ids:
        try:
            nodes = running_instances(ec2, ids=src.instance_ids, vpc_id=vpc_id)
        except ClientError as exc:
            raise PlanError(f"source.instance_ids: {exc}") from exc
        missing = sorted(set(src.instance_ids) - {n["InstanceId"] for n in nodes})
        if missing:
            raise PlanError(
                f"source.instance_ids not found, not running or not in this stack's VPC: {', '.join(missing)}"
            )
        return {src.replica or "": nodes}
    if src.replica:
        nodes = running_instances(ec2, [tag_filter(tags.REPLICA, src.replica)], vpc_id=vpc_id)
        if not nodes:
            raise PlanError(f"source.replica {src.replica!r}: no running instance tagged {tags.REPLICA}")
        return {src.replica: nodes}
    if src.asg_name:
        nodes = running_instances(ec2, [tag_filter(tags.ASG, src.asg_name)], vpc_id=vpc_id)
        if not nodes:
            raise PlanError(f"source.asg_name {src.asg_name!r}: no running instances")
        return {src.asg_name: nodes}
    by_replica: dict[str, list[dict]] = {}
    dst = inp.destination
    for n in running_instances(ec2, [{"Name": "tag-key", "Values": [tags.REPLICA]}], vpc_id=vpc_id):
        name = tag_value(n, tags.REPLICA) or ""
        in_destination = name == dst.replica or (
            dst.asg_name is not None and tag_value(n, tags.ASG) == dst.asg_name
        )
        if not in_destination:
            by_replica.setdefault(name, []).append(n)
    if not by_replica:
        raise PlanError(
            f"no source given and no running replica tagged {tags.REPLICA} (besides the destination)"
        )
    return by_replica


def destination_pending(inp: WarmInput, autoscaling: Any) -> list[str]:
    """What the destination still lacks before it can be warmed: for a destination given as an Auto
    Scaling group (the launch trigger fires at the first instance), the instances it is still
    launching. Empty: ready."""
    dst = inp.destination
    if dst.endpoints or not dst.asg_name or autoscaling is None:
        return []
    groups = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[dst.asg_name])[
        "AutoScalingGroups"
    ]
    if not groups:
        raise PlanError(f"destination.asg_name {dst.asg_name!r}: no such Auto Scaling group")
    group = groups[0]
    in_service = [i for i in group.get("Instances", []) if i.get("LifecycleState") == "InService"]
    missing = int(group.get("DesiredCapacity", 0)) - len(in_service)
    return (
        [f"{dst.asg_name}: {missing} of {group.get('DesiredCapacity')} instances not InService"]
        if missing > 0
        else []
    )


def destination_endpoints(
    inp: WarmInput, ec2: Any, source_ids: set[str], vpc_id: str | None = None
) -> list[str]:
    """The memcached endpoints to warm: only ever running nodes of the destination replica in this
    account and the stack's VPC — the given endpoints once each is shown to be one
    (`checked_endpoints`), else the replica's / group's nodes (private IP + port)."""
    dst = inp.destination
    if dst.endpoints:
        nodes = checked_endpoints(inp, ec2, vpc_id)
        what = "destination.endpoints"
    else:
        if dst.replica:
            nodes = running_instances(ec2, [tag_filter(tags.REPLICA, dst.replica)], vpc_id=vpc_id)
            what = f"destination.replica {dst.replica!r}"
        else:
            nodes = running_instances(ec2, [tag_filter(tags.ASG, str(dst.asg_name))], vpc_id=vpc_id)
            what = f"destination.asg_name {dst.asg_name!r}"
        if not nodes:
            raise PlanError(f"{what}: no running instances to warm")
    overlap = sorted(source_ids & {n["InstanceId"] for n in nodes})
    if overlap:
        raise PlanError(
            f"{what} includes source nodes {', '.join(overlap[:5])}: a replica cannot warm itself"
        )
    if dst.endpoints:
        return list(dst.endpoints)
    return sorted(f"{n['PrivateIpAddress']}:{dst.port}" for n in nodes)


def _belongs_to_destination(inp: WarmInput, node: dict[str, Any]) -> bool:
    """A node is part of the destination when it carries the replica tag (the named replica's, if
    one is named) or is an instance of the named Auto Scaling group (a tag only AWS sets)."""
    dst = inp.destination
    replica = tag_value(node, tags.REPLICA)
    if dst.asg_name is not None and tag_value(node, tags.ASG) == dst.asg_name:
        return True
    if dst.replica is not None:
        return replica == dst.replica
    return dst.asg_name is None and replica is not None


def checked_endpoints(inp: WarmInput, ec2: Any, vpc_id: str | None) -> list[dict[str, Any]]:
    """The nodes behind `destination.endpoints`: every host must be the private IP (or private DNS
    name) of a running instance of this account in the stack's VPC that belongs to the destination
    replica (`_belongs_to_destination`). An address that is not — an outside host, another VPC's, an
    untagged instance — is refused (InvalidInputError) before anything is created: whoever can start
    an execution must not be able to send a replica's data to a host of their choosing."""
    hosts = sorted({e.rsplit(":", 1)[0] for e in inp.destination.endpoints or []})
    ips = [h for h in hosts if _is_ipv4(h)]
    names = [h for h in hosts if not _is_ipv4(h)]
    found: list[dict[str, Any]] = []
    for field_name, values in (("private-ip-address", ips), ("private-dns-name", names)):
        for batch in chunks(values, 200):
            found.extend(running_instances(ec2, [{"Name": field_name, "Values": list(batch)}], vpc_id=vpc_id))
    by_host: dict[str, dict[str, Any]] = {}
    for n in found:
        for h in (n.get("PrivateIpAddress"), n.get("PrivateDnsName")):
            if h:
                by_host[h] = n
    unknown = [h for h in hosts if h not in by_host]
    foreign = [h for h in hosts if h in by_host and not _belongs_to_destination(inp, by_host[h])]
    problems = []
    if unknown:
        problems.append(
            f"{', '.join(unknown[:10])} {'is' if len(unknown) == 1 else 'are'} not the private address of "
            "a running instance of this account in the stack's VPC"
        )
    if foreign:
        problems.append(
            f"{', '.join(foreign[:10])} {'is' if len(foreign) == 1 else 'are'} not "
            f"{_destination_name(inp)} (the instance lacks the tag)"
        )
    if problems:
        raise InvalidInputError(
            "destination.endpoints refused: " + "; ".join(problems) + " — a warm writes only to tagged "
            "replica nodes (docs/security.md)"
        )
    return list({n["InstanceId"]: n for n in by_host.values()}.values())


def _destination_name(inp: WarmInput) -> str:
    dst = inp.destination
    if dst.asg_name is not None:
        return f"an instance of Auto Scaling group {dst.asg_name!r}"
    if dst.replica is not None:
        return f"a node of replica {dst.replica!r} ({tags.REPLICA}={dst.replica})"
    return f"a replica node ({tags.REPLICA})"


def _is_ipv4(host: str) -> bool:
    parts = host.split(".")
    return len(parts) == 4 and all(p.isdigit() and int(p) < 256 for p in parts)
