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
from cachewarm.contract import inputs


@dataclass
class CacheWarmerProps:
    """Inputs of the construct. Paths are read at synth time."""

    asl_path: Path
    lambdas_dir: Path
    ssm_documents_dir: Path
    dumper_tarball: Path
    agent_bundle: Path
    vpc: ec2.IVpc
    machine_image: ec2.IMachineImage
    instance_type: ec2.InstanceType
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
    # The state machine that tears down what a stopped (ABORTED) or timed-out warm execution left;
    # default: teardown.asl.json next to asl_path.
    teardown_asl_path: Path | None = None
