"""IAM for a cross-region S3 warm: the destination regions the stack is given, and the controller's
statements for each one's populators (docs/transport-s3.md, Cross-region)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import Aws, Stack, Token
from aws_cdk import aws_iam as iam
from constructs import Construct

from cachewarm_infra.contract import inputs, tags
from cachewarm_infra.iam import allow, commands_to_our_populators


def check_destination_regions(scope: Construct, regions: Sequence[str]) -> tuple[str, ...]:
    """The `destination_regions` prop: region names, none twice, not the stack's own."""
    own = Stack.of(scope).region
    for r in regions:
        if not inputs.matches(inputs.AWS_REGION, r):
            raise ValueError(f"destination_regions: {r!r} is not a region name (e.g. us-west-2)")
        if not Token.is_unresolved(own) and r == own:
            raise ValueError(f"destination_regions: {r} is the stack's own region (same-region: the default)")
    if len(set(regions)) != len(regions):
        raise ValueError(f"destination_regions: {', '.join(regions)} names a region twice")
    return tuple(regions)


@dataclass(frozen=True)
class RemoteRegion:
    """What the controller's IAM is told of a destination region's resources (region.py)."""

    region: str
    vpc_id: str
    launch_template_id: str
    security_group_id: str
    populator_role_arn: str
    key_arn: str
    documents: Sequence[str]


def remote_statements(r: RemoteRegion, stack_tag: str) -> list[iam.PolicyStatement]:
    """A cross-region S3 warm's populators (docs/transport-s3.md, Cross-region): launched from the
    region's own launch template only (its id, not a tag), into its fixed VPC, with its security
    group; tagged, commanded and terminated under the same tag scoping as at home; commands only with
    the stack's documents there. Every ARN names `r.region`."""
    sid = "Remote" + "".join(p.capitalize() for p in r.region.split("-"))

    def ec2_arn(resource: str, account: str = Aws.ACCOUNT_ID) -> str:
        return f"arn:{Aws.PARTITION}:ec2:{r.region}:{account}:{resource}"

    instances, volumes = ec2_arn("instance/*"), ec2_arn("volume/*")
    template = ec2_arn(f"launch-template/{r.launch_template_id}")
    managed_request = {
        "StringEquals": {f"aws:RequestTag/{tags.MANAGED}": "true", f"aws:RequestTag/{tags.STACK}": stack_tag}
    }
    managed_resource = {
        "StringEquals": {
            f"aws:ResourceTag/{tags.MANAGED}": "true",
            f"aws:ResourceTag/{tags.STACK}": stack_tag,
        }
    }
    via_ec2 = {"StringEquals": {"kms:ViaService": f"ec2.{r.region}.amazonaws.com"}}
    return [
        allow(
            f"{sid}LaunchTaggedPopulators",
            ["ec2:RunInstances"],
            [instances],
            {**managed_request, "ArnEquals": {"ec2:LaunchTemplate": template}},
        ),
        allow(f"{sid}LaunchFromItsTemplate", ["ec2:RunInstances"], [template]),
        allow(
            f"{sid}LaunchWithItsGroup",
            ["ec2:RunInstances"],
            [ec2_arn(f"security-group/{r.security_group_id}")],
        ),
        # The subnets (the input's s3.subnet_ids) and the new network interface: in the fixed VPC.
        allow(
            f"{sid}LaunchIntoItsVpc",
            ["ec2:RunInstances"],
            [ec2_arn("subnet/*"), ec2_arn("network-interface/*")],
            {"ArnEquals": {"ec2:Vpc": ec2_arn(f"vpc/{r.vpc_id}")}},
        ),
        allow(
            f"{sid}LaunchEncryptedRootVolume",
            ["ec2:RunInstances"],
            [volumes],
            {"Bool": {"ec2:Encrypted": "true"}},
        ),
        allow(f"{sid}LaunchImage", ["ec2:RunInstances"], [ec2_arn("image/*", account="")]),
        allow(
            f"{sid}TagOnCreateOnly",
            ["ec2:CreateTags"],
            [volumes, instances],
            {"StringEquals": {"ec2:CreateAction": ["RunInstances"]}},
        ),
        allow(f"{sid}TerminateOurPopulators", ["ec2:TerminateInstances"], [instances], managed_resource),
        allow(
            f"{sid}RunOurDocuments",
            ["ssm:SendCommand"],
            [f"arn:{Aws.PARTITION}:ssm:{r.region}:{Aws.ACCOUNT_ID}:document/{d}" for d in r.documents],
        ),
        commands_to_our_populators(f"{sid}CommandsToOurPopulators", instances, stack_tag),
        allow(
            f"{sid}PassPopulatorRole",
            ["iam:PassRole"],
            [r.populator_role_arn],
            {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
        ),
        # The populators' encrypted root volumes: EC2 there uses the region's key on the caller's behalf.
        allow(
            f"{sid}UseKeyThroughEc2",
            [
                "kms:Decrypt",
                "kms:DescribeKey",
                "kms:GenerateDataKeyWithoutPlaintext",
                "kms:ReEncryptFrom",
                "kms:ReEncryptTo",
            ],
            [r.key_arn],
            via_ec2,
        ),
        allow(
            f"{sid}GrantKeyToEbs",
            ["kms:CreateGrant"],
            [r.key_arn],
            {"Bool": {"kms:GrantIsForAWSResource": "true"}, **via_ec2},
        ),
    ]
