"""Lambda handlers: thin Powertools adapters over the steps (`cachewarm_controller.steps.*`).

The handler for `${<PascalName>FunctionArn}` in the ASL is `cachewarm_controller.handlers.<snake_name>`.
Clients are created on first use (never at import), through `get_deps`, which tests replace.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError

from cachewarm_controller.agents import SsmAgentRunner
from cachewarm_controller.attach import Ec2VolumeAttacher
from cachewarm_controller.awsutil import RETRY_CONFIG, is_throttling
from cachewarm_controller.errors import TransientError
from cachewarm_controller.model import WarmInput
from cachewarm_controller.steps import agent_commands, planning, progress, resources
from cachewarm_controller.steps import teardown as teardown_steps
from cachewarm_controller.steps.common import Deps, Settings
from cachewarm_controller.store import S3Store

# Service/namespace come from the Lambda environment (the CDK stack sets them); the defaults keep
# the contract's names when the module is imported elsewhere (tests, tools).
logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME") or "cachewarm")
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "CacheWarm")

Handler = Callable[[dict[str, Any], LambdaContext], dict[str, Any]]


def settings_from_env() -> Settings:
    missing = [
        k for k in ("STATUS_BUCKET", "DUMP_DOCUMENT_NAME", "POPULATE_DOCUMENT_NAME") if not os.environ.get(k)
    ]
    if missing:
        raise RuntimeError(f"Lambda environment lacks {', '.join(missing)} (set by the CDK stack)")
    return Settings(
        status_bucket=os.environ["STATUS_BUCKET"],
        dump_document=os.environ["DUMP_DOCUMENT_NAME"],
        populate_document=os.environ["POPULATE_DOCUMENT_NAME"],
        kms_key_id=os.environ.get("KMS_KEY_ID") or None,
    )


@functools.cache
def default_deps() -> Deps:
    """Real clients, built once per Lambda container on first invocation (warm starts reuse them)."""
    settings = settings_from_env()
    ec2 = boto3.client("ec2", config=RETRY_CONFIG)
    ssm = boto3.client("ssm", config=RETRY_CONFIG)
    s3 = boto3.client("s3", config=RETRY_CONFIG)
    return Deps(
        ec2=ec2,
        s3=S3Store(s3, settings.status_bucket),
        agents=SsmAgentRunner(ssm),
        attacher=Ec2VolumeAttacher(ec2),
        settings=settings,
    )


def get_deps() -> Deps:
    return default_deps()


def _input(event: dict[str, Any]) -> WarmInput:
    # Already validated by ValidateInput; re-parsing is cheap and gives a typed model.
    return WarmInput.model_validate(event["input"])


def _attempt(event: dict[str, Any], key: str) -> int:
    value = event.get(key) or {}
    return int(value.get("attempt", 0)) if isinstance(value, dict) else 0


def _adapter(fn: Callable[[dict[str, Any]], dict[str, Any]]) -> Handler:
    """Logger with the warm id as correlation id, EMF metrics, AWS errors mapped to retryable names."""

    @functools.wraps(fn)
    @logger.inject_lambda_context(correlation_id_path="warm_id", clear_state=True)
    @metrics.log_metrics
    def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        metrics.add_dimension(name="Step", value=fn.__name__)
        try:
            result = fn(event)
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


def _on_input(step: Callable[[WarmInput, Deps], dict[str, Any]]) -> Handler:
    """The handler of a step that needs only the (validated) input."""

    def run(event: dict[str, Any]) -> dict[str, Any]:
        return step(_input(event), get_deps())

    run.__name__ = run.__qualname__ = step.__name__
    return _adapter(run)


def _on_wait(step: Callable[[WarmInput, int, Deps], dict[str, Any]], loop: str) -> Handler:
    """The handler of one check of a wait loop: the input and the loop's count of checks so far
    (`event[loop]["attempt"]`, the previous check's output)."""

    def run(event: dict[str, Any]) -> dict[str, Any]:
        return step(_input(event), _attempt(event, loop), get_deps())

    run.__name__ = run.__qualname__ = step.__name__
    return _adapter(run)


@_adapter
def validate_input(event: dict[str, Any]) -> dict[str, Any]:
    inp = planning.validate(event, get_deps().ec2)
    return {"warm_id": inp.warm_id, "input": inp.model_dump(mode="json")}


@_adapter
def plan(event: dict[str, Any]) -> dict[str, Any]:
    out = planning.plan(_input(event), get_deps())
    metrics.add_metric(name="SourceNodes", unit=MetricUnit.Count, value=out["nodes"])
    return out


create_volumes = _on_input(resources.create_volumes)
check_volumes = _on_wait(resources.check_volumes, "volumes_wait")
launch_populators = _on_input(resources.launch_populators)
check_populators = _on_wait(resources.check_populators, "populators_wait")
attach_volumes = _on_input(resources.attach_volumes)
start_agents = _on_input(agent_commands.start_agents)


@_adapter
def check_progress(event: dict[str, Any]) -> dict[str, Any]:
    poll = int((event.get("progress") or {}).get("poll", 0))
    out = progress.check_progress(_input(event), poll, get_deps())
    metrics.add_metric(name="NodesDone", unit=MetricUnit.Count, value=out["nodes_done"])
    metrics.add_metric(name="ItemsPopulated", unit=MetricUnit.Count, value=out["items"])
    metrics.add_metric(name="BytesPopulated", unit=MetricUnit.Bytes, value=out["bytes"])
    metrics.add_metric(name="Revives", unit=MetricUnit.Count, value=out["revived_count"])
    return out


verify = _on_input(progress.verify)


@_adapter
def teardown(event: dict[str, Any]) -> dict[str, Any]:
    target = teardown_steps.teardown_target(event)
    attempt = _attempt(event, "teardown")
    out = teardown_steps.teardown(
        target.warm_id, target.status_prefix, attempt, TEARDOWN_MAX_ATTEMPTS, get_deps(), target.mount_dir
    )
    left = out.get("volumes_left", 0) + out.get("instances_left", 0)
    metrics.add_metric(name="TeardownLeftovers", unit=MetricUnit.Count, value=left)
    return out


# Teardown polls (detaching/terminating takes minutes); with backoff capped at 60 s this is ~1 h.
TEARDOWN_MAX_ATTEMPTS = 60
