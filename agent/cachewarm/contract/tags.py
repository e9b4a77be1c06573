"""Tag names on what the stack and the controller create (teardown and IAM find resources by them)."""

from __future__ import annotations

# Every volume and instance the controller creates: IAM lets the controller delete/attach only these.
MANAGED = "cachewarm:managed"
WARM_ID = "cachewarm:warm-id"
NODE = "cachewarm:node"
ROLE = "cachewarm:role"
# How a replica's nodes are found when the input names a replica (statemachine/README.md).
REPLICA = "cachewarm:replica"
ASG = "aws:autoscaling:groupName"
# On the state machine: where `cachewarm status` finds the status objects.
STATUS_BUCKET = "cachewarm:status-bucket"
STATUS_PREFIX = "cachewarm:status-prefix"


def resource_tags(warm_id: str, node_id: str, role: str) -> list[dict[str, str]]:
    """The tags every resource the controller creates carries (teardown finds them by warm id)."""
    return [
        {"Key": WARM_ID, "Value": warm_id},
        {"Key": NODE, "Value": node_id},
        {"Key": MANAGED, "Value": "true"},
        {"Key": ROLE, "Value": role},
    ]
