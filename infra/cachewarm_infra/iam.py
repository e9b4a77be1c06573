"""IAM: the agents' managed policy and the controller Lambdas' role, every EC2 mutation scoped by
the `cachewarm:managed` tag (accepted cdk-nag findings about them: nag.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aws_cdk import ArnFormat, Aws, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_ssm as ssm
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from cachewarm_infra.compute import Artifacts, Populator
from cachewarm_infra.contract import status, tags
from cachewarm_infra.storage import Storage


def allow(
    sid: str, actions: Sequence[str], resources: Sequence[str], conditions: Mapping[str, Any] | None = None
) -> iam.PolicyStatement:
    return iam.PolicyStatement(
        sid=sid,
        actions=list(actions),
        resources=list(resources),
        conditions=dict(conditions) if conditions else None,
    )


def commands_to_our_populators(sid: str, instances: str, stack_tag: str) -> iam.PolicyStatement:
    """SSM commands to the populators this stack launched only (tags only the controller can set)."""
    return allow(
        sid,
        ["ssm:SendCommand"],
        [instances],
        {
            "StringEquals": {
                f"ssm:resourceTag/{tags.MANAGED}": "true",
                f"ssm:resourceTag/{tags.STACK}": stack_tag,
            }
        },
    )


# IAM's policy variable for the instance a request was signed from (instance-profile credentials).
OWN_INSTANCE_ARN = "${ec2:SourceInstanceARN}"
# The controller's own state (cachewarm.contract.status.CONTROLLER_ROOT).
CONTROLLER_ROOT = status.CONTROLLER_ROOT


def transport_bucket_arns(prefix: str) -> tuple[str, str]:
    """The S3 transport's buckets (one per warm execution, named <prefix>...): (buckets, objects)."""
    bucket = f"arn:{Aws.PARTITION}:s3:::{prefix}*"
    return bucket, f"{bucket}/*"


def in_this_account() -> dict[str, Any]:
    """On every S3 grant: only buckets this account owns (a bucket of the same name in another
    account — the transport's names are global — is never read or written)."""
    return {"StringEquals": {"s3:ResourceAccount": Aws.ACCOUNT_ID}}


