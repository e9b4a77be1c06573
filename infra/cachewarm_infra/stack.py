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
| `replicaPairs` (comma-separated) | — | `SOURCE->DESTINATION` replicas that may be warmed (none: no warm) |
| `memcachedSecurityGroupIds` (comma-separated) | — | replicas' groups: populators' only memcached peers |
| `destinationRegions` (comma-separated) | — | regions a cross-region S3 warm may put populators in |
| `powertoolsLayerArn` | — | override the public Powertools layer (default: AWS's SSM parameter) |
| `aslPath`, `lambdasDir`, `ssmDocumentsDir` | — | files to deploy (default: see below) |
| `dumperTarball`, `agentBundle` | — | artifacts to deploy (default: see below) |

Paths not given: the checkout's (`from_context(node, repo)`, as infra/app.py runs it), else the
installed package's (CacheWarmerProps' defaults).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aws_cdk import Annotations, CfnOutput, CfnParameter, Fn, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct, Node

from cachewarm_infra.construct import CacheWarmer, CacheWarmerProps
from cachewarm_infra.props import DEFAULT_AMI_PARAMETER, DEFAULT_INSTANCE_TYPE


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
    replica_pairs: tuple[str, ...] = ()
    memcached_security_group_ids: tuple[str, ...] = ()
    destination_regions: tuple[str, ...] = ()

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
            replica_pairs=csv("replicaPairs"),
            memcached_security_group_ids=csv("memcachedSecurityGroupIds"),
            destination_regions=csv("destinationRegions"),
        )

    def paths(self) -> dict[str, Path]:
        """The file inputs given (the others take CacheWarmerProps' packaged defaults)."""
        names = ("asl_path", "lambdas_dir", "ssm_documents_dir", "dumper_tarball", "agent_bundle")
        return {n: p for n in names if (p := getattr(self, n)) is not None}


class CacheWarmStack(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, *, settings: StackSettings, **kwargs: object
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
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
                replica_pairs=settings.replica_pairs,
                memcached_security_groups=[
                    ec2.SecurityGroup.from_security_group_id(self, f"MemcachedGroup{i}", sg)
                    for i, sg in enumerate(settings.memcached_security_group_ids)
                ],
                destination_regions=settings.destination_regions,
            ),
        )
        w = self.warmer
        CfnOutput(self, "StateMachineArn", value=w.state_machine.state_machine_arn)
        CfnOutput(
            self,
            "TeardownStateMachineArn",
            value=w.teardown_machine.state_machine_arn,
            description="tears down stopped or timed-out warms",
        )
        CfnOutput(self, "StatusBucketName", value=w.status_bucket.bucket_name)
        CfnOutput(self, "AlarmTopicArn", value=w.alarm_topic.topic_arn, description="every alarm notifies it")
        CfnOutput(
            self,
            "WarmEventBusName",
            value=w.event_bus.event_bus_name,
            description="put Replica Deployed events here (not the default bus)",
        )
        CfnOutput(self, "PopulatorLaunchTemplateId", value=w.launch_template_id)
        CfnOutput(
            self,
            "SourceNodePolicyArn",
            value=w.agent_policy.managed_policy_arn,
            description="Attach to the source memcached nodes' instance role (agent needs it)",
        )
        CfnOutput(self, "AgentBundleUrl", value=w.agent_asset.s3_object_url, description="cachewarm wheel(s)")
        CfnOutput(self, "DumperTarballUrl", value=w.dumper_asset.s3_object_url, description="cachewarm-dump")
        CfnOutput(self, "DumpDocumentName", value=w.document_name("dump-agent"))
        CfnOutput(self, "PopulateDocumentName", value=w.document_name("populate-agent"))
        CfnOutput(
            self,
            "InstallDocumentName",
            value=w.document_name("install-agent"),
            description="installs this deployment's agent and dumper (idempotent)",
        )
        CfnOutput(
            self, "AgentVersion", value=w.artifacts.version, description="cachewarm --version to expect"
        )
        CfnOutput(
            self, "AgentOutputLogGroup", value=w.agent_logs.log_group_name, description="SSM command output"
        )
        CfnOutput(
            self,
            "PopulatorSecurityGroupId",
            value=w.populator_sg.security_group_id,
            description="allow memcached's port from it on the source nodes (Verify reads them)",
        )
