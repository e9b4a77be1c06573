"""Tag names on what the stack and the controller create (teardown and IAM find resources by them)."""

from __future__ import annotations

# Every volume and instance the controller creates: IAM lets the controller delete/attach only these.
MANAGED = "cachewarm:managed"
WARM_ID = "cachewarm:warm-id"
# The Step Functions execution that created the resource: teardown of one execution touches only its
# own resources, even when another execution was started for the same warm id.
EXECUTION = "cachewarm:execution"
NODE = "cachewarm:node"
# Which deployment of the stack created the resource: two stacks in one account share every other tag,
# so the controller's IAM conditions also name this one (its value: the Lambdas' STACK_TAG).
STACK = "cachewarm:stack"
ROLE = "cachewarm:role"
# How a replica's nodes are found when the input names a replica (statemachine/README.md). Also the
# tag the controller's IAM requires on a source node before it may send it a command
# (`ssm:resourceTag/cachewarm:replica`): source nodes are the platform's, tagged by the platform.
REPLICA = "cachewarm:replica"
# On an Auto Scaling group: which deployment of the replica its instances belong to; the warm id of
# an ASG-triggered warm is derived from the group name and this tag (else the group's creation time).
DEPLOYMENT = "cachewarm:deployment"
ASG = "aws:autoscaling:groupName"
# On the state machine: where `cachewarm status` finds the status objects.
STATUS_BUCKET = "cachewarm:status-bucket"
STATUS_PREFIX = "cachewarm:status-prefix"


def resource_tags(
    warm_id: str, node_id: str, role: str, execution_arn: str, stack: str | None = None
) -> list[dict[str, str]]:
    """The tags every resource the controller creates carries (teardown finds them by warm id and
    execution; IAM lets the controller create and touch only what carries its `stack` tag)."""
    out = [
        {"Key": WARM_ID, "Value": warm_id},
        {"Key": EXECUTION, "Value": execution_arn},
        {"Key": NODE, "Value": node_id},
        {"Key": MANAGED, "Value": "true"},
        {"Key": ROLE, "Value": role},
    ]
    if stack:
        out.append({"Key": STACK, "Value": stack})
    return out
