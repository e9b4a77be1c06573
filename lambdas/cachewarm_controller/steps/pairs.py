"""Which replicas a warm may read and write, and which instances count as a replica's nodes.

The stack's `replicaPairs` (`cachewarm.contract.replicas`) say which replicas may be warmed from which;
ValidateInput refuses any other pair before anything exists, and with none configured every warm is
refused. A side named `asg:<group>` is the instances Auto Scaling tagged with the group
(`aws:autoscaling:groupName`: nobody else can set an `aws:` tag). A side named by replica is found by
its `cachewarm:replica` tag — a label anyone with `ec2:CreateTags` can put on any instance — so each node
found so must also be in one of the stack's memcached security groups (the groups the populators may
reach; joining one takes the network rights on the instance, not a tag). Without those groups, a
replica named by tag is refused: a tag alone never makes an instance a source to dump or a destination
to write to.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cachewarm.contract import tags
from cachewarm.contract.replicas import Pair, Side, format_pairs, sources_for

from cachewarm_controller.awsutil import tag_value
from cachewarm_controller.errors import InvalidInputError, PlanError
from cachewarm_controller.model import WarmInput


def destination_side(inp: WarmInput) -> Side | None:
    dst = inp.destination
    if dst.asg_name is not None:
        return Side("asg", dst.asg_name)
    return Side("replica", dst.replica) if dst.replica is not None else None


def named_source(inp: WarmInput) -> Side | None:
    src = inp.source
    if src.asg_name is not None:
        return Side("asg", src.asg_name)
    return Side("replica", src.replica) if src.replica is not None else None


def _configured(pairs: tuple[Pair, ...]) -> str:
    return format_pairs(pairs) or "none: the stack's replicaPairs is empty"


def allowed_sources(inp: WarmInput, pairs: tuple[Pair, ...]) -> list[Side]:
    """The sources this input may read: the one it names, or every source the configuration pairs
    with its destination. InvalidInputError when the pair is not configured (naming what is)."""
    dst = inp.destination
    if dst.replica is not None and dst.asg_name is not None:
        raise InvalidInputError(
            "destination: give replica or asg_name, not both (the stack's replicaPairs name one of them)"
        )
    destination = destination_side(inp)
    if destination is None:
        raise InvalidInputError(
            "destination: name the replica (destination.replica, or destination.asg_name): the stack's "
            "replicaPairs say which replicas may be warmed from which, and endpoints alone name none"
        )
    allowed = sources_for(pairs, destination)
    source = named_source(inp)
    if source is not None and source not in allowed:
        raise InvalidInputError(
            f"source {source} -> destination {destination} is not one of this stack's replica pairs "
            f"({_configured(pairs)}); deploy the stack with it in replicaPairs"
        )
    if not allowed:
        raise InvalidInputError(
            f"destination {destination}: no source is paired with it in this stack's replicaPairs "
            f"({_configured(pairs)})"
        )
    return [source] if source is not None else allowed


def is_node_of(node: dict[str, Any], side: Side) -> bool:
    if side.kind == "asg":
        return tag_value(node, tags.ASG) == side.name
    return tag_value(node, tags.REPLICA) == side.name


def side_filter(side: Side) -> dict[str, Any]:
    key = tags.ASG if side.kind == "asg" else tags.REPLICA
    return {"Name": f"tag:{key}", "Values": [side.name]}


def security_groups(node: dict[str, Any]) -> set[str]:
    groups = {g["GroupId"] for g in node.get("SecurityGroups", []) or []}
    for eni in node.get("NetworkInterfaces", []) or []:
        groups |= {g["GroupId"] for g in eni.get("Groups", []) or []}
    return groups


def membership_problem(node: dict[str, Any], side: Side, groups: tuple[str, ...]) -> str | None:
    """Why `node` does not count as a node of `side` (None: it does)."""
    iid = node.get("InstanceId", "?")
    if not is_node_of(node, side):
        return f"{iid} is not a node of {side}"
    if side.kind == "asg":
        return None
    if not groups:
        return (
            f"{iid} is a node of {side} by its {tags.REPLICA} tag alone, which anyone with "
            "ec2:CreateTags can set, and the stack names no memcached security group to confirm it "
            "(deploy with destinationSecurityGroupIds and sourceSecurityGroupIds, or pair Auto Scaling "
            "groups as asg:<group>)"
        )
    if not security_groups(node) & set(groups):
        return (
            f"{iid} carries {tags.REPLICA}={side.name} but is in none of the stack's memcached security "
            f"groups ({', '.join(groups)}): a tag alone does not make a replica node"
        )
    return None


def require_nodes_of(
    nodes: Iterable[dict[str, Any]],
    side: Side,
    groups: tuple[str, ...],
    what: str,
    error: type[Exception] = PlanError,
) -> None:
    """Every node is `side`'s (`membership_problem`); else `error` naming the first ten."""
    problems = [p for n in nodes if (p := membership_problem(n, side, groups))]
    if problems:
        raise error(f"{what}: " + "; ".join(problems[:10]) + (" ..." if len(problems) > 10 else ""))
