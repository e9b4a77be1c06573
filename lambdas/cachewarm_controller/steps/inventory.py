"""What exists in EC2: the source and destination replicas' nodes (a warm's own resources are its plan's,
see `ownership`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError
from cachewarm.contract.replicas import Pair, Side

from cachewarm_controller.awsutil import chunks
from cachewarm_controller.errors import InvalidInputError, PlanError
from cachewarm_controller.model import WarmInput
from cachewarm_controller.steps.pairs import (
    allowed_sources,
    destination_side,
    membership_problem,
    require_nodes_of,
    side_filter,
)


def tag_filter(key: str, value: str) -> dict[str, Any]:
    return {"Name": f"tag:{key}", "Values": [value]}


# ---- a warm's resources -----------------------------------------------------------------------------


@dataclass
class Inventory:
    """A warm's live volumes and instances (as EC2 describes them)."""

    volumes: list[dict[str, Any]] = field(default_factory=list)
    instances: list[dict[str, Any]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.volumes and not self.instances

    def describe(self) -> str:
        vols = ", ".join(f"{v['VolumeId']} ({v['State']})" for v in self.volumes[:10])
        insts = ", ".join(f"{i['InstanceId']} ({i['State']['Name']})" for i in self.instances[:10])
        return f"volumes: [{vols}] instances: [{insts}]"


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


def candidate_sources(
    inp: WarmInput, ec2: Any, pairs: tuple[Pair, ...], groups: tuple[str, ...], vpc_id: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    """The running nodes of the stack's VPC that may be the source, per source (`pairs.allowed_sources`:
    the one the input names, else every source the stack pairs with the destination; Plan picks the
    one with the most items). Every node must be a node of its source (`pairs.membership_problem`);
    given instance ids must all be nodes of one allowed source."""
    allowed = allowed_sources(inp, pairs)
    if inp.source.instance_ids:
        side, nodes = source_of_instances(inp, ec2, pairs, groups, vpc_id)
        return {str(side): nodes}
    out: dict[str, list[dict[str, Any]]] = {}
    for side in allowed:
        nodes = running_instances(ec2, [side_filter(side)], vpc_id=vpc_id)
        require_nodes_of(nodes, side, groups, f"source {side}")
        if nodes:
            out[str(side)] = nodes
    if not out:
        raise PlanError(
            f"source {', '.join(str(s) for s in allowed)}: no running instance "
            + ", ".join(f"tagged {side_filter(s)['Name'][4:]}={s.name}" for s in allowed)
            + " in the stack's VPC"
        )
    return out


def source_of_instances(
    inp: WarmInput,
    ec2: Any,
    pairs: tuple[Pair, ...],
    groups: tuple[str, ...],
    vpc_id: str | None,
    error: type[Exception] = PlanError,
) -> tuple[Side, list[dict[str, Any]]]:
    """`source.instance_ids`: running instances of the stack's VPC that are all nodes of one source
    the stack pairs with the destination; (that source, the nodes), else `error` naming why."""
    ids = list(inp.source.instance_ids or [])
    try:
        nodes = running_instances(ec2, ids=ids, vpc_id=vpc_id)
    except ClientError as exc:
        raise error(f"source.instance_ids: {exc}") from exc
    missing = sorted(set(ids) - {n["InstanceId"] for n in nodes})
    if missing:
        raise error(
            f"source.instance_ids not found, not running or not in this stack's VPC: {', '.join(missing)}"
        )
    allowed = allowed_sources(inp, pairs)
    problems: list[str] = []
    for side in allowed:
        found = [p for n in nodes if (p := membership_problem(n, side, groups))]
        if not found:
            return side, nodes
        problems.extend(found[:3])
    raise error(
        "source.instance_ids are not all nodes of one source paired with the destination "
        f"({', '.join(str(s) for s in allowed)}): " + "; ".join(problems[:6])
    )


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
    inp: WarmInput, ec2: Any, source_ids: set[str], groups: tuple[str, ...], vpc_id: str | None = None
) -> list[str]:
    """The memcached endpoints to warm: only ever running nodes of the destination replica in this
    account and the stack's VPC (`pairs.membership_problem`) — the given endpoints once each is shown
    to be one (`checked_endpoints`), else the replica's / group's nodes (private IP + port)."""
    dst = inp.destination
    side = _destination(inp)
    if dst.endpoints:
        nodes = checked_endpoints(inp, ec2, groups, vpc_id)
        what = "destination.endpoints"
    else:
        nodes = running_instances(ec2, [side_filter(side)], vpc_id=vpc_id)
        what = f"destination {side}"
        if not nodes:
            raise PlanError(f"{what}: no running instances to warm")
        require_nodes_of(nodes, side, groups, what)
    overlap = sorted(source_ids & {n["InstanceId"] for n in nodes})
    if overlap:
        raise PlanError(
            f"{what} includes source nodes {', '.join(overlap[:5])}: a replica cannot warm itself"
        )
    if dst.endpoints:
        return list(dst.endpoints)
    return sorted(f"{n['PrivateIpAddress']}:{dst.port}" for n in nodes)


def _destination(inp: WarmInput) -> Side:
    side = destination_side(inp)
    if side is None:
        raise InvalidInputError("destination: name the replica (destination.replica or destination.asg_name)")
    return side


def checked_endpoints(
    inp: WarmInput, ec2: Any, groups: tuple[str, ...], vpc_id: str | None
) -> list[dict[str, Any]]:
    """The nodes behind `destination.endpoints`: every host must be the private IP (or private DNS
    name) of a running instance of this account in the stack's VPC that is a node of the destination
    replica (`pairs.membership_problem`). An address that is not — an outside host, another VPC's, an
    instance that merely carries the tag — is refused (InvalidInputError) before anything is created:
    whoever can start an execution must not be able to send a replica's data to a host of their
    choosing."""
    side = _destination(inp)
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
    foreign = {h: p for h in hosts if h in by_host and (p := membership_problem(by_host[h], side, groups))}
    problems = []
    if unknown:
        problems.append(
            f"{', '.join(unknown[:10])} {'is' if len(unknown) == 1 else 'are'} not the private address of "
            "a running instance of this account in the stack's VPC"
        )
    problems.extend(f"{h}: {p}" for h, p in list(foreign.items())[:10])
    if problems:
        raise InvalidInputError(
            "destination.endpoints refused: " + "; ".join(problems) + " — a warm writes only to nodes of "
            "the destination replica (docs/security.md)"
        )
    return list({n["InstanceId"]: n for n in by_host.values()}.values())


def _is_ipv4(host: str) -> bool:
    parts = host.split(".")
    return len(parts) == 4 and all(p.isdigit() and int(p) < 256 for p in parts)
