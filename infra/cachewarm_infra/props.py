"""`CacheWarmerProps`: the inputs of the `CacheWarmer` construct (its own module so every builder can
take them without importing the construct that wires the builders)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aws_cdk import Duration
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns

from cachewarm_infra import assets
from cachewarm_infra.contract import inputs

DEFAULT_AMI_PARAMETER = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
DEFAULT_INSTANCE_TYPE = "c6i.2xlarge"


@dataclass(kw_only=True)
class CacheWarmerProps:
    """Inputs of the construct (keyword-only). Required: `vpc`, `destination_security_groups` and
    `source_security_groups` (the construct refuses to build without the two groups).

    The file inputs default to the installed package's data (`cachewarm_infra.assets`): the ASL files,
    the SSM documents, the Lambda code, the dumper tarball and the agent bundle built with it. A path
    given here replaces the packaged one; paths are read at synth time.
    """

    vpc: ec2.IVpc
    # Default: Amazon Linux 2023 (x86_64) from AWS's public SSM parameter; the install script needs
    # dnf's python3.11 and xfsprogs.
    machine_image: ec2.IMachineImage = field(
        default_factory=lambda: ec2.MachineImage.from_ssm_parameter(DEFAULT_AMI_PARAMETER)
    )
    # Must be Nitro (io2 multi-attach).
    instance_type: ec2.InstanceType = field(default_factory=lambda: ec2.InstanceType(DEFAULT_INSTANCE_TYPE))
    asl_path: Path = field(default_factory=assets.default(assets.WARM_ASL))
    lambdas_dir: Path = field(default_factory=assets.default(assets.LAMBDAS))
    ssm_documents_dir: Path = field(default_factory=assets.default(assets.SSM_DOCUMENTS))
    dumper_tarball: Path = field(default_factory=assets.default(assets.DUMPER_TARBALL))
    agent_bundle: Path = field(default_factory=assets.default(assets.AGENT_BUNDLE))
    # Optional subnets for populators (env POPULATOR_SUBNET_IDS); by default the controller launches
    # each populator in its source node's subnet (same AZ, as multi-attach requires).
    subnet_ids: Sequence[str] = ()
    kms_key: kms.IKey | None = None
    # Must match the execution input's `status_prefix` (the controller's default is the same).
    status_prefix: str = inputs.DEFAULT_STATUS_PREFIX
    tracing: bool = True
    log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH
    powertools_layer_arn: str | None = None
    lambda_timeout: Duration = field(default_factory=lambda: Duration.minutes(5))
    lambda_memory_mb: int = 512
    root_volume_gb: int = 30
    root_device_name: str = "/dev/xvda"
    # Optional: also start a warm when an instance of one of these Auto Scaling groups launches.
    asg_group_names: Sequence[str] = ()
    alarm_topic: sns.ITopic | None = None
    # IAM principal ARNs that may put "Replica Deployed" events on the stack's bus (wildcards allowed,
    # e.g. a deploy pipeline's role); empty: any principal of this account with events:PutEvents on it.
    warm_starters: Sequence[str] = ()
    # Required: the destination replicas' security groups (populate writes there) and the source
    # replicas' (Verify reads a sample of their keys; the same group may be in both). Populators may
    # open connections only to these, on `memcached_port` (memcached has no authentication); a node
    # found by its replica tag counts only when it is in one of them (or of a destination region's).
    destination_security_groups: Sequence[ec2.ISecurityGroup] = ()
    source_security_groups: Sequence[ec2.ISecurityGroup] = ()
    # Which replicas may be warmed from which, "SOURCE->DESTINATION" (cachewarm.contract.replicas): a
    # side is a replica name (its nodes: tagged cachewarm:replica=<name> and in one of the groups
    # above) or asg:<group> (the instances of that Auto Scaling group). One "Replica Deployed" rule
    # per replica pair; an `asg_group_names` group launches a warm only as the destination of a pair;
    # ValidateInput refuses every other pair. Empty: no warm at all.
    replica_pairs: Sequence[str] = ()
    memcached_port: int = inputs.DEFAULT_MEMCACHED_PORT
    # Regions (other than the stack's) a cross-region S3 warm may launch its populators in
    # (docs/transport-s3.md, Cross-region). The controller's EC2 and SSM rights reach these regions
    # and no other; empty: same-region warms only. Each needs a `CacheWarmerRegion` (region.py) in a
    # stack of that region — its launch template, documents, log group and security group — which
    # wires itself to this construct (a synth without one fails, naming the region).
    destination_regions: Sequence[str] = ()
    # The state machine that tears down what a stopped (ABORTED) or timed-out warm execution left;
    # default: teardown.asl.json next to asl_path.
    teardown_asl_path: Path | None = None
