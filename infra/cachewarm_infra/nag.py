"""Every cdk-nag AwsSolutions finding the `CacheWarmer` accepts, each with its reason (the tests fail
on any other finding, and on an acknowledgement without a written reason)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aws_cdk import Acknowledgment, Stack, Token, Validations
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from cachewarm_infra.contract import tags

if TYPE_CHECKING:
    from cachewarm_infra.construct import CacheWarmer
    from cachewarm_infra.region import CacheWarmerRegion


def acknowledge_nag_findings(w: CacheWarmer) -> list[tuple[str, str, str]]:
    """Acknowledge the accepted findings on `w`'s resources; return them as (path, rule, reason)."""
    acknowledged: list[tuple[str, str, str]] = []
    # How cdk-nag prints `Stack.format_arn` ARNs: concrete region/account when the stack has an env.
    stack = Stack.of(w)
    region = "<AWS::Region>" if Token.is_unresolved(stack.region) else stack.region
    account = "<AWS::AccountId>" if Token.is_unresolved(stack.account) else stack.account
    ec2_any = f"arn:<AWS::Partition>:ec2:{region}:{account}"
    status_objects = f"<{_logical(w.status_bucket)}.Arn>/{w.props.status_prefix}/*"
    controller_state = f"<{_logical(w.status_bucket)}.Arn>/_controller/{w.props.status_prefix}/*"
    own_status = f"{status_objects}/<ec2:SourceInstanceARN>.json"

    def ack(scope: Construct, rule: str, reason: str) -> None:
        Validations.of(scope).acknowledge(Acknowledgment(id=rule, reason=reason))
        acknowledged.append((scope.node.path, rule, reason))

    ack(
        w.access_logs,
        "AwsSolutions-S1",
        "This is the access-log bucket; logging it into itself would loop.",
    )
    _ack_ssm_agent(ack, w, f"{ec2_any}:instance/*")
    ack(
        w.controller_policy,
        "AwsSolutions-IAM5[Resource::*]",
        "Describe/List calls (EC2, Auto Scaling, SSM command status) and ssm:CancelCommand have no "
        "resource-level permissions; every mutating EC2 call is scoped by cachewarm tags.",
    )
    ack(
        w.controller_policy,
        f"AwsSolutions-IAM5[Resource::{ec2_any}:volume/*]",
        "Volumes are created by the warm, so their ids are unknown; create/attach/delete require the "
        f"{tags.MANAGED}=true request or resource tag.",
    )
    ack(
        w.controller_policy,
        f"AwsSolutions-IAM5[Resource::{ec2_any}:instance/*]",
        "Source nodes are the platform's instances and populators are created per warm; launch and "
        f"terminate require the {tags.MANAGED}=true tag, attach/detach require our tagged volume.",
    )
    for kind in ("subnet", "network-interface", "security-group"):
        ack(
            w.controller_policy,
            f"AwsSolutions-IAM5[Resource::{ec2_any}:{kind}/*]",
            "RunInstances names these resources; the instance itself must carry the cachewarm tag and "
            "come from this stack's launch template.",
        )
    ack(
        w.controller_policy,
        "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>::image/*]",
        "The AMI comes from the launch template (an SSM parameter); AMI ids change on every release.",
    )
    ack(
        w.controller_policy,
        f"AwsSolutions-IAM5[Resource::{status_objects}]",
        "Status objects are named per warm and node under the status prefix.",
    )
    ack(
        w.controller_policy,
        f"AwsSolutions-IAM5[Resource::{controller_state}]",
        "The controller's plan, survey, teardown state and claims, per warm; only it may write there "
        "(bucket policy).",
    )
    ack(
        w.agent_policy,
        f"AwsSolutions-IAM5[Resource::{own_status}]",
        "Each agent reads and writes only objects whose key ends in its own instance ARN "
        "(${ec2:SourceInstanceARN}); names are per warm and node.",
    )
    ack(
        w.agent_policy,
        "AwsSolutions-IAM5[Resource::*]",
        "logs:DescribeLogGroups, which the SSM agent calls before writing command output, has no "
        "resource-level permissions.",
    )
    ack(
        w.agent_policy,
        f"AwsSolutions-IAM5[Resource::<{_logical(w.agent_logs)}.Arn>:log-stream:*]",
        "SSM names one log stream per command, instance and step in the stack's agent output group.",
    )
    transport = f"arn:<AWS::Partition>:s3:::{w.transport_bucket_prefix}*"
    ack(
        w.controller_policy,
        f"AwsSolutions-IAM5[Resource::{transport}]",
        "The S3 transport makes one bucket per warm execution, named with this stack's own prefix; "
        "their names are unknown before the warm.",
    )
    ack(
        w.controller_policy,
        f"AwsSolutions-IAM5[Resource::{transport}/*]",
        "Teardown empties the S3 transport's bucket of this execution: every object and upload in it.",
    )
    ack(
        w.agent_policy,
        f"AwsSolutions-IAM5[Resource::{transport}]",
        "Listing a node's prefix in the warm's S3 transport bucket (named per warm execution).",
    )
    ack(
        w.agent_policy,
        f"AwsSolutions-IAM5[Resource::{transport}/dumps/<ec2:SourceInstanceARN>/*]",
        "A source node writes only below dumps/<its own instance ARN>/ of a transport bucket (named "
        "per warm execution); files are named per data file.",
    )
    ack(
        w.agent_policy,
        f"AwsSolutions-IAM5[Resource::{transport}/dumps/*/<ec2:SourceInstanceARN>/*]",
        "A populator reads only keys naming its own instance ARN, which only its paired source node "
        "writes; each bucket's policy keeps it read-only.",
    )
    xray = (
        "X-Ray PutTraceSegments/PutTelemetryRecords and the log delivery APIs do not support "
        "resource scoping."
    )
    ack(w.controller_role, "AwsSolutions-IAM5[Resource::*]", xray)
    warm_machine = stack.get_logical_id(w.state_machine.node.default_child)  # type: ignore[arg-type]
    ack(
        w.describe_warms_policy,
        f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:states:{region}:{account}:execution:"
        f"<{warm_machine}.Name>:*]",
        "states:DescribeExecution on the warm machine's executions (named by EventBridge or the starter): "
        "the teardown machine checks the one it is given has ended.",
    )
    for machine in (w.state_machine, w.teardown_machine):
        ack(machine.role, "AwsSolutions-IAM5[Resource::*]", xray)
    for fn in w.functions.values():
        ack(
            fn,
            "AwsSolutions-L1",
            "Python 3.12 matches the pinned public Powertools layer (python312) the handlers are "
            "tested with.",
        )
    ack(
        w.trigger_dlq,
        "AwsSolutions-SQS3",
        "This queue is the dead-letter queue of the EventBridge targets.",
    )
    return acknowledged


