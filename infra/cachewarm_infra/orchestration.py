"""Orchestration: the controller Lambdas (one per `${<Name>FunctionArn}`), the warm and teardown
state machines built from their ASL files, and the EventBridge rules that start them (with their DLQ)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aws_cdk import Aws, Duration, Fn, RemovalPolicy, Tags
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_ssm as ssm
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from cachewarm_infra.asl import AslTask, discover_function_substitutions, placeholders
from cachewarm_infra.contract import tags
from cachewarm_infra.contract.replicas import Pair, Side, format_pairs, parse_pairs
from cachewarm_infra.lambda_code import lambda_code
from cachewarm_infra.props import CacheWarmerProps

# Pinned with aws-lambda-powertools in pyproject.toml (a test keeps the two equal). AWS publishes the
# public layer ARN of every release as an SSM parameter, so one name works in every region.
POWERTOOLS_VERSION = "3.37.0"
POWERTOOLS_LAYER_PARAMETER = f"/aws/service/powertools/python/x86_64/python3.12/{POWERTOOLS_VERSION}"

# The "replica deployed" event (schema in README.md and docs/architecture.md).
REPLICA_EVENT_SOURCE = "cachewarm"
REPLICA_EVENT_DETAIL_TYPE = "Replica Deployed"

# The execution statuses after which the teardown machine runs (every way an execution ends but success).
STOPPED_STATUSES = ("ABORTED", "TIMED_OUT", "FAILED")

# The documents every controller knows by a variable of its own; any other gets `<STEM>_DOCUMENT_NAME`.
DUMP_DOCUMENT, POPULATE_DOCUMENT = "dump-agent", "populate-agent"


@dataclass(frozen=True)
class Wiring:
    """What the controller is told about the rest of the stack (Lambda environment, ASL substitutions)."""

    status_bucket: str
    status_prefix: str
    key_arn: str
    launch_template_id: str
    document_names: Mapping[str, str]  # SSM document stem -> deployed name
    subnet_ids: Sequence[str] = ()
    agent_log_group: str | None = None
    # The stack's VPC: the controller finds sources and destinations only there.
    vpc_id: str | None = None
    # The cachewarm:stack tag value of what this stack's controller creates.
    stack_tag: str | None = None
    # The S3 transport: its buckets' name prefix (the IAM of both sides is scoped to it) and the
    # populators' role (each bucket's policy lets it only read).
    transport_bucket_prefix: str | None = None
    populator_role_arn: str | None = None
    # The controller Lambdas' own role: each transport bucket's policy lets it (and the warm's
    # instances) alone reach the objects; its account is the owner every S3 call names.
    controller_role_arn: str | None = None
    # A cross-region S3 warm's possible populator regions (the stack's destinationRegions).
    destination_regions: Sequence[str] = ()
    # The version of every document SendCommand runs (compute.DOCUMENT_VERSION): pinned, never $DEFAULT.
    document_version: str | None = None
    # Which replicas may be warmed from which (the stack's replicaPairs), and the replicas' security
    # groups: a node found by its replica tag counts only in one of them.
    replica_pairs: Sequence[Pair] = ()
    memcached_security_group_ids: Sequence[str] = ()


def lambda_environment(w: Wiring) -> dict[str, str]:
    env = {
        "STATUS_BUCKET": w.status_bucket,
        "STATUS_PREFIX": w.status_prefix,
        "DUMP_DOCUMENT_NAME": w.document_names[DUMP_DOCUMENT],
        "POPULATE_DOCUMENT_NAME": w.document_names[POPULATE_DOCUMENT],
        "KMS_KEY_ID": w.key_arn,
        "POPULATOR_LAUNCH_TEMPLATE_ID": w.launch_template_id,
        "POWERTOOLS_SERVICE_NAME": "cachewarm",
        "POWERTOOLS_METRICS_NAMESPACE": "CacheWarm",
    }
    if w.subnet_ids:
        env["POPULATOR_SUBNET_IDS"] = Fn.join(",", list(w.subnet_ids))
    if w.agent_log_group:
        env["AGENT_LOG_GROUP"] = w.agent_log_group
    if w.vpc_id:
        env["VPC_ID"] = w.vpc_id
    if w.stack_tag:
        env["STACK_TAG"] = w.stack_tag
    if w.transport_bucket_prefix:
        env["TRANSPORT_BUCKET_PREFIX"] = w.transport_bucket_prefix
    if w.populator_role_arn:
        env["POPULATOR_ROLE_ARNS"] = w.populator_role_arn
    if w.controller_role_arn:
        env["CONTROLLER_ROLE_ARN"] = w.controller_role_arn
    if w.destination_regions:
        env["DESTINATION_REGIONS"] = ",".join(w.destination_regions)
    if w.document_version:
        env["DOCUMENT_VERSION"] = w.document_version
    if w.replica_pairs:
        env["REPLICA_PAIRS"] = format_pairs(w.replica_pairs)
    if w.memcached_security_group_ids:
        env["MEMCACHED_SECURITY_GROUP_IDS"] = Fn.join(",", list(w.memcached_security_group_ids))
    for stem, name in w.document_names.items():
        if stem not in (DUMP_DOCUMENT, POPULATE_DOCUMENT):
            env[f"{_env_name(stem)}_DOCUMENT_NAME"] = name
    return env


def definition_substitutions(
    w: Wiring, tasks: Sequence[AslTask], functions: Mapping[str, lambda_.IFunction]
) -> dict[str, str]:
    subs = {t.placeholder: functions[t.pascal].function_arn for t in tasks}
    subs["StatusBucket"] = w.status_bucket
    subs["StatusPrefix"] = w.status_prefix
    subs["DumpDocumentName"] = w.document_names[DUMP_DOCUMENT]
    subs["PopulateDocumentName"] = w.document_names[POPULATE_DOCUMENT]
    subs["PopulatorLaunchTemplateId"] = w.launch_template_id
    return subs


def build_functions(
    scope: Construct,
    props: CacheWarmerProps,
    tasks: Sequence[AslTask],
    role: iam.IRole,
    environment: Mapping[str, str],
    key: kms.IKey | None = None,
) -> dict[str, lambda_.Function]:
    """One Function per task, all with the same code asset, role, layer and environment; their log
    groups encrypted with `key`."""
    code = lambda_code(scope, props.lambdas_dir)
    arn = props.powertools_layer_arn or ssm.StringParameter.value_for_string_parameter(
        scope, POWERTOOLS_LAYER_PARAMETER
    )
    layer = lambda_.LayerVersion.from_layer_version_arn(scope, "PowertoolsLayer", arn)
    env = dict(environment)
    if not props.tracing:
        # Powertools' Tracer would still try to send segments: off with X-Ray off.
        env["POWERTOOLS_TRACE_DISABLED"] = "true"
    functions: dict[str, lambda_.Function] = {}
    for task in tasks:
        log_group = _log_group(scope, f"{task.pascal}Logs", props, key)
        functions[task.pascal] = lambda_.Function(
            scope,
            f"{task.pascal}Function",
            description=f"cachewarm controller: {task.pascal}",
            runtime=lambda_.Runtime.PYTHON_3_12,
            architecture=lambda_.Architecture.X86_64,
            handler=task.handler,
            code=code,
            layers=[layer],
            role=role,
            timeout=props.lambda_timeout,
            memory_size=props.lambda_memory_mb,
            environment=dict(env),
            tracing=lambda_.Tracing.ACTIVE if props.tracing else lambda_.Tracing.DISABLED,
            log_group=log_group,
        )
        # The role is ours (not Lambda's default), so nothing grants it its log group: without this
        # the functions write no logs and no EMF metrics, and the alarms on them never fire.
        log_group.grant_write(role)
    return functions


def build_state_machine(
    scope: Construct,
    construct_id: str,
    asl_text: str,
    *,
    props: CacheWarmerProps,
    wiring: Wiring,
    substitutions: Mapping[str, str],
    functions: Mapping[str, lambda_.IFunction],
    key: kms.IKey | None = None,
) -> sfn.StateMachine:
    """A state machine from an ASL file: the substitutions its text uses, logs, tracing, and
    invoke rights on exactly the functions it names."""
    used = placeholders(asl_text)
    subs = {k: v for k, v in substitutions.items() if k in used}
    missing = sorted(used - subs.keys())
    if missing:
        raise ValueError(
            f"{construct_id}: the ASL uses substitutions the construct does not provide: {missing}"
        )
    # Execution data (inputs, outputs) is logged: encrypted with the stack's key.
    log_group = _log_group(scope, f"{construct_id}Logs", props, key)
    machine = sfn.StateMachine(
        scope,
        construct_id,
        definition_body=sfn.DefinitionBody.from_string(asl_text),
        definition_substitutions=subs,
        state_machine_type=sfn.StateMachineType.STANDARD,
        tracing_enabled=props.tracing,
        logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ALL, include_execution_data=True),
    )
    names = {t.pascal for t in discover_function_substitutions(asl_text)}
    machine.add_to_role_policy(
        iam.PolicyStatement(
            sid="InvokeControllerFunctions",
            actions=["lambda:InvokeFunction"],
            resources=[fn.function_arn for name, fn in sorted(functions.items()) if name in names],
        )
    )
    # The operator CLI finds the status objects from these tags.
    Tags.of(machine).add(tags.STATUS_BUCKET, wiring.status_bucket)
    Tags.of(machine).add(tags.STATUS_PREFIX, wiring.status_prefix)
    return machine


def _log_group(
    scope: Construct, construct_id: str, props: CacheWarmerProps, key: kms.IKey | None = None
) -> logs.LogGroup:
    return logs.LogGroup(
        scope,
        construct_id,
        retention=props.log_retention,
        removal_policy=RemovalPolicy.DESTROY,
        encryption_key=key,
    )


# ---- triggers -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Triggers:
    """The rules that start the machines, and the dead-letter queue of all their targets."""

    dead_letters: sqs.Queue
    bus: events.EventBus
    # One per replica pair of the configuration (none: no "Replica Deployed" event starts anything).
    replica_rules: list[events.Rule]
    asg_rule: events.Rule | None
    teardown_rule: events.Rule


def replica_event_input(launch_template_id: str) -> events.RuleTargetInput:
    """State machine input from a "Replica Deployed" event (the schema is in docs/architecture.md).
    The event names replicas only: the controller finds their nodes from their tags, so no address
    given in an event ever reaches a populator."""
    return events.RuleTargetInput.from_object(
        {
            "warm_id": events.EventField.from_path("$.detail.warm_id"),
            "source": {"replica": events.EventField.from_path("$.detail.source.replica")},
            "destination": {"replica": events.EventField.from_path("$.detail.destination.replica")},
            "populator": {"launch_template_id": launch_template_id},
        }
    )


def build_event_bus(scope: Construct, warm_starters: Sequence[str]) -> events.EventBus:
    """The bus the "Replica Deployed" events go to, of this stack alone. Its policy refuses
    PutEvents from any principal of another account and, when `warm_starters` (IAM principal ARNs,
    wildcards allowed) are given, from anyone but them. It allows nothing: a principal of this account
    needs `events:PutEvents` on this bus in its own policy. No statement names a principal ARN (a
    wildcard is allowed in the condition, never in a principal): both deny `"Principal": "*"`."""
    bus = events.EventBus(scope, "WarmEventBus", description="cachewarm: Replica Deployed events start warms")
    outsiders = {"StringNotEquals": {"aws:PrincipalAccount": Aws.ACCOUNT_ID}}
    bus.add_to_resource_policy(
        iam.PolicyStatement(
            sid="OnlyThisAccount",
            effect=iam.Effect.DENY,
            principals=[iam.StarPrincipal()],
            actions=["events:PutEvents"],
            resources=[bus.event_bus_arn],
            conditions=outsiders,
        )
    )
    if warm_starters:
        bus.add_to_resource_policy(
            iam.PolicyStatement(
                sid="OnlyTheNamedStarters",
                effect=iam.Effect.DENY,
                principals=[iam.StarPrincipal()],
                actions=["events:PutEvents"],
                resources=[bus.event_bus_arn],
                conditions={"ArnNotLike": {"aws:PrincipalArn": list(warm_starters)}},
            )
        )
    return bus


def build_triggers(
    scope: Construct,
    props: CacheWarmerProps,
    *,
    key: kms.IKey,
    state_machine: sfn.StateMachine,
    teardown_machine: sfn.StateMachine,
    launch_template_id: str,
) -> Triggers:
    dlq = sqs.Queue(
        scope,
        "TriggerDeadLetters",
        encryption=sqs.QueueEncryption.KMS,
        encryption_master_key=key,
        enforce_ssl=True,
        retention_period=Duration.days(14),
    )

    def target(
        machine: sfn.StateMachine, rule_input: events.RuleTargetInput | None
    ) -> targets.SfnStateMachine:
        return targets.SfnStateMachine(
            machine,
            input=rule_input,
            dead_letter_queue=dlq,
            retry_attempts=4,
            max_event_age=Duration.hours(2),
        )

    bus = build_event_bus(scope, props.warm_starters)
    pairs = parse_pairs(props.replica_pairs)
    replica_rules = []
    for pair in pairs:
        if pair.source.kind != "replica" or pair.destination.kind != "replica":
            continue  # the event names replicas; an Auto Scaling destination starts from its launches
        rule = events.Rule(
            scope,
            f"ReplicaDeployedRule{_digest(str(pair))}",
            description=f"Start a cachewarm execution when replica {pair.destination} is deployed "
            f"(warmed from {pair.source})",
            event_bus=bus,
            event_pattern=replica_event_pattern(pair),
        )
        rule.add_target(target(state_machine, replica_event_input(launch_template_id)))
        replica_rules.append(rule)
    asg_rule = None
    groups = asg_trigger_groups(props.asg_group_names, pairs)
    if groups:
        # One launch event per new instance. The input names no warm id: ValidateInput derives one
        # from the group's name and deployment (its cachewarm:deployment tag, else its creation
        # time), so every launch of one deployment names the same warm and the claim keeps one
        # execution; the others end as duplicates (docs/architecture.md). Its source is the one the
        # configuration pairs with asg:<group>.
        asg_rule = events.Rule(
            scope,
            "AsgLaunchRule",
            description="Start a cachewarm execution when a paired replica Auto Scaling group launches",
            event_pattern=asg_launch_pattern(groups),
        )
        asg_input = events.RuleTargetInput.from_object(
            {
                "destination": {"asg_name": events.EventField.from_path("$.detail.AutoScalingGroupName")},
                "populator": {"launch_template_id": launch_template_id},
            }
        )
        asg_rule.add_target(target(state_machine, asg_input))
    # A stopped (ABORTED) or timed-out (TIMED_OUT) warm execution runs no Catch, and a FAILED one may
    # have failed outside any (States.Runtime, the history or payload limits): this rule hands the
    # whole status-change event (detail.executionArn, detail.input) to the teardown machine, which
    # removes what that execution created — nothing, for one that already tore itself down.
    teardown = events.Rule(
        scope,
        "StoppedWarmRule",
        description="Tear down what a stopped, timed-out or failed cachewarm execution left behind",
        event_pattern=events.EventPattern(
            source=["aws.states"],
            detail_type=["Step Functions Execution Status Change"],
            account=[Aws.ACCOUNT_ID],
            detail={
                "status": list(STOPPED_STATUSES),
                "stateMachineArn": [state_machine.state_machine_arn],
            },
        ),
    )
    teardown.add_target(target(teardown_machine, None))
    return Triggers(
        dead_letters=dlq, bus=bus, replica_rules=replica_rules, asg_rule=asg_rule, teardown_rule=teardown
    )


def replica_event_pattern(pair: Pair) -> events.EventPattern:
    """The "Replica Deployed" events of exactly this pair: any other pairing matches no rule, so it
    starts no execution (least privilege at the bus; ValidateInput checks the pair again)."""
    return events.EventPattern(
        source=[REPLICA_EVENT_SOURCE],
        detail_type=[REPLICA_EVENT_DETAIL_TYPE],
        account=[Aws.ACCOUNT_ID],
        # Every path the input transformer reads must exist (a missing one would become null).
        detail={
            "warm_id": [{"exists": True}],
            "source": {"replica": [pair.source.name]},
            "destination": {"replica": [pair.destination.name]},
        },
    )


def asg_trigger_groups(group_names: Sequence[str], pairs: Sequence[Pair]) -> list[str]:
    """The Auto Scaling groups whose launches start a warm: each must be a destination asg:<group> of
    the configuration (else its launches would start a warm with no source to read)."""
    paired = {p.destination.name for p in pairs if p.destination.kind == "asg"}
    unpaired = [g for g in group_names if g not in paired]
    if unpaired:
        raise ValueError(
            f"asgNames {', '.join(unpaired)}: no replicaPairs entry SOURCE->{Side('asg', unpaired[0])} "
            "names a source for its launches"
        )
    return list(group_names)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8].upper()


def asg_launch_pattern(group_names: Sequence[str]) -> events.EventPattern:
    """EventBridge pattern for successful launches of the named Auto Scaling groups.

    EventBridge cannot filter on an Auto Scaling group's tags, so the replica's groups are named
    (e.g. all groups tagged `cachewarm:replica`, listed at deploy time).
    """
    return events.EventPattern(
        source=["aws.autoscaling"],
        detail_type=["EC2 Instance Launch Successful"],
        account=[Aws.ACCOUNT_ID],
        detail={"AutoScalingGroupName": list(group_names)},
    )


def _env_name(stem: str) -> str:
    name = stem.upper().replace("-", "_")
    return name.removesuffix("_AGENT")