def build_agent_policy(
    scope: Construct,
    artifacts: Artifacts,
    storage: Storage,
    status_prefix: str,
    agent_logs: logs.ILogGroup,
    transport_bucket_prefix: str,
) -> iam.ManagedPolicy:
    """What the agents need: read the artifacts (install), write their status objects, and let the
    SSM agent send the commands' output to the stack's log group.

    Attached to the populator role; the platform team attaches the same managed policy to the source
    memcached nodes' instance role (output `SourceNodePolicyArn`).
    """
    transport_buckets, _ = transport_bucket_arns(transport_bucket_prefix)
    dumps = f"{transport_buckets}/dumps"
    return iam.ManagedPolicy(
        scope,
        "AgentPolicy",
        description="cachewarm agents: read the agent/dumper artifacts, publish status objects",
        statements=[
            allow(
                "ReadArtifacts",
                ["s3:GetObject"],
                [
                    _object_arn(a.s3_bucket_name, a.s3_object_key)
                    for a in (artifacts.dumper, artifacts.agent, artifacts.installer)
                ],
                in_this_account(),
            ),
            # Only objects whose key ends in this instance's own ARN (cachewarm.contract.status): an
            # agent can neither speak for another node nor read or touch the controller's state.
            allow(
                "PublishOwnStatus",
                ["s3:GetObject", "s3:PutObject"],
                [storage.status_bucket.arn_for_objects(f"{status_prefix}/*/{OWN_INSTANCE_ARN}.json")],
                in_this_account(),
            ),
            # The S3 transport (docs/transport-s3.md, "Who reads what"): a source node uploads only
            # below dumps/<its own ARN>/ (and reads it back to resume); a populator reads only keys
            # that name its own ARN, which only the source node paired with it writes. Each bucket's
            # own policy denies the same to every other principal and keeps populators read-only.
            allow(
                "WriteOwnDump",
                ["s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
                [f"{dumps}/{OWN_INSTANCE_ARN}/*"],
                in_this_account(),
            ),
            allow("ReadPairedDump", ["s3:GetObject"], [f"{dumps}/*/{OWN_INSTANCE_ARN}/*"], in_this_account()),
            # Listing those prefixes only.
            allow(
                "ListOwnDumps",
                ["s3:ListBucket"],
                [transport_buckets],
                {
                    **in_this_account(),
                    "StringLike": {
                        "s3:prefix": [f"dumps/{OWN_INSTANCE_ARN}/*", f"dumps/*/{OWN_INSTANCE_ARN}/*"]
                    },
                },
            ),
            # Only through S3 (the status objects, the transport's objects): the key never decrypts
            # anything else for an agent.
            allow(
                "StatusBucketKey",
                ["kms:Decrypt", "kms:GenerateDataKey"],
                [storage.key.key_arn],
                {"StringEquals": {"kms:ViaService": via("s3")}},
            ),
            allow(
                "CommandOutput",
                ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                [agent_logs.log_group_arn, f"{agent_logs.log_group_arn}:log-stream:*"],
            ),
            # The SSM agent looks the group up before writing; DescribeLogGroups cannot be scoped.
            allow("FindCommandOutputGroup", ["logs:DescribeLogGroups"], ["*"]),
        ],
    )


@dataclass(frozen=True)
class ControllerIdentity:
    """The one role of the controller Lambdas and the policy attached to it."""

    role: iam.Role
    policy: iam.Policy


def build_controller_role(
    scope: Construct,
    *,
    storage: Storage,
    populator: Populator,
    documents: Mapping[str, ssm.CfnDocument],
    status_prefix: str,
    stack_tag: str,
    transport_bucket_prefix: str,
    destination_regions: Sequence[str] = (),
) -> ControllerIdentity:
    """One role for the controller Lambdas: every EC2 mutation is scoped by cachewarm tags, this
    stack's own (`stack_tag`) among them — two stacks in one account cannot touch each other's.
    `destination_regions`: where a cross-region S3 warm's populators may run (each region's own
    statements come with its resources: `iam_remote.remote_statements`); every regional read and
    command of the controller is limited to its own region and these."""
    stack = Stack.of(scope)

    def ec2_arn(resource: str) -> str:
        return stack.format_arn(service="ec2", resource=resource, resource_name="*")

    volumes, instances = ec2_arn("volume"), ec2_arn("instance")
    managed_request = {
        "StringEquals": {f"aws:RequestTag/{tags.MANAGED}": "true", f"aws:RequestTag/{tags.STACK}": stack_tag}
    }
    managed_resource = {
        "StringEquals": {
            f"aws:ResourceTag/{tags.MANAGED}": "true",
            f"aws:ResourceTag/{tags.STACK}": stack_tag,
        }
    }
    key_arn, bucket = storage.key.key_arn, storage.status_bucket
    in_regions = {"StringEquals": {"aws:RequestedRegion": [Aws.REGION, *destination_regions]}}
    transport_buckets, transport_objects = transport_bucket_arns(transport_bucket_prefix)
    role = iam.Role(
        scope,
        "ControllerRole",
        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        description="cachewarm controller Lambdas",
    )
    inventory = [
        "ec2:DescribeInstances",
        "ec2:DescribeInstanceStatus",
        "ec2:DescribeInstanceTypes",
        "ec2:DescribeVolumes",
        "ec2:DescribeVolumesModifications",
        "ec2:DescribeSubnets",
        "ec2:DescribeLaunchTemplateVersions",
        "ec2:DescribeLaunchTemplates",
        "ec2:DescribeTags",
        "autoscaling:DescribeAutoScalingGroups",
        "ssm:DescribeInstanceInformation",
        "ssm:GetCommandInvocation",
        "ssm:ListCommandInvocations",
        "ssm:ListCommands",
    ]
    launch_template = stack.format_arn(
        service="ec2", resource="launch-template", resource_name=populator.launch_template_id
    )
    statements = [
        # Describe/List calls have no resource-level permissions in IAM: "*" is the only option; the
        # regions are named instead.
        allow("Inventory", inventory, ["*"], in_regions),
        allow("CreateTaggedVolumes", ["ec2:CreateVolume"], [volumes], managed_request),
        # Only from this stack's launch template (its AMI, profile, security group, user data).
        allow(
            "LaunchTaggedPopulators",
            ["ec2:RunInstances"],
            [instances],
            {**managed_request, "ArnEquals": {"ec2:LaunchTemplate": launch_template}},
        ),
        # The other resources a RunInstances request names: only our launch template.
        allow(
            "LaunchFromTemplate",
            ["ec2:RunInstances"],
            [
                launch_template,
                ec2_arn("subnet"),
                ec2_arn("network-interface"),
                ec2_arn("security-group"),
                volumes,
                f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}::image/*",
            ],
        ),
        allow(
            "TagOnCreateOnly",
            ["ec2:CreateTags"],
            [volumes, instances],
            {"StringEquals": {"ec2:CreateAction": ["CreateVolume", "RunInstances"]}},
        ),
        # Attach/detach name two resources: our tagged volume, and a populator of this stack or a
        # replica node (the platform's cachewarm:replica tag) — never any other instance.
        allow("AttachOurVolumes", ["ec2:AttachVolume", "ec2:DetachVolume"], [volumes], managed_resource),
        allow(
            "AttachToOurPopulators", ["ec2:AttachVolume", "ec2:DetachVolume"], [instances], managed_resource
        ),
        allow(
            "AttachToReplicaNodes",
            ["ec2:AttachVolume", "ec2:DetachVolume"],
            [instances],
            {"Null": {f"aws:ResourceTag/{tags.REPLICA}": "false"}},
        ),
        allow("DeleteOurVolumes", ["ec2:DeleteVolume"], [volumes], managed_resource),
        allow("TerminateOurPopulators", ["ec2:TerminateInstances"], [instances], managed_resource),
        allow(
            "PassPopulatorRole",
            ["iam:PassRole"],
            [populator.role.role_arn],
            {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
        ),
        # Commands: only this stack's documents, and only to instances that carry a tag the
        # controller cannot set (CreateTags is allowed only inside its own Create/Run calls): the
        # populators it launched (cachewarm:managed=true) and the nodes the platform tagged as
        # replica nodes (cachewarm:replica). IAM evaluates a condition against every resource of
        # the request, so documents and instances are allowed by separate statements.
        allow("RunOurDocuments", ["ssm:SendCommand"], _document_arns(scope, documents)),
        commands_to_our_populators("CommandsToOurPopulators", instances, stack_tag),
        allow(
            "CommandsToReplicaNodes",
            ["ssm:SendCommand"],
            [instances],
            {"Null": {f"ssm:resourceTag/{tags.REPLICA}": "false"}},
        ),
        allow("CancelCommands", ["ssm:CancelCommand"], ["*"], in_regions),
        # The whole status bucket (its own): the controller reads status objects by their exact
        # keys, and S3 answers a GET of one not written yet with 404, not 403, only to a caller
        # that may s3:ListBucket the bucket (a condition on s3:prefix need not hold for that check).
        allow("ListStatus", ["s3:ListBucket"], [bucket.bucket_arn], in_this_account()),
        # The agents' objects (read; deleted at teardown) and the controller's own state.
        allow(
            "ReadWriteStatus",
            ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
            [
                bucket.arn_for_objects(f"{status_prefix}/*"),
                bucket.arn_for_objects(f"{CONTROLLER_ROOT}/{status_prefix}/*"),
            ],
            in_this_account(),
        ),
        # The S3 transport: a bucket per warm execution, named with this stack's prefix — made,
        # configured (encryption, public access block, lifecycle, policy, tags), emptied and deleted
        # by the controller; no other bucket. Creating makes a bucket of this account by definition
        # (and there is no owner yet to name); everything after names this account's buckets only.
        allow(
            "CreateTransportBuckets",
            ["s3:CreateBucket", "s3:PutBucketOwnershipControls"],
            [transport_buckets],
        ),
        allow(
            "TransportBuckets",
            [
                "s3:PutEncryptionConfiguration",
                "s3:PutBucketPublicAccessBlock",
                "s3:PutLifecycleConfiguration",
                "s3:PutBucketPolicy",
                "s3:PutBucketTagging",
                "s3:ListBucket",
                "s3:ListBucketVersions",
                "s3:ListBucketMultipartUploads",
                "s3:DeleteBucket",
            ],
            [transport_buckets],
            in_this_account(),
        ),
        allow(
            "EmptyTransportBuckets",
            ["s3:DeleteObject", "s3:DeleteObjectVersion", "s3:AbortMultipartUpload"],
            [transport_objects],
            in_this_account(),
        ),
        # Encrypted io2 volumes with our key: EC2 uses a grant on the caller's behalf.
        allow(
            "UseKey",
            [
                "kms:Decrypt",
                "kms:DescribeKey",
                "kms:GenerateDataKey",
                "kms:GenerateDataKeyWithoutPlaintext",
                "kms:ReEncryptFrom",
                "kms:ReEncryptTo",
            ],
            [key_arn],
            # Only through EC2 (volumes) and S3 (status objects, plan).
            {"StringEquals": {"kms:ViaService": [via("ec2"), via("s3")]}},
        ),
        allow(
            "GrantKeyToEbs",
            ["kms:CreateGrant"],
            [key_arn],
            {"Bool": {"kms:GrantIsForAWSResource": "true"}, "StringEquals": {"kms:ViaService": via("ec2")}},
        ),
    ]
    policy = iam.Policy(scope, "ControllerPolicy", statements=statements)
    policy.attach_to_role(role)
    _keep_controller_state_to_the_controller(bucket, role)
    return ControllerIdentity(role=role, policy=policy)


def allow_describe_executions(scope: Construct, role: iam.IRole, machine: sfn.IStateMachine) -> iam.Policy:
    """The Teardown Lambda's DescribeExecution, on the warm machine's executions only: the teardown
    machine checks that the execution it is given is one of them and has ended. A policy of its own
    (made after the state machine, which names the controller's functions)."""
    executions = Stack.of(scope).format_arn(
        service="states",
        resource="execution",
        resource_name=f"{machine.state_machine_name}:*",
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )
    policy = iam.Policy(
        scope,
        "ControllerDescribesWarms",
        statements=[allow("DescribeWarmExecutions", ["states:DescribeExecution"], [executions])],
    )
    policy.attach_to_role(role)
    return policy


def _keep_controller_state_to_the_controller(bucket: s3.Bucket, role: iam.IRole) -> None:
    """Bucket policy: nobody but the controller role does anything to an object under
    `_controller/` — no read, write, delete, version delete, ACL, tag or restore — not even a node
    whose own role grants broad S3 rights (source nodes' roles are the platform's). Deleting a
    claim's versions would let a second execution take the warm id; reading the plan would name
    every instance and the transport bucket."""
    bucket.add_to_resource_policy(
        iam.PolicyStatement(
            sid="OnlyTheControllerTouchesItsState",
            effect=iam.Effect.DENY,
            principals=[iam.AnyPrincipal()],
            actions=["s3:*"],
            resources=[bucket.arn_for_objects(f"{CONTROLLER_ROOT}/*")],
            conditions={"ArnNotEquals": {"aws:PrincipalArn": role.role_arn}},
        )
    )


def _document_arns(scope: Construct, documents: Mapping[str, ssm.CfnDocument]) -> list[str]:
    """This stack's documents only (memcached stats and unmount are documents of their own: no
    AWS-RunShellScript, which would run anything as root on a production node)."""
    stack = Stack.of(scope)
    return [
        stack.format_arn(service="ssm", resource="document", resource_name=d.ref) for d in documents.values()
    ]


def via(service: str) -> str:
    """`kms:ViaService` of an AWS service in this stack's region."""
    return f"{service}.{Aws.REGION}.amazonaws.com"


def _object_arn(bucket: str, key: str) -> str:
    return f"arn:{Aws.PARTITION}:s3:::{bucket}/{key}"