def acknowledge_region_findings(w: CacheWarmer, r: CacheWarmerRegion) -> list[tuple[str, str, str]]:
    """The accepted findings a destination region adds: the controller's wildcards there (home) and
    the region's populator role (its stack). The template, security group, VPC, documents, role and
    key the controller may use there are named exactly; these are what cannot be."""
    acknowledged: list[tuple[str, str, str]] = []

    def ack(scope: Construct, rule: str, reason: str) -> None:
        Validations.of(scope).acknowledge(Acknowledgment(id=rule, reason=reason))
        acknowledged.append((scope.node.path, rule, reason))

    remote = f"arn:<AWS::Partition>:ec2:{r.region}:<AWS::AccountId>"
    for resource, reason in (
        (
            "instance/*",
            "Populators are created per warm (ids unknown before); launch requires this stack's tags "
            "and the region's own launch template (by id), terminate and SendCommand require the tags.",
        ),
        (
            "volume/*",
            "The populators' root volumes are created by the launch; only encrypted ones (ec2:Encrypted).",
        ),
        (
            "subnet/*",
            "The input names the populator subnets per warm; only subnets of the region's fixed VPC "
            "(ec2:Vpc).",
        ),
        (
            "network-interface/*",
            "The launch creates the populator's network interface; only in the region's fixed VPC (ec2:Vpc).",
        ),
    ):
        ack(w.controller_policy, f"AwsSolutions-IAM5[Resource::{remote}:{resource}]", reason)
    ack(
        w.controller_policy,
        f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:{r.region}::image/*]",
        "The AMI comes from the region's launch template (an SSM parameter); AMI ids change with releases.",
    )
    stack = Stack.of(r)
    account = "<AWS::AccountId>" if Token.is_unresolved(stack.account) else stack.account
    _ack_ssm_agent(ack, r, f"arn:<AWS::Partition>:ec2:{r.region}:{account}:instance/*")
    role_policy = r.role.node.find_child("DefaultPolicy")
    ack(
        role_policy,
        "AwsSolutions-IAM5[Resource::*]",
        "logs:DescribeLogGroups, which the SSM agent calls before writing command output, has no "
        "resource-level permissions.",
    )
    ack(
        role_policy,
        f"AwsSolutions-IAM5[Resource::<{_logical(r.agent_logs)}.Arn>:log-stream:*]",
        "SSM names one log stream per command, instance and step in the region's agent output group.",
    )
    return acknowledged


def _ack_ssm_agent(ack: Callable[[Construct, str, str], None], scope: Construct, instances: str) -> None:
    """The populator's SSM agent policy (in `scope`): its wildcards, as cdk-nag prints them."""
    policy = scope.node.find_child("PopulatorSsmAgentPolicy")
    ack(
        policy,
        "AwsSolutions-IAM5[Resource::*]",
        "The SSM agent's message channels (ec2messages, ssmmessages) have no resource-level permissions.",
    )
    ack(
        policy,
        f"AwsSolutions-IAM5[Resource::{instances}]",
        "ssm:UpdateInstanceInformation: the populator registers itself; instance ids are per warm.",
    )


def _logical(resource: s3.Bucket | logs.LogGroup) -> str:
    return Stack.of(resource).get_logical_id(resource.node.default_child)  # type: ignore[arg-type]
