"""`CacheWarmer`: everything one AWS account needs to run cachewarm, as one reusable construct.

What it creates (see docs/architecture.md), each part built by its own module:
- storage.py: the KMS key, the encrypted status bucket the agents write heartbeats to, its access logs;
- compute.py: the dumper tarball, the agent bundle and the install script as S3 assets (versioned
  with the stack, checksums and version read at synth), the SSM documents the controller runs on
  source nodes and populators, the populator launch template with its instance profile and security
  group;
- iam.py: the agents' managed policy and the controller's tag-scoped role;
- orchestration.py: one Lambda per `${<Name>FunctionArn}` (code: lambda_code.py), the warm and teardown
  state machines from their ASL files, the EventBridge rules that start them;
- observability.py: the agents' command-output log group, alarms and a dashboard;
- nag.py: the accepted cdk-nag findings.

This class checks the inputs, calls the builders in order and keeps what they made as its attributes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jsii
from aws_cdk import Aws, Fn, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct, IValidation

from cachewarm_infra import orchestration
from cachewarm_infra.asl import AslTask, check_teardown_grace, discover_function_substitutions, read_asl
from cachewarm_infra.compute import DOCUMENT_VERSION, build_artifacts, build_documents, build_populator
from cachewarm_infra.contract.replicas import parse_pairs
from cachewarm_infra.iam import allow_describe_executions, build_agent_policy, build_controller_role
from cachewarm_infra.iam_remote import RemoteRegion, check_destination_regions, remote_statements
from cachewarm_infra.nag import acknowledge_nag_findings, acknowledge_region_findings
from cachewarm_infra.observability import (
    build_agent_log_group,
    build_alarm_topic,
    build_alarms,
    build_dashboard,
    warm_metric,
)
from cachewarm_infra.props import CacheWarmerProps
from cachewarm_infra.storage import admit_services_to_key, build_storage

if TYPE_CHECKING:
    from cachewarm_infra.region import CacheWarmerRegion

__all__ = ["CacheWarmer", "CacheWarmerProps"]


class CacheWarmer(Construct):
    """The deployable cachewarm control plane (state machine, Lambdas, agents' infrastructure).

    Every resource is a direct child of this construct (the builders take it as their scope), so the
    logical ids do not depend on which module builds what.
    """

    def __init__(self, scope: Construct, construct_id: str, props: CacheWarmerProps) -> None:
        super().__init__(scope, construct_id)
        # S3 server access logs delivered by bucket policy, not the legacy LogDeliveryWrite ACL (set
        # on this subtree before any child exists, whatever the app's own flags).
        self.node.set_context("@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy", True)
        self.props = props
        asl_text = read_asl(props.asl_path)
        if not discover_function_substitutions(asl_text):
            raise ValueError(f"{props.asl_path}: no ${{<Name>FunctionArn}} placeholders found")
        teardown_path = props.teardown_asl_path or props.asl_path.with_name("teardown.asl.json")
        teardown_text = read_asl(teardown_path)
        check_teardown_grace(teardown_path, teardown_text, props.lambda_timeout.to_seconds())
        # One Function per `${<Name>FunctionArn}` in either ASL (the teardown machine reuses the
        # warm machine's Teardown function).
        self.tasks: list[AslTask] = discover_function_substitutions(asl_text + teardown_text)
        _check_paths(props)
        _check_groups(props)

        storage = build_storage(self, props.kms_key)
        self.key = storage.key
        self.access_logs, self.status_bucket = storage.access_logs, storage.status_bucket
        # cachewarm:stack: on everything this stack's controller creates, and in its IAM conditions.
        self.stack_tag = f"{Aws.STACK_NAME}-{self.node.addr[:10]}"
        # The S3 transport's buckets (one per warm execution) are named <prefix><warm id>-<hash>;
        # 8 characters at most (S3's 63 with a 48-character warm id), this construct's own.
        self.transport_bucket_prefix = f"cw{self.node.addr[2:7]}-"
        self.artifacts = artifacts = build_artifacts(self, props.dumper_tarball, props.agent_bundle)
        self.dumper_asset, self.agent_asset = artifacts.dumper, artifacts.agent
        self.documents = build_documents(
            self, props.ssm_documents_dir, artifacts, transport_bucket_prefix=self.transport_bucket_prefix
        )
        # Plain names (not references): a destination region's stack names its copies the same.
        self.document_names = {stem: str(doc.name) for stem, doc in self.documents.items()}
        # Every SSM command's output (SendCommand's CloudWatchOutputConfig): the instances write it.
        # The key admits CloudWatch Logs (and EventBridge, CloudWatch) before anything uses it.
        admit_services_to_key(self.key)
        self.agent_logs = build_agent_log_group(self, props, self.key)
        self.agent_policy = build_agent_policy(
            self, artifacts, storage, props.status_prefix, self.agent_logs, self.transport_bucket_prefix
        )
        self._populator = populator = build_populator(
            self, props, agent_policy=self.agent_policy, key=self.key, artifacts=artifacts
        )
        self.populator_role, self.populator_sg = populator.role, populator.security_group
        self.launch_template = populator.launch_template
        controller = build_controller_role(
            self,
            storage=storage,
            populator=populator,
            documents=self.documents,
            status_prefix=props.status_prefix,
            stack_tag=self.stack_tag,
            transport_bucket_prefix=self.transport_bucket_prefix,
            destination_regions=check_destination_regions(self, props.destination_regions),
        )
        self.controller_role, self.controller_policy = controller.role, controller.policy

        self._wiring = orchestration.Wiring(
            status_bucket=self.status_bucket.bucket_name,
            status_prefix=props.status_prefix,
            key_arn=self.key.key_arn,
            launch_template_id=self.launch_template_id,
            document_names={stem: doc.ref for stem, doc in self.documents.items()},
            subnet_ids=props.subnet_ids,
            agent_log_group=self.agent_logs.log_group_name,
            vpc_id=props.vpc.vpc_id,
            stack_tag=self.stack_tag,
            transport_bucket_prefix=self.transport_bucket_prefix,
            populator_role_arn=populator.role.role_arn,
            controller_role_arn=self.controller_role.role_arn,
            destination_regions=tuple(props.destination_regions),
            document_version=DOCUMENT_VERSION,
            replica_pairs=parse_pairs(props.replica_pairs),
            memcached_security_group_ids=self._replica_security_group_ids(),
        )
        self.functions = orchestration.build_functions(
            self, props, self.tasks, self.controller_role, self.lambda_environment(), self.key
        )

        def machine(machine_id: str, asl: str, **more: str) -> sfn.StateMachine:
            return orchestration.build_state_machine(
                self,
                machine_id,
                asl,
                props=props,
                wiring=self._wiring,
                substitutions={**self.definition_substitutions(), **more},
                functions=self.functions,
                key=self.key,
            )

        self.state_machine = machine("StateMachine", asl_text)
        # The teardown machine serves this warm machine only: its definition names it, and the
        # Teardown Lambda refuses an execution of any other (or one still running).
        self.teardown_machine = machine(
            "TeardownStateMachine", teardown_text, WarmStateMachineArn=self.state_machine.state_machine_arn
        )
        self.describe_warms_policy = allow_describe_executions(self, self.controller_role, self.state_machine)
        triggers = orchestration.build_triggers(
            self,
            props,
            key=self.key,
            state_machine=self.state_machine,
            teardown_machine=self.teardown_machine,
            launch_template_id=self.launch_template_id,
        )
        self.trigger_dlq = triggers.dead_letters
        self.event_bus = triggers.bus
        self.replica_rules, self.asg_rule = triggers.replica_rules, triggers.asg_rule
        self.teardown_rule = triggers.teardown_rule

        self.alarm_topic = props.alarm_topic or build_alarm_topic(self, self.key)
        self.alarms = build_alarms(
            self, self.state_machine, self.teardown_machine, self.alarm_topic, self.trigger_dlq
        )
        self.dashboard = build_dashboard(
            self, self.state_machine, self.functions, self.alarms, self.agent_logs
        )
        self.nag_acknowledgements = acknowledge_nag_findings(self)
        # Each destination region's resources (region.py), as they are added.
        self.destination_region_resources: dict[str, CacheWarmerRegion] = {}
        self.node.add_validation(_EveryDestinationRegionDeployed(self))

    def add_destination_region(self, region: CacheWarmerRegion) -> None:
        """Wire a destination region's resources in: the controller's rights there (its template, VPC,
        security group, documents, role and key — nothing else of the region) and its settings (the
        Lambdas' DESTINATION_REGION_SETTINGS); the agent policy on its populator role. Called by
        `CacheWarmerRegion` itself."""
        if region.region in self.destination_region_resources:
            raise ValueError(f"destination region {region.region} added twice")
        self.destination_region_resources[region.region] = region
        self.controller_policy.add_statements(
            *remote_statements(
                RemoteRegion(
                    region=region.region,
                    vpc_id=region.vpc_id,
                    launch_template_id=region.launch_template_id,
                    security_group_id=region.security_group.security_group_id,
                    populator_role_arn=region.role_arn,
                    key_arn=region.key_arn,
                    documents=sorted(region.document_names.values()),
                ),
                self.stack_tag,
            )
        )
        self.agent_policy.attach_to_role(
            iam.Role.from_role_name(self, f"PopulatorRole{_pascal_region(region.region)}", region.role_name)
        )
        self.nag_acknowledgements += acknowledge_region_findings(self, region)
        settings = {
            name: {
                "vpc_id": r.vpc_id,
                "launch_template_id": r.launch_template_id,
                "agent_log_group": r.log_group_name,
                "documents": r.document_names,
            }
            for name, r in sorted(self.destination_region_resources.items())
        }
        roles = [
            self.populator_role.role_arn,
            *(r.role_arn for _, r in sorted(self.destination_region_resources.items())),
        ]
        groups = self._replica_security_group_ids()
        for fn in self.functions.values():
            fn.add_environment("DESTINATION_REGION_SETTINGS", Stack.of(self).to_json_string(settings))
            fn.add_environment("POPULATOR_ROLE_ARNS", Fn.join(",", roles))
            fn.add_environment("MEMCACHED_SECURITY_GROUP_IDS", Fn.join(",", groups))

    def _replica_security_group_ids(self) -> list[str]:
        """The replicas' groups (destinations and sources here, destinations in each destination
        region): a node found by its replica tag counts only when it is in one of them."""
        props = self.props
        groups = [
            g.security_group_id for g in (*props.destination_security_groups, *props.source_security_groups)
        ]
        for _, region in sorted(getattr(self, "destination_region_resources", {}).items()):
            groups += region.replica_security_group_ids
        return groups

    @property
    def launch_template_id(self) -> str:
        return self._populator.launch_template_id

    def document_name(self, stem: str) -> str:
        return self.documents[stem].ref

    def lambda_environment(self) -> dict[str, str]:
        return orchestration.lambda_environment(self._wiring)

    def definition_substitutions(self) -> dict[str, str]:
        return orchestration.definition_substitutions(self._wiring, self.tasks, self.functions)

    def replica_event_input(self) -> events.RuleTargetInput:
        """State machine input from a "Replica Deployed" event (the schema is in docs/architecture.md)."""
        return orchestration.replica_event_input(self.launch_template_id)

    def warm_metric(
        self, name: str, step: str, statistic: str = "Sum", warm_id: str | None = None
    ) -> cw.Metric:
        """A controller metric: all warms together, or one warm's series with `warm_id`."""
        return warm_metric(name, step, statistic, warm_id)


def _pascal_region(region: str) -> str:
    return "".join(p.capitalize() for p in region.split("-"))


def _check_groups(props: CacheWarmerProps) -> None:
    for groups, what, key in (
        (props.destination_security_groups, "destination", "destinationSecurityGroupIds"),
        (props.source_security_groups, "source", "sourceSecurityGroupIds"),
    ):
        if not groups:
            raise ValueError(
                f"{what}_security_groups: name the {what} replicas' security groups (context {key}); "
                "populators may open memcached connections only to the groups named at deploy"
            )


@jsii.implements(IValidation)
class _EveryDestinationRegionDeployed:
    """Synth fails for a destination region without its resources (a `CacheWarmerRegion`)."""

    def __init__(self, warmer: CacheWarmer) -> None:
        self.warmer = warmer

    def validate(self) -> list[str]:
        missing = [
            r
            for r in self.warmer.props.destination_regions
            if r not in self.warmer.destination_region_resources
        ]
        return [
            f"destination region {r}: no CacheWarmerRegion deploys its launch template, documents, log "
            "group and security group (CacheWarmStack makes one per destinationRegions entry)"
            for r in missing
        ]


def _check_paths(props: CacheWarmerProps) -> None:
    for path, what in (
        (props.lambdas_dir, "Lambda code directory"),
        (props.ssm_documents_dir, "SSM documents directory"),
    ):
        if not path.is_dir():
            raise FileNotFoundError(f"{what} not found: {path}")
    for path, what in ((props.dumper_tarball, "dumper tarball"), (props.agent_bundle, "agent bundle")):
        if not path.is_file():
            raise FileNotFoundError(f"{what} not found: {path} (build it with `make dist`)")
