"""`CacheWarmerRegion`: what a cross-region S3 warm's populators need in their region, deployed by the
same CDK app as the `CacheWarmer` (docs/transport-s3.md, Cross-region).

In a stack of the destination region: the populators' launch template (this deployment's agent at
boot, IMDSv2, an encrypted root volume) with a role and instance profile of that region, a security
group in the region's fixed VPC whose only memcached peers are the named destination groups, the
stack's SSM documents under the home stack's names (same content, so version 1 is the same
document in both regions), the agent output log group and a key for the two. The construct then wires
itself into the `CacheWarmer` (`add_destination_region`): the controller learns the VPC, template,
documents and log group of the region and may launch from that template only, in that VPC only.

Every value the home stack reads from here is a weak cross-stack reference (`Fn::GetStackOutput`),
so no custom resource is needed and the region's stack deploys first (`cdk deploy --all` orders it).
The region's stack reads nothing from the home stack but plain strings (the artifacts' URLs and
checksums, the document names): the home stack needs an explicit region, where its artifacts live.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from aws_cdk import ReferenceStrength, RemovalPolicy, Resource, Stack, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from cachewarm_infra.compute import (
    build_documents,
    populator_launch_template,
    populator_security_group,
    ssm_agent_policy,
)
from cachewarm_infra.observability import build_agent_log_group
from cachewarm_infra.storage import admit_logs_to_key

if TYPE_CHECKING:
    from cachewarm_infra.construct import CacheWarmer

T = TypeVar("T")


class CacheWarmerRegion(Construct):
    """A destination region of `warmer` (one of its `destination_regions`), in a stack of that region.

    `vpc`: the destination replicas' VPC there (populators launch only into it); its id must be
    known at synth (`ec2.Vpc.from_vpc_attributes` / `from_lookup`, not a parameter).
    `destination_security_groups`: the destination replicas' groups there, the populators' only
    memcached peers. `instance_type` / `machine_image`: default the warmer's (a plain instance type is
    needed: the home stack's `PopulatorInstanceType` parameter cannot cross regions)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        warmer: CacheWarmer,
        vpc: ec2.IVpc,
        destination_security_groups: Sequence[ec2.ISecurityGroup],
        instance_type: ec2.InstanceType | None = None,
        machine_image: ec2.IMachineImage | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        stack, home = Stack.of(self), Stack.of(warmer)
        self.region = stack.region
        # The destination replicas' groups there: a node found by its replica tag counts only in one.
        self.replica_security_group_ids = [g.security_group_id for g in destination_security_groups]
        if Token.is_unresolved(self.region) or Token.is_unresolved(home.region):
            raise ValueError(
                "a destination region needs explicit regions on both stacks (the CacheWarmer's: its "
                "artifacts are fetched from there; this one's: env=Environment(region=...))"
            )
        if self.region not in warmer.props.destination_regions:
            raise ValueError(
                f"{self.region} is not one of the CacheWarmer's destination_regions "
                f"({', '.join(warmer.props.destination_regions) or 'none'})"
            )
        if Token.is_unresolved(vpc.vpc_id):
            raise ValueError(f"{self.region}: the destination VPC's id must be known at synth")
        if not destination_security_groups:
            raise ValueError(
                f"{self.region}: name the destination replicas' security groups there "
                f"(context destinationSecurityGroupIds={self.region}=sg-...); populators reach only them"
            )
        props = warmer.props
        itype = instance_type or props.instance_type
        if Token.is_unresolved(itype.to_string()):
            raise ValueError(
                f"{self.region}: give the populators' instance type as a plain name (the "
                "CacheWarmer's is a token of its own stack)"
            )
        self.vpc_id = vpc.vpc_id
        self.key = kms.Key(
            self,
            "Key",
            description=f"cachewarm populators in {self.region}: root disks, agent output logs",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        admit_logs_to_key(self.key)
        self.agent_logs = build_agent_log_group(self, props, self.key)
        self.role = iam.Role(
            self,
            "PopulatorRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"cachewarm populators in {self.region}: the SSM agent + the cachewarm agent policy",
            managed_policies=[ssm_agent_policy(self)],
        )
        # The SSM agent writes the commands' output to this region's group; the status objects and
        # the transport bucket are the home region's (the warmer's agent policy, attached below).
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="CommandOutput",
                actions=["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                resources=[self.agent_logs.log_group_arn, f"{self.agent_logs.log_group_arn}:log-stream:*"],
            )
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="FindCommandOutputGroup", actions=["logs:DescribeLogGroups"], resources=["*"]
            )
        )
        self.security_group = populator_security_group(
            self, vpc, destination_security_groups, props.memcached_port
        )
        self.launch_template = populator_launch_template(
            self,
            props,
            role=self.role,
            security_group=self.security_group,
            key=self.key,
            artifacts=warmer.artifacts,
            instance_type=itype,
            machine_image=machine_image,
        )
        self.documents = build_documents(
            self,
            props.ssm_documents_dir,
            warmer.artifacts,
            names=warmer.document_names,
            transport_bucket_prefix=warmer.transport_bucket_prefix,
        )
        for resource in (self.key, self.agent_logs, self.role, self.security_group, self.launch_template):
            _weak(resource)
        warmer.add_destination_region(self)

    # What the home stack reads, as the resources' own attributes (the L2 ARN and name properties
    # refuse to cross environments without physical names).
    @property
    def launch_template_id(self) -> str:
        lt_id = self.launch_template.launch_template_id
        assert lt_id is not None  # created here, never imported
        return lt_id

    @property
    def role_arn(self) -> str:
        return _cfn(self.role, iam.CfnRole).attr_arn

    @property
    def role_name(self) -> str:
        return _cfn(self.role, iam.CfnRole).ref

    @property
    def key_arn(self) -> str:
        return _cfn(self.key, kms.CfnKey).attr_arn

    @property
    def log_group_name(self) -> str:
        return _cfn(self.agent_logs, logs.CfnLogGroup).ref

    @property
    def document_names(self) -> dict[str, str]:
        return {stem: str(doc.name) for stem, doc in self.documents.items()}


def _cfn(resource: Resource, kind: type[T]) -> T:
    child = resource.node.default_child
    assert isinstance(child, kind)
    return child


def _weak(resource: Resource) -> None:
    """The home stack reads it through `Fn::GetStackOutput` (no export, no custom resource)."""
    resource.apply_cross_stack_reference_strength(ReferenceStrength.WEAK)
