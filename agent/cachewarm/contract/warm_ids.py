"""The warm id of an execution started by an Auto Scaling launch (its input names no `warm_id`).

The controller's ValidateInput derives it; the operator CLI derives it again to find the warm's status
objects. One group and deployment marker give one id, so the launches of one deployment (one event per
instance) all name the same warm and the claim keeps one.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from cachewarm.contract import tags


def asg_warm_id(asg_name: str, marker: str) -> str:
    """`<group slug>-<sha256(group|marker)[:12]>`: matches the warm-id pattern for any group name."""
    slug = re.sub(r"[^a-z0-9]+", "-", asg_name.lower()).strip("-")[:30].strip("-") or "asg"
    digest = hashlib.sha256(f"{asg_name}|{marker}".encode()).hexdigest()[:12]
    return f"{slug}-{digest}"


def deployment_marker(group: dict[str, Any]) -> str:
    """A group's (DescribeAutoScalingGroups) `cachewarm:deployment` tag, else its creation time:
    a new group per deployment needs no tag."""
    for tag in group.get("Tags", []) or []:
        if tag.get("Key") == tags.DEPLOYMENT and tag.get("Value"):
            return str(tag["Value"])
    return str(group.get("CreatedTime", ""))


def warm_id_of_group(autoscaling: Any, asg_name: str) -> str | None:
    """The warm id of a launch of the group, asking Auto Scaling (a boto3 client) for its deployment
    marker; None when the group does not exist. AWS errors are the caller's to name."""
    groups = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[asg_name])["AutoScalingGroups"]
    return asg_warm_id(asg_name, deployment_marker(groups[0])) if groups else None
