"""Lambda handlers: thin Powertools adapters over the steps (`cachewarm_controller.steps.*`).

The handler for `${<PascalName>FunctionArn}` in the ASL is `cachewarm_controller.handlers.<snake_name>`.
Each one: Parser (the event as its model in `events.py`), Logger (the warm id as correlation id),
Tracer (X-Ray, when the function's tracing is on: the construct sets POWERTOOLS_TRACE_DISABLED
otherwise), Metrics (EMF, namespace CacheWarm; see `_bind_warm` for the dimensions).
Clients are created on first use (never at import), through `get_deps`, which tests replace.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable
from typing import Any, TypeVar

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError
from cachewarm.contract.replicas import Pair, parse_pairs
from pydantic import BaseModel

from cachewarm_controller import transport
from cachewarm_controller.agents import SsmAgentRunner
from cachewarm_controller.attach import Ec2VolumeAttacher
from cachewarm_controller.awsutil import RETRY_CONFIG, is_throttling
from cachewarm_controller.budget import Deadline
from cachewarm_controller.errors import TransientError
from cachewarm_controller.events import StepEvent, TeardownEvent, ValidateInputEvent, parse_event
from cachewarm_controller.regions import RegionClients
from cachewarm_controller.steps import agent_commands, planning, progress, resources, verification
from cachewarm_controller.steps import teardown as teardown_steps
from cachewarm_controller.steps.common import Deps, Documents, RemoteRegion, Settings, Warm
from cachewarm_controller.store import S3Store

# Service/namespace come from the Lambda environment (the CDK stack sets them); the defaults keep
# the contract's names when the module is imported elsewhere (tests, tools).
SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME") or "cachewarm"
logger = Logger(service=SERVICE)
metrics = Metrics(service=SERVICE, namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "CacheWarm")
# Patches boto3 (every AWS call a subsegment) when tracing is on; a no-op outside Lambda.
tracer = Tracer(service=SERVICE)
# The per-warm EMF dimension (beside the aggregate `service` + `Step` the alarms watch).
WARM_ID_DIMENSION = "WarmId"

Handler = Callable[[dict[str, Any], LambdaContext], dict[str, Any]]
E = TypeVar("E", bound=BaseModel)
# The stack sets every one (tests/infra checks): the SSM documents' names are CloudFormation's.
REQUIRED_ENV = (
    "STATUS_BUCKET",
    "DUMP_DOCUMENT_NAME",
    "POPULATE_DOCUMENT_NAME",
    "VERIFY_DOCUMENT_NAME",
    "INSTALL_DOCUMENT_NAME",
    "UNMOUNT_DOCUMENT_NAME",
    "MEMCACHED_STATS_DOCUMENT_NAME",
    "VPC_ID",
    "STACK_TAG",
    "POPULATOR_LAUNCH_TEMPLATE_ID",
    "DOCUMENT_VERSION",
)
# A document's stem in the stack (DESTINATION_REGION_SETTINGS names them so) -> its Documents field.
DOCUMENT_STEMS = {
    "dump-agent": "dump",
    "populate-agent": "populate",
    "verify-agent": "verify",
    "install-agent": "install",
    "unmount": "unmount",
    "memcached-stats": "stats",
}


def settings_from_env() -> Settings:
    missing = [k for k in REQUIRED_ENV if not os.environ.get(k)]
    if missing:
        raise RuntimeError(f"Lambda environment lacks {', '.join(missing)} (set by the CDK stack)")
    env = os.environ
    documents = Documents(
        dump=env["DUMP_DOCUMENT_NAME"],
        populate=env["POPULATE_DOCUMENT_NAME"],
        verify=env["VERIFY_DOCUMENT_NAME"],
        install=env["INSTALL_DOCUMENT_NAME"],
        unmount=env["UNMOUNT_DOCUMENT_NAME"],
        stats=env["MEMCACHED_STATS_DOCUMENT_NAME"],
    )
    regions = tuple(r for r in (env.get("DESTINATION_REGIONS") or "").split(",") if r)
    return Settings(
        status_bucket=env["STATUS_BUCKET"],
        documents=documents,
        kms_key_id=env.get("KMS_KEY_ID") or None,
        populator_subnet_ids=tuple(s for s in (env.get("POPULATOR_SUBNET_IDS") or "").split(",") if s),
        vpc_id=env["VPC_ID"],
        stack_tag=env["STACK_TAG"],
        launch_template_id=env["POPULATOR_LAUNCH_TEMPLATE_ID"],
        populator_role_arns=tuple(r for r in (env.get("POPULATOR_ROLE_ARNS") or "").split(",") if r),
        controller_role_arn=env.get("CONTROLLER_ROLE_ARN") or None,
        transport_bucket_prefix=transport_prefix(env.get("TRANSPORT_BUCKET_PREFIX")),
        destination_regions=regions,
        remote_regions=remote_regions(env.get("DESTINATION_REGION_SETTINGS"), regions, documents),
        document_version=env["DOCUMENT_VERSION"],
        replica_pairs=replica_pairs(env.get("REPLICA_PAIRS")),
        memcached_security_groups=tuple(
            g for g in (env.get("MEMCACHED_SECURITY_GROUP_IDS") or "").split(",") if g
        ),
    )


def remote_regions(raw: str | None, regions: tuple[str, ...], home: Documents) -> dict[str, RemoteRegion]:
    """DESTINATION_REGION_SETTINGS (JSON, set by the stack from each region's stack): every
    destination region's VPC, launch template, log group and documents (by stem)."""
    try:
        given = json.loads(raw) if raw else {}
        out = {
            region: RemoteRegion(
                vpc_id=str(spec["vpc_id"]),
                launch_template_id=str(spec["launch_template_id"]),
                agent_log_group=spec.get("agent_log_group") or None,
                documents={
                    getattr(home, DOCUMENT_STEMS[stem]): str(name)
                    for stem, name in (spec.get("documents") or {}).items()
                    if stem in DOCUMENT_STEMS
                },
            )
            for region, spec in given.items()
        }
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RuntimeError(f"DESTINATION_REGION_SETTINGS is not the stack's JSON: {exc}") from exc
    missing = sorted(set(regions) - out.keys())
    if missing:
        raise RuntimeError(f"DESTINATION_REGION_SETTINGS lacks {', '.join(missing)} (set by the CDK stack)")
    return out


def account_of(role_arn: str | None) -> str | None:
    """The stack's account (`arn:<partition>:iam::<account>:role/...`): the owner every S3 call of
    the controller names (ExpectedBucketOwner)."""
    parts = (role_arn or "").split(":")
    return parts[4] if len(parts) > 5 and parts[4].isdigit() else None


def replica_pairs(value: str | None) -> tuple[Pair, ...]:
    try:
        return parse_pairs(value or "")
    except ValueError as exc:
        raise RuntimeError(f"REPLICA_PAIRS: {exc}") from None


def transport_prefix(value: str | None) -> str:
    if not value:
        return transport.BUCKET_PREFIX
    if not re.fullmatch(transport.PREFIX_PATTERN, value):
        raise RuntimeError(f"TRANSPORT_BUCKET_PREFIX={value!r} does not match {transport.PREFIX_PATTERN}")
    return value


@functools.cache
def default_deps() -> Deps:
    """Real clients, built once per Lambda container on first invocation (warm starts reuse them)."""
    settings = settings_from_env()
    ec2 = boto3.client("ec2", config=RETRY_CONFIG)
    ssm = boto3.client("ssm", config=RETRY_CONFIG)
    s3 = boto3.client("s3", config=RETRY_CONFIG)

    @functools.cache
    def in_region(region: str) -> RegionClients:
        """Another region's EC2 and SSM (a cross-region S3 warm's populators), made on first use:
        commands there run that region's documents (same version) and write to its log group."""
        far = settings.remote_regions.get(region)
        return RegionClients(
            ec2=boto3.client("ec2", region_name=region, config=RETRY_CONFIG),
            agents=SsmAgentRunner(
                boto3.client("ssm", region_name=region, config=RETRY_CONFIG),
                log_group=far.agent_log_group if far else None,
                document_version=settings.document_version,
                document_names=dict(far.documents) if far else {},
            ),
        )

    return Deps(
        ec2=ec2,
        s3=S3Store(s3, settings.status_bucket, owner=account_of(settings.controller_role_arn)),
        agents=SsmAgentRunner(
            ssm,
            log_group=os.environ.get("AGENT_LOG_GROUP") or None,
            document_version=settings.document_version,
        ),
        attacher=Ec2VolumeAttacher(ec2),
        settings=settings,
        autoscaling=boto3.client("autoscaling", config=RETRY_CONFIG),
        executions=boto3.client("stepfunctions", config=RETRY_CONFIG),
        regions=in_region,
    )


def get_deps() -> Deps:
    return default_deps()


def _bind_warm(step: str, warm_id: str | None) -> None:
    """Once the warm is known: the Logger's correlation id, an X-Ray annotation, and a second EMF
    dimension set (service, Step, WarmId) on every metric of this invocation, so two warms at once
    are told apart on the dashboard while the alarms keep watching the aggregate (service, Step)."""
    if warm_id is None:
        return
    logger.set_correlation_id(warm_id)
    tracer.put_annotation(key=WARM_ID_DIMENSION, value=warm_id)
    metrics.add_dimensions(**{"service": SERVICE, "Step": step, WARM_ID_DIMENSION: warm_id})


def _adapter(model: type[E]) -> Callable[[Callable[[E, Deps], dict[str, Any]]], Handler]:
    """A handler around `fn(parsed event, deps)`: the event parsed as `model`, Logger / Tracer /
    Metrics, the Lambda's remaining time as the steps' deadline, AWS errors mapped to retryable names."""

    def wrap(fn: Callable[[E, Deps], dict[str, Any]]) -> Handler:
        step = fn.__name__

        @functools.wraps(fn)
        @logger.inject_lambda_context(clear_state=True)
        @tracer.capture_lambda_handler(capture_response=False)
        @metrics.log_metrics
        def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
            metrics.add_dimension(name="Step", value=step)
            tracer.put_annotation(key="Step", value=step)
            try:
                parsed = parse_event(event, model)
                _bind_warm(step, getattr(parsed, "warm_id", None))
                deps = get_deps()
                deps.deadline = Deadline(getattr(context, "get_remaining_time_in_millis", None))
                result = fn(parsed, deps)
            except (ClientError, BotoCoreError) as exc:
                metrics.add_metric(name="StepFailed", unit=MetricUnit.Count, value=1)
                if isinstance(exc, BotoCoreError) or is_throttling(exc):
                    logger.warning("transient AWS error", exc_info=True)
                    raise TransientError(str(exc)) from exc
                logger.exception("AWS error")
                raise
            except Exception as exc:
                metrics.add_metric(name="StepFailed", unit=MetricUnit.Count, value=1)
                logger.exception("step failed", extra={"error_type": type(exc).__name__})
                raise
            metrics.add_metric(name="StepSucceeded", unit=MetricUnit.Count, value=1)
            logger.info("step done", extra={"result": result})
            return result

        return handler

    return wrap


def _loop(step: Callable[[Warm, dict[str, int], Deps], dict[str, Any]], key: str) -> Handler:
    """The handler of one pass of a looping step: the warm and the loop's counters so far
    (`event[key]`, the previous pass's output)."""

    def run(event: StepEvent, deps: Deps) -> dict[str, Any]:
        return step(event.warm, event.loop(key), deps)

    run.__name__ = run.__qualname__ = step.__name__
    return _adapter(StepEvent)(run)


@_adapter(ValidateInputEvent)
def validate_input(event: ValidateInputEvent, deps: Deps) -> dict[str, Any]:
    """Input `{"input": <execution input>, "execution_arn": $$.Execution.Id}` (the ASL's Parameters)."""
    inp = planning.validate(event.input, deps, region=event.execution_arn.split(":")[3])
    if event.warm_id is None:  # derived from the Auto Scaling group (planning.validate)
        _bind_warm("validate_input", inp.warm_id)
    return {
        "warm_id": inp.warm_id,
        "execution_arn": event.execution_arn,
        "input": inp.model_dump(mode="json"),
    }


@_adapter(StepEvent)
def claim_warm_id(event: StepEvent, deps: Deps) -> dict[str, Any]:
    return planning.claim(event.warm, deps)


survey_replicas = _loop(planning.survey, "survey")


@_adapter(StepEvent)
def plan(event: StepEvent, deps: Deps) -> dict[str, Any]:
    out = planning.plan(event.warm, deps)
    metrics.add_metric(name="SourceNodes", unit=MetricUnit.Count, value=out["nodes"])
    return out


create_volumes = _loop(resources.create_volumes, "volumes")
create_transport = _loop(resources.create_transport, "transport")
launch_populators = _loop(resources.launch_populators, "populators")
attach_volumes = _loop(resources.attach_volumes, "attach")
install_agents = _loop(agent_commands.install_agents, "install")
start_agents = _loop(agent_commands.start_agents, "agents")
verify = _loop(verification.verify, "verify")


def _log_node(fields: dict[str, Any]) -> None:
    # One line per node and poll: the dashboard's per-node widget queries these fields.
    logger.info("node progress", extra=fields)


@_adapter(StepEvent)
def check_progress(event: StepEvent, deps: Deps) -> dict[str, Any]:
    poll = event.progress.poll if event.progress is not None else 0
    out = progress.check_progress(event.warm, poll, deps, log=_log_node)
    metrics.add_metric(name="NodesDone", unit=MetricUnit.Count, value=out["nodes_done"])
    metrics.add_metric(name="ItemsPopulated", unit=MetricUnit.Count, value=out["items"])
    metrics.add_metric(name="BytesPopulated", unit=MetricUnit.Bytes, value=out["bytes"])
    metrics.add_metric(name="Revives", unit=MetricUnit.Count, value=out["revived_count"])
    metrics.add_metric(
        name="DumpItemsPerSecond", unit=MetricUnit.CountPerSecond, value=out["dump_items_per_s"]
    )
    metrics.add_metric(name="DumpsBackingOff", unit=MetricUnit.Count, value=out["dumps_backing_off"])
    return out


@_adapter(TeardownEvent)
def teardown(event: TeardownEvent, deps: Deps) -> dict[str, Any]:
    if event.warm_state_machine_arn is not None:  # the teardown machine: an ended warm execution
        inner = parse_event(event.event or {}, TeardownEvent)
        _bind_warm("teardown", inner.warm_id)
        target = teardown_steps.ended_target(inner, event.warm_state_machine_arn, deps.executions)
        counters = inner.teardown or {}
    else:  # the warm machine's own Teardown: its own execution
        target = teardown_steps.teardown_target(event)
        counters = event.teardown or {}
    out = teardown_steps.teardown(target, counters, deps)
    left = out.get("volumes_left", 0) + out.get("instances_left", 0) + out.get("buckets_left", 0)
    metrics.add_metric(name="TeardownLeftovers", unit=MetricUnit.Count, value=left)
    return out
