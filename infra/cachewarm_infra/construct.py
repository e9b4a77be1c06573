"""`CacheWarmer`: everything one AWS account needs to run cachewarm, as one reusable construct.

What it creates (see docs/architecture.md):
- the Step Functions state machine from the ASL file, with one Lambda per `${<Name>FunctionArn}`;
- the SSM documents the controller runs on source nodes and populators;
- the dumper tarball and the agent bundle as S3 assets (versioned with the stack);
- the populator launch template, its instance profile and security group;
- the encrypted status bucket the agents write heartbeats to;
- an EventBridge rule that starts a warm when a replica is deployed;
- alarms and a dashboard.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aws_cdk import Acknowledgment, Aws, Duration, Fn, RemovalPolicy, Stack, Tags, Token, Validations
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_ssm as ssm
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from cachewarm_infra.asl import (
    AslTask,
    discover_function_substitutions,
    load_asl,
    placeholders,
    unsupported_integrations,
)

# Pinned with aws-lambda-powertools in pyproject.toml (a test keeps the two equal). AWS publishes the
# public layer ARN of every release as an SSM parameter, so one name works in every region.
POWERTOOLS_VERSION = "3.37.0"
POWERTOOLS_LAYER_PARAMETER = f"/aws/service/powertools/python/x86_64/python3.12/{POWERTOOLS_VERSION}"

# The tags the controller puts on everything it creates (brief: "Tags on every AWS resource").
TAG_MANAGED = "cachewarm:managed"
TAG_WARM_ID = "cachewarm:warm-id"
TAG_NODE = "cachewarm:node"

# The "replica deployed" event (schema in README.md and docs/architecture.md).
REPLICA_EVENT_SOURCE = "cachewarm"
REPLICA_EVENT_DETAIL_TYPE = "Replica Deployed"

# SSM document parameters the construct fills with the S3 URLs of the build artifacts, so the
# documents always install the agent and dumper versioned with this deployment.
ARTIFACT_PARAMETERS = ("dumperTarballUrl", "agentBundleUrl")
# AWS-owned SSM documents the controller sends.
AWS_DOCUMENTS = ("AWS-RunShellScript",)


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
    # Must match the execution input's `status_prefix` (the controller's default is "warms").
    status_prefix: str = "warms"
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


class CacheWarmer(Construct):
    """The deployable cachewarm control plane (state machine, Lambdas, agents' infrastructure)."""

    def __init__(self, scope: Construct, construct_id: str, props: CacheWarmerProps) -> None:
        super().__init__(scope, construct_id)
        self.props = props
        asl_text = _read_asl(props.asl_path)
        if not discover_function_substitutions(asl_text):
            raise ValueError(f"{props.asl_path}: no ${{<Name>FunctionArn}} placeholders found")
        teardown_path = props.teardown_asl_path or props.asl_path.with_name("teardown.asl.json")
        teardown_text = _read_asl(teardown_path)
        _check_teardown_grace(teardown_path, teardown_text, props.lambda_timeout)
        # One Function per `${<Name>FunctionArn}` in either ASL (the teardown machine reuses the
        # warm machine's Teardown function).
        self.tasks: list[AslTask] = discover_function_substitutions(asl_text + teardown_text)
        for path, what in (
            (props.lambdas_dir, "Lambda code directory"),
            (props.ssm_documents_dir, "SSM documents directory"),
        ):
            if not path.is_dir():
                raise FileNotFoundError(f"{what} not found: {path}")
        for path, what in ((props.dumper_tarball, "dumper tarball"), (props.agent_bundle, "agent bundle")):
            if not path.is_file():
                raise FileNotFoundError(f"{what} not found: {path} (build it with `make dist`)")

        self.key = props.kms_key or self._make_key()
        self.access_logs, self.status_bucket = self._make_buckets()
        self.dumper_asset = s3_assets.Asset(self, "DumperTarball", path=str(props.dumper_tarball))
        self.agent_asset = s3_assets.Asset(self, "AgentBundle", path=str(props.agent_bundle))
        self.documents = self._make_documents()
        self.agent_policy = self._make_agent_policy()
        self.populator_role, self.populator_sg, self.launch_template = self._make_populator()
        self.controller_role = self._make_controller_role()
        self.functions = self._make_functions()
        self.state_machine = self._make_state_machine("StateMachine", asl_text)
        self.teardown_machine = self._make_state_machine("TeardownStateMachine", teardown_text)
        self.replica_rule, self.asg_rule = self._make_rules()
        self.teardown_rule = self._make_teardown_rule()
        self.alarms = self._make_alarms()
        self.dashboard = self._make_dashboard()
        self._acknowledge_nag_findings()

    # ---- storage --------------------------------------------------------------------------------
    def _make_key(self) -> kms.Key:
        return kms.Key(
            self,
            "Key",
            description="cachewarm: EBS volumes, populator root disks, status bucket",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN,
        )

    def _make_buckets(self) -> tuple[s3.Bucket, s3.Bucket]:
        # S3 server access logs can only be delivered to an SSE-S3 bucket.
        access_logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(90))],
            removal_policy=RemovalPolicy.RETAIN,
        )
        status = s3.Bucket(
            self,
            "StatusBucket",
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.key,
            bucket_key_enabled=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix="status-bucket/",
            # Status objects matter during a warm and for a post-mortem, not forever.
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(30))],
            removal_policy=RemovalPolicy.RETAIN,
        )
        return access_logs, status

    # ---- SSM documents --------------------------------------------------------------------------
    def _make_documents(self) -> dict[str, ssm.CfnDocument]:
        """One Command document per `infra/ssm_documents/<stem>.json`, keyed by `<stem>`."""
        docs: dict[str, ssm.CfnDocument] = {}
        urls = {
            "dumperTarballUrl": self.dumper_asset.s3_object_url,
            "agentBundleUrl": self.agent_asset.s3_object_url,
        }
        for path in sorted(self.props.ssm_documents_dir.glob("*.json")):
            try:
                content = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: not valid JSON ({e})") from e
            params = content.get("parameters", {})
            for name, spec in params.items():
                if "allowedPattern" not in spec and "allowedValues" not in spec:
                    raise ValueError(f"{path}: parameter {name} has no allowedPattern")
                if name in urls:
                    spec["default"] = urls[name]
            docs[path.stem] = ssm.CfnDocument(
                self,
                f"{_pascal(path.stem)}Document",
                content=content,
                document_type="Command",
                document_format="JSON",
            )
        for needed in ("dump-agent", "populate-agent"):
            if needed not in docs:
                raise FileNotFoundError(f"{self.props.ssm_documents_dir}/{needed}.json not found")
        return docs

    @property
    def launch_template_id(self) -> str:
        # A LaunchTemplate created here always has an id (None only for imported templates).
        lt_id = self.launch_template.launch_template_id
        assert lt_id is not None
        return lt_id

    def document_name(self, stem: str) -> str:
        return self.documents[stem].ref

    def _document_arns(self) -> list[str]:
        stack = Stack.of(self)
        ours = [
            stack.format_arn(service="ssm", resource="document", resource_name=d.ref)
            for d in self.documents.values()
        ]
        # The controller's Plan step reads memcached `stats` on source nodes with AWS's shell document
        # (a fixed script in lambdas/cachewarm_controller/agents.py).
        aws_owned = [f"arn:{Aws.PARTITION}:ssm:{Aws.REGION}::document/{name}" for name in AWS_DOCUMENTS]
        return ours + aws_owned

    # ---- agents' permissions and the populator instances ------------------------------------------
    def _make_agent_policy(self) -> iam.ManagedPolicy:
        """What `cachewarm agent dump|populate` needs: read the artifacts, write its status object.

        Attached to the populator role here; the platform team attaches the same managed policy to
        the source memcached nodes' instance role (output `SourceNodePolicyArn`).
        """
        prefix = self.props.status_prefix
        return iam.ManagedPolicy(
            self,
            "AgentPolicy",
            description="cachewarm agents: read the agent/dumper artifacts, publish status objects",
            statements=[
                iam.PolicyStatement(
                    sid="ReadArtifacts",
                    actions=["s3:GetObject"],
                    resources=[
                        _object_arn(self.dumper_asset.s3_bucket_name, self.dumper_asset.s3_object_key),
                        _object_arn(self.agent_asset.s3_bucket_name, self.agent_asset.s3_object_key),
                    ],
                ),
                iam.PolicyStatement(
                    sid="PublishStatus",
                    actions=["s3:GetObject", "s3:PutObject"],
                    resources=[self.status_bucket.arn_for_objects(f"{prefix}/*")],
                ),
                iam.PolicyStatement(
                    sid="StatusBucketKey",
                    actions=["kms:Decrypt", "kms:GenerateDataKey"],
                    resources=[self.key.key_arn],
                ),
            ],
        )

    def _make_populator(self) -> tuple[iam.Role, ec2.SecurityGroup, ec2.LaunchTemplate]:
        role = iam.Role(
            self,
            "PopulatorRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description="cachewarm populator instances: SSM agent + the cachewarm agent policy",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSSMManagedInstanceCore"),
                self.agent_policy,
            ],
        )
        sg = ec2.SecurityGroup(
            self,
            "PopulatorSecurityGroup",
            vpc=self.props.vpc,
            description="cachewarm populators: no inbound; outbound to memcached, S3 and SSM",
            allow_all_outbound=True,
        )
        template = ec2.LaunchTemplate(
            self,
            "PopulatorTemplate",
            user_data=self._populator_user_data(),
            machine_image=self.props.machine_image,
            instance_type=self.props.instance_type,
            role=role,
            security_group=sg,
            require_imdsv2=True,
            http_put_response_hop_limit=1,
            detailed_monitoring=True,
            instance_initiated_shutdown_behavior=ec2.InstanceInitiatedShutdownBehavior.TERMINATE,
            block_devices=[
                ec2.BlockDevice(
                    device_name=self.props.root_device_name,
                    volume=ec2.BlockDeviceVolume.ebs(
                        self.props.root_volume_gb,
                        encrypted=True,
                        kms_key=self.key,
                        volume_type=ec2.EbsDeviceVolumeType.GP3,
                        delete_on_termination=True,
                    ),
                )
            ],
        )
        Tags.of(template).add(TAG_MANAGED, "true")
        return role, sg, template

    def _populator_user_data(self) -> ec2.UserData:
        """Install this deployment's agent at boot, so `cachewarm agent populate` is there when the
        controller's Run Command arrives (the populate document waits for cloud-init)."""
        ud = ec2.UserData.for_linux()
        ud.add_commands(*install_agent_commands(self.agent_asset.s3_object_url))
        return ud

    # ---- the controller -------------------------------------------------------------------------
    def _make_controller_role(self) -> iam.Role:
        """One role for the controller Lambdas: every EC2 mutation is scoped by cachewarm tags."""
        stack = Stack.of(self)

        def ec2_arn(resource: str) -> str:
            return stack.format_arn(service="ec2", resource=resource, resource_name="*")

        volumes, instances = ec2_arn("volume"), ec2_arn("instance")
        managed_request = {"StringEquals": {f"aws:RequestTag/{TAG_MANAGED}": "true"}}
        managed_resource = {"StringEquals": {f"aws:ResourceTag/{TAG_MANAGED}": "true"}}
        prefix = self.props.status_prefix
        role = iam.Role(
            self,
            "ControllerRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="cachewarm controller Lambdas",
        )
        statements = [
            # Describe/List calls have no resource-level permissions in IAM: "*" is the only option.
            iam.PolicyStatement(
                sid="Inventory",
                actions=[
                    "ec2:DescribeInstances",
                    "ec2:DescribeInstanceStatus",
                    "ec2:DescribeInstanceTypes",
                    "ec2:DescribeVolumes",
                    "ec2:DescribeVolumesModifications",
                    "ec2:DescribeSubnets",
                    "ec2:DescribeLaunchTemplateVersions",
                    "ec2:DescribeTags",
                    "autoscaling:DescribeAutoScalingGroups",
                    "ssm:DescribeInstanceInformation",
                    "ssm:GetCommandInvocation",
                    "ssm:ListCommandInvocations",
                    "ssm:ListCommands",
                ],
                resources=["*"],
            ),
            iam.PolicyStatement(
                sid="CreateTaggedVolumes",
                actions=["ec2:CreateVolume"],
                resources=[volumes],
                conditions=managed_request,
            ),
            iam.PolicyStatement(
                sid="LaunchTaggedPopulators",
                actions=["ec2:RunInstances"],
                resources=[instances],
                conditions=managed_request,
            ),
            # The other resources a RunInstances request names: only our launch template.
            iam.PolicyStatement(
                sid="LaunchFromTemplate",
                actions=["ec2:RunInstances"],
                resources=[
                    stack.format_arn(
                        service="ec2",
                        resource="launch-template",
                        resource_name=self.launch_template_id,
                    ),
                    ec2_arn("subnet"),
                    ec2_arn("network-interface"),
                    ec2_arn("security-group"),
                    volumes,
                    f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}::image/*",
                ],
            ),
            iam.PolicyStatement(
                sid="TagOnCreateOnly",
                actions=["ec2:CreateTags"],
                resources=[volumes, instances],
                conditions={"StringEquals": {"ec2:CreateAction": ["CreateVolume", "RunInstances"]}},
            ),
            # Attach/detach name two resources: our tagged volume, and a source node or populator.
            iam.PolicyStatement(
                sid="AttachOurVolumes",
                actions=["ec2:AttachVolume", "ec2:DetachVolume"],
                resources=[volumes],
                conditions=managed_resource,
            ),
            iam.PolicyStatement(
                sid="AttachToInstances",
                actions=["ec2:AttachVolume", "ec2:DetachVolume"],
                resources=[instances],
            ),
            iam.PolicyStatement(
                sid="DeleteOurVolumes",
                actions=["ec2:DeleteVolume"],
                resources=[volumes],
                conditions=managed_resource,
            ),
            iam.PolicyStatement(
                sid="TerminateOurPopulators",
                actions=["ec2:TerminateInstances"],
                resources=[instances],
                conditions=managed_resource,
            ),
            iam.PolicyStatement(
                sid="PassPopulatorRole",
                actions=["iam:PassRole"],
                resources=[self.populator_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
            ),
            iam.PolicyStatement(
                sid="RunOurDocuments",
                actions=["ssm:SendCommand"],
                resources=[*self._document_arns(), instances],
            ),
            iam.PolicyStatement(
                sid="CancelCommands",
                actions=["ssm:CancelCommand"],
                resources=["*"],
            ),
            iam.PolicyStatement(
                sid="ListStatus",
                actions=["s3:ListBucket"],
                resources=[self.status_bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{prefix}/*"]}},
            ),
            iam.PolicyStatement(
                sid="ReadWriteStatus",
                actions=["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
                resources=[self.status_bucket.arn_for_objects(f"{prefix}/*")],
            ),
            # Encrypted io2 volumes with our key: EC2 uses a grant on the caller's behalf.
            iam.PolicyStatement(
                sid="UseKey",
                actions=[
                    "kms:Decrypt",
                    "kms:DescribeKey",
                    "kms:GenerateDataKey",
                    "kms:GenerateDataKeyWithoutPlaintext",
                    "kms:ReEncryptFrom",
                    "kms:ReEncryptTo",
                ],
                resources=[self.key.key_arn],
            ),
            iam.PolicyStatement(
                sid="GrantKeyToEbs",
                actions=["kms:CreateGrant"],
                resources=[self.key.key_arn],
                conditions={"Bool": {"kms:GrantIsForAWSResource": "true"}},
            ),
        ]
        policy = iam.Policy(self, "ControllerPolicy", statements=statements)
        policy.attach_to_role(role)
        self.controller_policy = policy
        return role

    def _layer(self) -> lambda_.ILayerVersion:
        arn = self.props.powertools_layer_arn or ssm.StringParameter.value_for_string_parameter(
            self, POWERTOOLS_LAYER_PARAMETER
        )
        return lambda_.LayerVersion.from_layer_version_arn(self, "PowertoolsLayer", arn)

    def lambda_environment(self) -> dict[str, str]:
        env = {
            "STATUS_BUCKET": self.status_bucket.bucket_name,
            "STATUS_PREFIX": self.props.status_prefix,
            "DUMP_DOCUMENT_NAME": self.document_name("dump-agent"),
            "POPULATE_DOCUMENT_NAME": self.document_name("populate-agent"),
            "KMS_KEY_ID": self.key.key_arn,
            "POPULATOR_LAUNCH_TEMPLATE_ID": self.launch_template_id,
            "POWERTOOLS_SERVICE_NAME": "cachewarm",
            "POWERTOOLS_METRICS_NAMESPACE": "CacheWarm",
        }
        if self.props.subnet_ids:
            env["POPULATOR_SUBNET_IDS"] = Fn.join(",", list(self.props.subnet_ids))
        for stem in self.documents:
            if stem not in ("dump-agent", "populate-agent"):
                env[f"{_env_name(stem)}_DOCUMENT_NAME"] = self.document_name(stem)
        return env

    def _make_functions(self) -> dict[str, lambda_.Function]:
        code = lambda_.Code.from_asset(
            str(self.props.lambdas_dir),
            exclude=["**/__pycache__", "**/*.pyc", "tests", ".pytest_cache"],
        )
        layer = self._layer()
        env = self.lambda_environment()
        functions: dict[str, lambda_.Function] = {}
        for task in self.tasks:
            log_group = logs.LogGroup(
                self,
                f"{task.pascal}Logs",
                retention=self.props.log_retention,
                removal_policy=RemovalPolicy.DESTROY,
            )
            fn = lambda_.Function(
                self,
                f"{task.pascal}Function",
                description=f"cachewarm controller: {task.pascal}",
                runtime=lambda_.Runtime.PYTHON_3_12,
                architecture=lambda_.Architecture.X86_64,
                handler=task.handler,
                code=code,
                layers=[layer],
                role=self.controller_role,
                timeout=self.props.lambda_timeout,
                memory_size=self.props.lambda_memory_mb,
                environment=env,
                tracing=lambda_.Tracing.ACTIVE if self.props.tracing else lambda_.Tracing.DISABLED,
                log_group=log_group,
            )
            functions[task.pascal] = fn
        return functions

    def definition_substitutions(self) -> dict[str, str]:
        subs = {t.placeholder: self.functions[t.pascal].function_arn for t in self.tasks}
        subs["StatusBucket"] = self.status_bucket.bucket_name
        subs["StatusPrefix"] = self.props.status_prefix
        subs["DumpDocumentName"] = self.document_name("dump-agent")
        subs["PopulateDocumentName"] = self.document_name("populate-agent")
        subs["PopulatorLaunchTemplateId"] = self.launch_template_id
        return subs

    def _make_state_machine(self, construct_id: str, asl_text: str) -> sfn.StateMachine:
        """A state machine from an ASL file: the substitutions its text uses, logs, tracing, and
        invoke rights on exactly the functions it names."""
        used = placeholders(asl_text)
        subs = {k: v for k, v in self.definition_substitutions().items() if k in used}
        missing = sorted(used - subs.keys())
        if missing:
            raise ValueError(
                f"{construct_id}: the ASL uses substitutions the construct does not provide: {missing}"
            )
        log_group = logs.LogGroup(
            self,
            f"{construct_id}Logs",
            retention=self.props.log_retention,
            removal_policy=RemovalPolicy.DESTROY,
        )
        machine = sfn.StateMachine(
            self,
            construct_id,
            definition_body=sfn.DefinitionBody.from_string(asl_text),
            definition_substitutions=subs,
            state_machine_type=sfn.StateMachineType.STANDARD,
            tracing_enabled=self.props.tracing,
            logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ALL, include_execution_data=True),
        )
        names = {t.pascal for t in discover_function_substitutions(asl_text)}
        machine.add_to_role_policy(
            iam.PolicyStatement(
                sid="InvokeControllerFunctions",
                actions=["lambda:InvokeFunction"],
                resources=[fn.function_arn for name, fn in sorted(self.functions.items()) if name in names],
            )
        )
        # The operator CLI finds the status objects from these tags.
        Tags.of(machine).add("cachewarm:status-bucket", self.status_bucket.bucket_name)
        Tags.of(machine).add("cachewarm:status-prefix", self.props.status_prefix)
        return machine

    # ---- triggers -------------------------------------------------------------------------------
    def replica_event_input(self) -> events.RuleTargetInput:
        """State machine input from a "Replica Deployed" event (the schema is in docs/architecture.md)."""
        return events.RuleTargetInput.from_object(
            {
                "warm_id": events.EventField.from_path("$.detail.warm_id"),
                "source": {"replica": events.EventField.from_path("$.detail.source.replica")},
                "destination": events.EventField.from_path("$.detail.destination"),
                "populator": {"launch_template_id": self.launch_template_id},
            }
        )

    def _make_rules(self) -> tuple[events.Rule, events.Rule | None]:
        dlq = sqs.Queue(
            self,
            "TriggerDeadLetters",
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=self.key,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        self.trigger_dlq = dlq
        replica = events.Rule(
            self,
            "ReplicaDeployedRule",
            description="Start a cachewarm execution when a new memcached replica is deployed",
            event_pattern=events.EventPattern(
                source=[REPLICA_EVENT_SOURCE],
                detail_type=[REPLICA_EVENT_DETAIL_TYPE],
                # Every path the input transformer reads must exist (a missing one would become null);
                # `exists` only matches leaves, hence source.replica rather than source.
                detail={
                    "warm_id": [{"exists": True}],
                    "source": {"replica": [{"exists": True}]},
                    "destination": {"endpoints": [{"exists": True}]},
                },
            ),
        )
        replica.add_target(
            targets.SfnStateMachine(
                self.state_machine,
                input=self.replica_event_input(),
                dead_letter_queue=dlq,
                retry_attempts=4,
                max_event_age=Duration.hours(2),
            )
        )
        asg_rule = None
        if self.props.asg_group_names:
            # One launch event per new instance: the controller's warm id (from the group name and
            # the activity id) keeps the warm idempotent; see docs/architecture.md.
            asg_rule = events.Rule(
                self,
                "AsgLaunchRule",
                description="Start a cachewarm execution when a tagged replica Auto Scaling group launches",
                event_pattern=asg_launch_pattern(self.props.asg_group_names),
            )
            asg_rule.add_target(
                targets.SfnStateMachine(
                    self.state_machine,
                    input=events.RuleTargetInput.from_object(
                        {
                            "warm_id": events.EventField.from_path("$.detail.ActivityId"),
                            "destination": {
                                "asg_name": events.EventField.from_path("$.detail.AutoScalingGroupName"),
                            },
                            "populator": {"launch_template_id": self.launch_template_id},
                        }
                    ),
                    dead_letter_queue=dlq,
                    retry_attempts=4,
                )
            )
        return replica, asg_rule

    def _make_teardown_rule(self) -> events.Rule:
        """A stopped (ABORTED) or timed-out (TIMED_OUT) warm execution runs no Catch: this rule hands
        the whole status-change event (detail.input is the execution's input) to the teardown machine."""
        rule = events.Rule(
            self,
            "StoppedWarmRule",
            description="Tear down what a stopped or timed-out cachewarm execution left behind",
            event_pattern=events.EventPattern(
                source=["aws.states"],
                detail_type=["Step Functions Execution Status Change"],
                detail={
                    "status": ["ABORTED", "TIMED_OUT"],
                    "stateMachineArn": [self.state_machine.state_machine_arn],
                },
            ),
        )
        rule.add_target(
            targets.SfnStateMachine(
                self.teardown_machine,
                dead_letter_queue=self.trigger_dlq,
                retry_attempts=4,
                max_event_age=Duration.hours(2),
            )
        )
        return rule

    # ---- observability --------------------------------------------------------------------------
    def warm_metric(self, name: str, step: str, statistic: str = "Sum") -> cw.Metric:
        """A metric the controller's handlers emit with Powertools (EMF): namespace CacheWarm,
        dimensions service=cachewarm and Step=<handler name>."""
        return cw.Metric(
            namespace="CacheWarm",
            metric_name=name,
            dimensions_map={"service": "cachewarm", "Step": step},
            statistic=statistic,
            period=Duration.minutes(1),
        )

    def _make_alarms(self) -> list[cw.Alarm]:
        sm = self.state_machine
        five = Duration.minutes(5)
        specs = [
            ("ExecutionsFailed", sm.metric_failed(period=five), "a warm failed"),
            ("ExecutionsTimedOut", sm.metric_timed_out(period=five), "a warm timed out"),
            ("ExecutionsAborted", sm.metric_aborted(period=five), "a warm was aborted"),
            (
                # CheckProgress revives a node whose heartbeat went stale (or whose agent failed).
                "StaleHeartbeats",
                self.warm_metric("Revives", "check_progress").with_(period=five),
                "an agent's heartbeat went stale or its command failed (the node was revived)",
            ),
            (
                "TeardownLeftovers",
                self.warm_metric("TeardownLeftovers", "teardown", "Maximum").with_(period=five),
                "teardown left volumes or populators behind",
            ),
            (
                "StoppedWarmTeardownFailed",
                self.teardown_machine.metric_failed(period=five),
                "the teardown of a stopped or timed-out warm failed (its resources may be left)",
            ),
        ]
        alarms = []
        for name, metric, what in specs:
            alarm = cw.Alarm(
                self,
                f"{name}Alarm",
                alarm_description=f"cachewarm: {what}. See docs/runbook.md.",
                metric=metric,
                threshold=1,
                evaluation_periods=1,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            )
            if self.props.alarm_topic is not None:
                alarm.add_alarm_action(cw_actions.SnsAction(self.props.alarm_topic))
            alarms.append(alarm)
        return alarms

    def _make_dashboard(self) -> cw.Dashboard:
        sm = self.state_machine
        minute = Duration.minutes(1)
        # CheckProgress reports running totals (items and bytes populated so far): rates are RATE().
        items = self.warm_metric("ItemsPopulated", "check_progress", "Maximum")
        bytes_ = self.warm_metric("BytesPopulated", "check_progress", "Maximum")
        dash = cw.Dashboard(self, "Dashboard", default_interval=Duration.hours(12))
        dash.add_widgets(
            cw.GraphWidget(
                title="Items/s written to the destination",
                left=[
                    cw.MathExpression(
                        expression="RATE(items)",
                        using_metrics={"items": items},
                        label="items/s",
                        period=minute,
                    )
                ],
                width=12,
            ),
            cw.GraphWidget(
                title="Bytes/s written, and totals",
                left=[
                    cw.MathExpression(
                        expression="RATE(bytes)",
                        using_metrics={"bytes": bytes_},
                        label="bytes/s",
                        period=minute,
                    )
                ],
                right=[items, bytes_],
                width=12,
            ),
        )
        dash.add_widgets(
            cw.GraphWidget(
                title="Nodes: source nodes / done / revived",
                left=[
                    self.warm_metric("SourceNodes", "plan", "Maximum"),
                    self.warm_metric("NodesDone", "check_progress", "Maximum"),
                    self.warm_metric("Revives", "check_progress"),
                ],
                width=12,
            ),
            cw.GraphWidget(
                title="Executions",
                left=[sm.metric_started(), sm.metric_succeeded(), sm.metric_failed(), sm.metric_timed_out()],
                width=12,
            ),
        )
        progress = self.functions.get("CheckProgress")
        if progress is not None:
            # Per-node progress: CheckProgress logs one structured line per node and poll
            # (node_id, role, state, items, bytes, files); this shows the latest of each.
            dash.add_widgets(
                cw.LogQueryWidget(
                    title="Per-node progress (latest CheckProgress poll)",
                    log_group_names=[progress.log_group.log_group_name],
                    query_lines=[
                        "fields @timestamp, correlation_id, node_id, state, items, bytes, files",
                        "filter ispresent(node_id) and ispresent(items)",
                        "stats latest(state) as state, max(items) as items, max(bytes) as bytes,"
                        " max(files) as files by correlation_id, node_id",
                        "sort correlation_id, node_id",
                    ],
                    width=24,
                )
            )
        dash.add_widgets(
            cw.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms), width=24),
        )
        return dash

    # ---- cdk-nag --------------------------------------------------------------------------------
    def _acknowledge_nag_findings(self) -> None:
        """Every accepted AwsSolutions finding, with the reason. Tests fail on anything else."""
        self.nag_acknowledgements: list[tuple[str, str, str]] = []
        # How cdk-nag prints `Stack.format_arn` ARNs: concrete region/account when the stack has an env.
        stack = Stack.of(self)
        region = "<AWS::Region>" if Token.is_unresolved(stack.region) else stack.region
        account = "<AWS::AccountId>" if Token.is_unresolved(stack.account) else stack.account
        ec2_any = f"arn:<AWS::Partition>:ec2:{region}:{account}"

        def ack(scope: Construct, rule: str, reason: str) -> None:
            Validations.of(scope).acknowledge(Acknowledgment(id=rule, reason=reason))
            self.nag_acknowledgements.append((scope.node.path, rule, reason))

        ack(
            self.access_logs,
            "AwsSolutions-S1",
            "This is the access-log bucket; logging it into itself would loop.",
        )
        ack(
            self.populator_role,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSSMManagedInstanceCore]",
            "AWS's maintained policy for the SSM agent; Run Command is how the controller starts agents.",
        )
        ack(
            self.controller_policy,
            "AwsSolutions-IAM5[Resource::*]",
            "Describe/List calls (EC2, Auto Scaling, SSM command status) and ssm:CancelCommand have no "
            "resource-level permissions; every mutating EC2 call is scoped by cachewarm tags.",
        )
        ack(
            self.controller_policy,
            f"AwsSolutions-IAM5[Resource::{ec2_any}:volume/*]",
            "Volumes are created by the warm, so their ids are unknown; create/attach/delete require the "
            f"{TAG_MANAGED}=true request or resource tag.",
        )
        ack(
            self.controller_policy,
            f"AwsSolutions-IAM5[Resource::{ec2_any}:instance/*]",
            "Source nodes are the platform's instances and populators are created per warm; launch and "
            f"terminate require the {TAG_MANAGED}=true tag, attach/detach require our tagged volume.",
        )
        for kind in ("subnet", "network-interface", "security-group"):
            ack(
                self.controller_policy,
                f"AwsSolutions-IAM5[Resource::{ec2_any}:{kind}/*]",
                "RunInstances names these resources; the instance itself must carry the cachewarm tag and "
                "come from this stack's launch template.",
            )
        ack(
            self.controller_policy,
            "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>::image/*]",
            "The AMI comes from the launch template (an SSM parameter); AMI ids change on every release.",
        )
        ack(
            self.controller_policy,
            f"AwsSolutions-IAM5[Resource::<{self._logical(self.status_bucket)}.Arn>/{self.props.status_prefix}/*]",
            "Status objects are named per warm and node under the status prefix.",
        )
        ack(
            self.agent_policy,
            f"AwsSolutions-IAM5[Resource::<{self._logical(self.status_bucket)}.Arn>/{self.props.status_prefix}/*]",
            "Each agent writes its own status object under the status prefix; names are per warm and node.",
        )
        xray = (
            "X-Ray PutTraceSegments/PutTelemetryRecords and the log delivery APIs do not support "
            "resource scoping."
        )
        ack(self.controller_role, "AwsSolutions-IAM5[Resource::*]", xray)
        for machine in (self.state_machine, self.teardown_machine):
            ack(machine.role, "AwsSolutions-IAM5[Resource::*]", xray)
        for fn in self.functions.values():
            ack(
                fn,
                "AwsSolutions-L1",
                "Python 3.12 matches the pinned public Powertools layer (python312) the handlers are "
                "tested with.",
            )
        ack(
            self.trigger_dlq,
            "AwsSolutions-SQS3",
            "This queue is the dead-letter queue of the EventBridge targets.",
        )

    def _logical(self, bucket: s3.Bucket) -> str:
        return Stack.of(self).get_logical_id(bucket.node.default_child)  # type: ignore[arg-type]


INSTALL_DIR = "/opt/cachewarm"


def install_agent_commands(agent_bundle_url: str, dumper_tarball_url: str | None = None) -> list[str]:
    """Shell lines that install the agent (and optionally the dumper) from the deployed artifacts.

    Amazon Linux 2023: Python 3.11 and xfsprogs from the distribution's repositories; the agent's
    dependencies come from the bundle (`DIST_WHEELHOUSE=1 make dist`) or else from PyPI.
    """
    d = INSTALL_DIR
    lines = [
        "set -euo pipefail",
        "exec >>/var/log/cachewarm-install.log 2>&1",
        "dnf install -y -q python3.11 python3.11-pip xfsprogs",
        f"mkdir -p {d}/bin {d}/wheels",
        f"aws s3 cp --only-show-errors '{agent_bundle_url}' {d}/cachewarm-agent.tar.gz",
        f"tar -xzf {d}/cachewarm-agent.tar.gz -C {d}/wheels",
        f"[ -x {d}/venv/bin/python ] || python3.11 -m venv {d}/venv",
        f"{d}/venv/bin/pip install --quiet --upgrade --find-links {d}/wheels cachewarm",
        f"ln -sf {d}/venv/bin/cachewarm /usr/local/bin/cachewarm",
    ]
    if dumper_tarball_url:
        lines += [
            f"aws s3 cp --only-show-errors '{dumper_tarball_url}' {d}/cachewarm-dump.tar.gz",
            f"tar -xzf {d}/cachewarm-dump.tar.gz -C {d}/bin",
        ]
    return [*lines, f"touch {d}/.installed"]


def asg_launch_pattern(group_names: Sequence[str]) -> events.EventPattern:
    """EventBridge pattern for successful launches of the named Auto Scaling groups.

    EventBridge cannot filter on an Auto Scaling group's tags, so the replica's groups are named
    (e.g. all groups tagged `cachewarm:replica`, listed at deploy time).
    """
    return events.EventPattern(
        source=["aws.autoscaling"],
        detail_type=["EC2 Instance Launch Successful"],
        detail={"AutoScalingGroupName": list(group_names)},
    )


def _object_arn(bucket: str, key: str) -> str:
    return f"arn:{Aws.PARTITION}:s3:::{bucket}/{key}"


def _read_asl(path: Path) -> str:
    """The ASL file's text, after checking it parses and uses only integrations we grant."""
    doc = load_asl(path)
    unsupported = unsupported_integrations(doc)
    if unsupported:
        raise ValueError(
            f"{path}: service integrations {unsupported} need IAM grants the CacheWarmer "
            "construct does not make; add them to infra/cachewarm_infra/construct.py"
        )
    return path.read_text(encoding="utf-8")


def _check_teardown_grace(path: Path, text: str, lambda_timeout: Duration) -> None:
    """The teardown machine first waits out any Lambda the stopped execution still runs (a stop does
    not stop an invoked Lambda, which could create resources after the first pass found none): that
    wait must outlast the controller Lambdas' timeout."""
    doc = json.loads(text)
    first = doc["States"][doc["StartAt"]]
    waits = first.get("Seconds") if first.get("Type") == "Wait" else None
    if not isinstance(waits, int) or waits <= lambda_timeout.to_seconds():
        raise ValueError(
            f"{path}: the first state must be a Wait longer than the Lambda timeout "
            f"({lambda_timeout.to_seconds()} s) so in-flight steps of a stopped warm finish first; "
            f"found {doc['StartAt']} with Seconds={waits}"
        )


def _pascal(stem: str) -> str:
    return "".join(part.capitalize() for part in stem.replace("_", "-").split("-"))


def _env_name(stem: str) -> str:
    name = stem.upper().replace("-", "_")
    return name.removesuffix("_AGENT")
