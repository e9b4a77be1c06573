"""`CacheWarmStack`: the `CacheWarmer` construct wired to deploy-time parameters and CDK context.

Context keys (`cdk deploy -c key=value`, or cdk.json) give defaults; the VPC, subnets and instance
type are also CloudFormation parameters, so one synthesized template deploys into any account.

| context | parameter | meaning |
|---|---|---|
| `vpcId` | `VpcId` | VPC of the memcached replicas |
| `subnetIds` (comma-separated) | `SubnetIds` | optional populator subnets (default: the source's) |
| `amiParameter` | (SSM parameter) | SSM parameter holding the populator AMI id |
| `instanceType` | `PopulatorInstanceType` | populator instance type (Nitro, for io2 multi-attach) |
| `kmsKeyArn` | — | existing KMS key; default: the stack creates one (rotation on) |
| `tracing` | — | X-Ray for the state machine and Lambdas (default true) |
| `asgNames` (comma-separated) | — | also warm on launches of these Auto Scaling groups |
| `alarmTopicArn` | — | SNS topic for the alarms |
| `warmStarters` (comma-separated) | — | principal ARNs that may put events on the warm bus |
| `destinationSecurityGroupIds` (required) | — | destination replicas' groups: `sg-…`, `<region>=sg-…` |
| `sourceSecurityGroupIds` (required) | — | source replicas' groups (Verify reads them) |
| `replicaPairs` (comma-separated) | — | `SOURCE->DESTINATION` replicas that may be warmed (none: no warm) |
| `destinationRegions` (comma-separated) | — | regions a cross-region S3 warm may put populators in |
| `destinationVpcs` (`<region>=vpc-…`, …) | — | each destination region's VPC (required per region) |
| `powertoolsLayerArn` | — | override the public Powertools layer (default: AWS's SSM parameter) |
| `aslPath`, `lambdasDir`, `ssmDocumentsDir` | — | files to deploy (default: see below) |
| `dumperTarball`, `agentBundle` | — | artifacts to deploy (default: see below) |

The populators' memcached peers are the named groups only (docs/deploy.md). With
`destinationRegions`, the app also deploys one `CacheWarmRegionStack` per region (`<stack name>-<region>`:
launch template, SSM documents, log group, security group there; region.py) and the stack needs an
explicit region (CDK_DEFAULT_REGION, which the CLI sets from AWS_REGION or the profile).

Paths not given: the checkout's (`from_context(node, repo)`, as infra/app.py runs it), else the
installed package's (CacheWarmerProps' defaults).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aws_cdk import Annotations, CfnOutput, CfnParameter, Environment, Fn, Stack, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct, Node

from cachewarm_infra.construct import CacheWarmer, CacheWarmerProps
from cachewarm_infra.contract import inputs
from cachewarm_infra.outputs import add_outputs
from cachewarm_infra.props import DEFAULT_AMI_PARAMETER, DEFAULT_INSTANCE_TYPE
from cachewarm_infra.region import CacheWarmerRegion

_SG = re.compile(r"sg-[0-9a-f]{8,17}")
_VPC = re.compile(r"vpc-[0-9a-f]{8,17}")


@dataclass(frozen=True)
class StackSettings:
    """Everything the stack reads from context, resolved to plain values."""

    # None: the installed package's own file (CacheWarmerProps' defaults).
    asl_path: Path | None = None
    lambdas_dir: Path | None = None
    ssm_documents_dir: Path | None = None
    dumper_tarball: Path | None = None
    agent_bundle: Path | None = None
    vpc_id: str = ""
    subnet_ids: tuple[str, ...] = ()
    ami_parameter: str = DEFAULT_AMI_PARAMETER
    instance_type: str = DEFAULT_INSTANCE_TYPE
    kms_key_arn: str = ""
    tracing: bool = True
    asg_names: tuple[str, ...] = ()
    alarm_topic_arn: str = ""
    powertools_layer_arn: str = ""
    warm_starters: tuple[str, ...] = ()
    # The replicas' security groups in the stack's region: destinations (populate) and sources (Verify).
    destination_security_group_ids: tuple[str, ...] = ()
    source_security_group_ids: tuple[str, ...] = ()
    replica_pairs: tuple[str, ...] = ()
    destination_regions: tuple[str, ...] = ()
    # Per destination region: its VPC, and the destination replicas' groups there.
    destination_vpcs: Mapping[str, str] = field(default_factory=dict)
    remote_security_group_ids: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def from_context(cls, node: Node, repo: Path | None = None) -> StackSettings:
        """Settings from CDK context. Relative paths are relative to `repo`; with a `repo` (a source
        checkout, as infra/app.py runs) a path not given is the checkout's, without one the package's."""

        def ctx(key: str, default: str = "") -> str:
            value = node.try_get_context(key)
            return default if value is None else str(value)

        def path(key: str, default: str) -> Path | None:
            given = ctx(key)
            if not given and repo is None:
                return None
            p = Path(given or default)
            return p if p.is_absolute() or repo is None else repo / p

        def csv(key: str) -> tuple[str, ...]:
            return tuple(s.strip() for s in ctx(key).split(",") if s.strip())

        if node.try_get_context("memcachedSecurityGroupIds") is not None:
            raise ValueError(
                "context memcachedSecurityGroupIds: replaced by destinationSecurityGroupIds and "
                "sourceSecurityGroupIds (the same groups may be given to both)"
            )
        home_groups, remote_groups = _security_groups(csv("destinationSecurityGroupIds"))
        source_groups, far_sources = _security_groups(csv("sourceSecurityGroupIds"))
        if far_sources:
            raise ValueError(
                "context sourceSecurityGroupIds: the sources are in the stack's region; "
                f"{', '.join(far_sources)} names another"
            )
        regions = csv("destinationRegions")
        vpcs = _region_map(node.try_get_context("destinationVpcs"), "destinationVpcs")
        for region, vpc in vpcs.items():
            if not _VPC.fullmatch(vpc):
                raise ValueError(f"context destinationVpcs: {region}={vpc!r} is not a VPC id (vpc-…)")
        for key, named in (("destinationVpcs", vpcs), ("destinationSecurityGroupIds", remote_groups)):
            extra = sorted(set(named) - set(regions))
            if extra:
                raise ValueError(f"context {key}: {', '.join(extra)} not in destinationRegions")
        for region in regions:
            if region not in vpcs:
                raise ValueError(
                    f"context destinationVpcs: no VPC for destination region {region} "
                    f"(-c destinationVpcs={region}=vpc-…): its populators run only in the VPC named here"
                )
            if region not in remote_groups:
                raise ValueError(
                    f"context destinationSecurityGroupIds: no group in destination region {region} "
                    f"(add {region}=sg-…): its populators reach only the groups named here"
                )
        tracing = ctx("tracing", "true").lower()
        if tracing not in ("true", "false"):
            raise ValueError(f"context tracing={tracing!r}: expected true or false")
        return cls(
            asl_path=path("aslPath", "statemachine/warm.asl.json"),
            lambdas_dir=path("lambdasDir", "lambdas"),
            ssm_documents_dir=path("ssmDocumentsDir", "infra/ssm_documents"),
            dumper_tarball=path("dumperTarball", "build/dist/cachewarm-dump.tar.gz"),
            agent_bundle=path("agentBundle", "build/dist/cachewarm-agent.tar.gz"),
            vpc_id=ctx("vpcId"),
            subnet_ids=csv("subnetIds"),
            ami_parameter=ctx("amiParameter", DEFAULT_AMI_PARAMETER),
            instance_type=ctx("instanceType", DEFAULT_INSTANCE_TYPE),
            kms_key_arn=ctx("kmsKeyArn"),
            tracing=tracing == "true",
            asg_names=csv("asgNames"),
            alarm_topic_arn=ctx("alarmTopicArn"),
            powertools_layer_arn=ctx("powertoolsLayerArn"),
            warm_starters=csv("warmStarters"),
            destination_security_group_ids=home_groups,
            source_security_group_ids=source_groups,
            replica_pairs=csv("replicaPairs"),
            destination_regions=regions,
            destination_vpcs=vpcs,
            remote_security_group_ids=remote_groups,
        )

    def paths(self) -> dict[str, Path]:
        """The file inputs given (the others take CacheWarmerProps' packaged defaults)."""
        names = ("asl_path", "lambdas_dir", "ssm_documents_dir", "dumper_tarball", "agent_bundle")
        return {n: p for n in names if (p := getattr(self, n)) is not None}


def _security_groups(entries: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """`sg-…` (the stack's region) and `<region>=sg-…` entries: (the stack's, {region: groups})."""
    home: list[str] = []
    remote: dict[str, list[str]] = {}
    for entry in entries:
        region, _, sg = entry.rpartition("=")
        if not _SG.fullmatch(sg) or (region and not inputs.matches(inputs.AWS_REGION, region)):
            raise ValueError(f"security group {entry!r}: expected sg-… or <region>=sg-…")
        (remote.setdefault(region, []) if region else home).append(sg)
    return tuple(home), {r: tuple(g) for r, g in remote.items()}


def _region_map(value: object, key: str) -> dict[str, str]:
    """`<region>=<value>,…` (or a JSON object in cdk.json) as {region: value}."""
    if value is None or value == "":
        return {}
    pairs = (
        value.items()
        if isinstance(value, dict)
        else (e.strip().partition("=")[::2] for e in str(value).split(",") if e.strip())
    )
    out: dict[str, str] = {}
    for region, item in pairs:
        region, item = str(region).strip(), str(item).strip()
        if not inputs.matches(inputs.AWS_REGION, region) or not item:
            raise ValueError(f"context {key}: {region}={item} is not <region>=<id>")
        if region in out:
            raise ValueError(f"context {key}: {region} named twice")
        out[region] = item
    return out


class CacheWarmStack(Stack):
    """The stack, and with `destination_regions` one `CacheWarmRegionStack` per region beside it in
    the app (`self.regions`)."""

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: StackSettings, **kwargs: object
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        # The destination regions' values come through Fn::GetStackOutput: no exports, no custom
        # resources, and those stacks deploy first (region.py).
        self.node.set_context("@aws-cdk/core:defaultCrossStackReferences", "weak")
        if settings.destination_regions and Token.is_unresolved(self.region):
            raise ValueError(
                "destinationRegions needs the stack's own region: set AWS_REGION (or a profile's "
                "region) for cdk synth and deploy (CDK_DEFAULT_REGION)"
            )
        vpc_id = CfnParameter(
            self,
            "VpcId",
            type="AWS::EC2::VPC::Id",
            description="VPC of the memcached replicas (populators run there)",
            **({"default": settings.vpc_id} if settings.vpc_id else {}),
        )
        subnet_ids = CfnParameter(
            self,
            "SubnetIds",
            type="CommaDelimitedList",
            default=",".join(settings.subnet_ids),
            description="Optional populator subnets, one per AZ (the controller's default for "
            "populator.subnet_ids); empty = the source node's subnet",
        )
        instance_type = CfnParameter(
            self,
            "PopulatorInstanceType",
            type="String",
            default=settings.instance_type,
            allowed_pattern=r"^[a-z][a-z0-9-]*\.[a-z0-9]+$",
            description="Populator instance type (must be Nitro: io2 multi-attach)",
        )
        # Only the VPC id is needed (for the populators' security group); no lookup, so synth is offline.
        vpc = ec2.Vpc.from_vpc_attributes(
            self, "Vpc", vpc_id=vpc_id.value_as_string, availability_zones=Fn.get_azs()
        )
        Annotations.of(vpc).acknowledge_warning(
            "@aws-cdk/aws-ec2:vpcAttributeIsListTokenavailabilityZones",
            "Only the VPC id is used (the populators' security group); no subnet is selected at synth.",
        )
        key = (
            kms.Key.from_key_arn(self, "ImportedKey", settings.kms_key_arn) if settings.kms_key_arn else None
        )
        topic = (
            sns.Topic.from_topic_arn(self, "AlarmTopic", settings.alarm_topic_arn)
            if settings.alarm_topic_arn
            else None
        )
        self.warmer = CacheWarmer(
            self,
            "CacheWarmer",
            CacheWarmerProps(
                **settings.paths(),
                vpc=vpc,
                subnet_ids=subnet_ids.value_as_list,
                machine_image=ec2.MachineImage.from_ssm_parameter(settings.ami_parameter),
                instance_type=ec2.InstanceType(instance_type.value_as_string),
                kms_key=key,
                tracing=settings.tracing,
                asg_group_names=settings.asg_names,
                alarm_topic=topic,
                powertools_layer_arn=settings.powertools_layer_arn or None,
                warm_starters=settings.warm_starters,
                destination_security_groups=_groups(
                    self, "Destination", settings.destination_security_group_ids
                ),
                source_security_groups=_groups(self, "Source", settings.source_security_group_ids),
                replica_pairs=settings.replica_pairs,
                destination_regions=settings.destination_regions,
            ),
        )
        add_outputs(self, self.warmer)
        self.regions = [
            CacheWarmRegionStack(
                scope,
                f"{construct_id}-{region}",
                warmer=self.warmer,
                vpc_id=settings.destination_vpcs[region],
                security_group_ids=settings.remote_security_group_ids[region],
                instance_type=settings.instance_type,
                ami_parameter=settings.ami_parameter,
                description=f"cachewarm: the populators' resources in {region} for {self.stack_name}",
                env=Environment(
                    account=None if Token.is_unresolved(self.account) else self.account, region=region
                ),
            )
            for region in settings.destination_regions
        ]


def _groups(scope: Construct, kind: str, ids: tuple[str, ...]) -> list[ec2.ISecurityGroup]:
    return [
        ec2.SecurityGroup.from_security_group_id(scope, f"{kind}Group{i}", sg) for i, sg in enumerate(ids)
    ]


class CacheWarmRegionStack(Stack):
    """A destination region's stack: its `CacheWarmerRegion` and the outputs the docs name."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        warmer: CacheWarmer,
        vpc_id: str,
        security_group_ids: tuple[str, ...],
        instance_type: str,
        ami_parameter: str,
        **kwargs: object,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        vpc = ec2.Vpc.from_vpc_attributes(self, "Vpc", vpc_id=vpc_id, availability_zones=Fn.get_azs())
        Annotations.of(vpc).acknowledge_warning(
            "@aws-cdk/aws-ec2:vpcAttributeIsListTokenavailabilityZones",
            "Only the VPC id is used (the populators' security group); no subnet is selected at synth.",
        )
        self.region_resources = r = CacheWarmerRegion(
            self,
            "CacheWarmerRegion",
            warmer=warmer,
            vpc=vpc,
            destination_security_groups=_groups(self, "Destination", security_group_ids),
            instance_type=ec2.InstanceType(instance_type),
            machine_image=ec2.MachineImage.from_ssm_parameter(ami_parameter),
        )
        CfnOutput(
            self,
            "PopulatorLaunchTemplateId",
            value=r.launch_template_id,
            description="populator.launch_template_id of a cross-region warm into this region",
        )
        CfnOutput(
            self,
            "PopulatorSecurityGroupId",
            value=r.security_group.security_group_id,
            description="allow memcached's port from it on the destination nodes here",
        )
        CfnOutput(
            self,
            "AgentOutputLogGroup",
            value=r.agent_logs.log_group_name,
            description="SSM command output of the populators here",
        )
