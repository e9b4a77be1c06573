"""The click commands `cachewarm start|list|status|watch|stop` (the work is in `aws` and `view`).

A warm is named by its warm id or its execution ARN. The region: --region, else the one in an ARN
given, else AWS_REGION, else the SDK's (AWS_DEFAULT_REGION, the profile). AWS trouble ends in one
`error:` line, never a botocore traceback: no credentials, region or profile (exit 9), an endpoint
that cannot be reached (6, within seconds: aws.CONNECT_TIMEOUT_S), any other refusal (1).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from botocore import exceptions as bx

from cachewarm.contract import tags
from cachewarm.exitcodes import CliError, ExitCode, epilog
from cachewarm.operator.aws import (
    Clients,
    find_execution,
    list_warms,
    load_view,
    pick_region,
    start_warm,
    stop_warm,
    warm_machines,
)
from cachewarm.operator.input_check import problems
from cachewarm.operator.view import WarmView, render, view_dict, watch_json, watch_loop

E = ExitCode
region_option = click.option(
    "--region",
    default=None,
    help="AWS region.",
    show_default="the ARN's, else AWS_REGION, else the SDK's (AWS_DEFAULT_REGION, ~/.aws/config)",
)
machine_option = click.option(
    "--state-machine",
    "state_machine",
    default=None,
    help="The warm state machine's ARN (stack output StateMachineArn), where a warm id is looked up.",
    show_default=f"every state machine in the region tagged {tags.STATUS_BUCKET}",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
WARM_HELP = "WARM is a warm id (the input's warm_id) or an execution ARN."
bucket_option = click.option(
    "--status-bucket",
    default=None,
    help="S3 bucket of the agents' status objects (stack output StatusBucketName).",
    show_default=f"the state machine's {tags.STATUS_BUCKET} tag",
)
AWS_CODES = (E.UNREACHABLE, E.AWS_CONFIG, E.INTERRUPTED)
CREDENTIALS_HELP = (
    "configure AWS credentials: AWS_PROFILE, `aws configure`, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
    "or an instance role"
)
# Errors of a request whose credentials AWS did not accept.
REJECTED_CREDENTIALS = {
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidClientTokenId",
    "InvalidSignatureException",
    "SignatureDoesNotMatch",
    "UnrecognizedClientException",
}
F = TypeVar("F", bound=Callable[..., Any])


def aws_errors(f: F) -> F:
    """One line and an exit code for what AWS and botocore raise (no traceback)."""

    @functools.wraps(f)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except bx.ProfileNotFound as e:
            raise CliError(f"{e}: {CREDENTIALS_HELP}", E.AWS_CONFIG) from e
        except bx.NoRegionError as e:
            raise CliError(
                "no AWS region: set AWS_REGION (or a profile's region) or pass --region", E.AWS_CONFIG
            ) from e
        except (bx.NoCredentialsError, bx.PartialCredentialsError) as e:
            raise CliError(f"{str(e).rstrip('.')}: {CREDENTIALS_HELP}", E.AWS_CONFIG) from e
        except (bx.CredentialRetrievalError, bx.TokenRetrievalError, bx.SSOError) as e:
            raise CliError(f"cannot load AWS credentials: {e}", E.AWS_CONFIG) from e
        except (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ReadTimeoutError) as e:
            raise CliError(f"AWS unreachable: {e}", E.UNREACHABLE) from e
        except bx.ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            if code in REJECTED_CREDENTIALS:
                raise CliError(f"AWS rejected the credentials: {e}; {CREDENTIALS_HELP}", E.AWS_CONFIG) from e
            raise CliError(str(e)) from e
        except bx.BotoCoreError as e:
            if "profile" in str(e).lower():  # a profile that is broken rather than missing
                raise CliError(f"{e}: {CREDENTIALS_HELP}", E.AWS_CONFIG) from e
            raise CliError(str(e)) from e
        except KeyboardInterrupt as e:
            raise CliError("interrupted", E.INTERRUPTED) from e

    return run  # type: ignore[return-value]


def _clients(obj: Any, region: str | None, *arns: str | None) -> Clients:
    """The clients a test passed as the click context object, else real ones for the region
    (aws.pick_region: --region, an ARN's, AWS_REGION, the SDK's)."""
    return obj if isinstance(obj, Clients) else Clients(pick_region(region, *arns))


@click.command(
    "start",
    epilog=epilog(E.OK, E.FAILED, E.USAGE, *AWS_CODES, OK="started, or already started (the ARN is printed)"),
)
@click.option(
    "--state-machine",
    "state_machine",
    required=True,
    help="State machine ARN (stack output StateMachineArn).",
)
@click.option(
    "--input",
    "input_file",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="JSON file with the execution's input: warm_id, source, destination, populator "
    "(infra/examples/start-input.json).",
)
@region_option
@click.pass_obj
@aws_errors
def start_cmd(obj: Any, state_machine: str, input_file: Path, region: str | None) -> None:
    """Start a warm: an execution of the state machine named after the input's warm_id (starting
    the same warm id again finds the first one). The input is checked against the execution input's
    schema before anything is sent to AWS.

    \b
    Example:
      cachewarm start --state-machine arn:aws:states:us-east-1:123456789012:stateMachine:cachewarm \\
        --input infra/examples/start-input.json"""
    try:
        doc = json.loads(input_file.read_text())
    except (ValueError, OSError) as e:
        raise click.BadParameter(f"{input_file}: not valid JSON ({e})", param_hint="--input") from e
    if not isinstance(doc, dict):
        raise click.BadParameter(f"{input_file}: the input must be a JSON object", param_hint="--input")
    if not isinstance(doc.get("warm_id"), str) or not doc["warm_id"]:
        raise click.BadParameter(
            f"{input_file}: the input has no warm_id (a string naming this warm)", param_hint="--input"
        )
    # Offline, before any AWS call: the execution would fail its ValidateInput state minutes later.
    found = problems(doc)
    if found:
        shown = "; ".join(found[:10]) + (f"; and {len(found) - 10} more" if len(found) > 10 else "")
        raise click.BadParameter(
            f"{input_file} does not match statemachine/input.schema.json: {shown}", param_hint="--input"
        )
    arn, started = start_warm(_clients(obj, region, state_machine).get("stepfunctions"), state_machine, doc)
    click.echo(("started " if started else "already started: ") + arn)


@click.command(
    "status",
    epilog=epilog(
        E.OK,
        E.FAILED,
        E.USAGE,
        *AWS_CODES,
        OK="the warm is running or succeeded",
        FAILED="the warm failed, timed out or was stopped, or AWS refused a request",
    ),
)
@click.argument("warm")
@machine_option
@bucket_option
@region_option
@json_option
@click.pass_obj
@aws_errors
def status_cmd(
    obj: Any,
    warm: str,
    state_machine: str | None,
    status_bucket: str | None,
    region: str | None,
    as_json: bool,
) -> None:
    """Per-node progress of WARM, from its status objects and execution history. WARM is a warm id
    (the input's warm_id) or an execution ARN.

    \b
    Example:
      cachewarm status users-v2-20261122 --region us-east-1
      cachewarm status arn:aws:states:us-east-1:123456789012:execution:cachewarm:users-v2-20261122 --json"""
    clients = _clients(obj, region, warm, state_machine)
    sfn, s3, asg = clients.get("stepfunctions"), clients.get("s3"), clients.get("autoscaling")
    view = load_view(sfn, s3, find_execution(sfn, warm, state_machine), status_bucket, asg)
    click.echo(json.dumps(view_dict(view)) if as_json else render(view))
    sys.exit(0 if view.status in ("RUNNING", "SUCCEEDED") else 1)


@click.command(
    "watch",
    epilog=epilog(
        E.OK,
        E.FAILED,
        E.USAGE,
        *AWS_CODES,
        OK="the warm succeeded",
        FAILED="the warm failed, timed out or was stopped, or AWS refused a request",
    ),
)
@click.argument("warm")
@machine_option
@bucket_option
@region_option
@click.option(
    "--interval", type=click.FloatRange(min=0), default=15.0, show_default=True, help="Seconds between polls."
)
@click.option(
    "--max-bars",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Nodes shown (least done first).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON line per poll (`warm_status`, with its time) on stdout instead of the bars.",
)
@click.pass_obj
@aws_errors
def watch_cmd(
    obj: Any,
    warm: str,
    state_machine: str | None,
    status_bucket: str | None,
    region: str | None,
    interval: float,
    max_bars: int,
    as_json: bool,
) -> None:
    """Follow WARM (a warm id or an execution ARN) with progress bars until it ends; exit 0 only if
    it succeeded.

    \b
    Example:
      cachewarm watch users-v2-20261122 --interval 30"""
    clients = _clients(obj, region, warm, state_machine)
    sfn, s3, asg = clients.get("stepfunctions"), clients.get("s3"), clients.get("autoscaling")
    arn = find_execution(sfn, warm, state_machine)

    # The first look before any bar is drawn: a warm that cannot be read fails with its line alone.
    first = [load_view(sfn, s3, arn, status_bucket, asg)]

    def load() -> WarmView:
        return first.pop() if first else load_view(sfn, s3, arn, status_bucket, asg)

    if as_json:
        view = watch_json(load, interval, lambda d: click.echo(json.dumps(d)))
    else:
        view = watch_loop(load, interval, max_bars)
        click.echo(render(view))
    sys.exit(0 if view.status == "SUCCEEDED" else 1)


@click.command(
    "list",
    epilog=epilog(E.OK, E.FAILED, E.USAGE, *AWS_CODES),
)
@machine_option
@region_option
@click.option(
    "--status",
    type=click.Choice(["RUNNING", "SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"]),
    default=None,
    help="Only warms in this state.",
    show_default="all",
)
@click.option(
    "--limit",
    type=click.IntRange(1, 1000),
    default=20,
    show_default=True,
    help="The most recent warms shown per state machine.",
)
@json_option
@click.pass_obj
@aws_errors
def list_cmd(
    obj: Any, state_machine: str | None, region: str | None, status: str | None, limit: int, as_json: bool
) -> None:
    """The most recent warms: warm id, state, start and end, execution ARN (newest first).

    \b
    Example:
      cachewarm list --status RUNNING --region us-east-1"""
    sfn = _clients(obj, region, state_machine).get("stepfunctions")
    machines = warm_machines(sfn, state_machine)
    if not machines:
        raise CliError(
            f"no cachewarm state machine in this region (none tagged {tags.STATUS_BUCKET}): pass "
            "--state-machine or --region",
            E.USAGE,
        )
    rows = list_warms(sfn, machines, status, limit)
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in rows]))
        return
    if not rows:
        click.echo("no warms" + (f" {status}" if status else ""))
        return
    click.echo(f"{'warm id':<32} {'status':<10} {'started':<26} {'stopped':<26} execution")
    for r in rows:
        click.echo(
            f"{r.warm_id or '-':<32} {r.status:<10} {r.started or '-':<26} {r.stopped or '-':<26} "
            f"{r.execution_arn}"
        )


@click.command(
    "stop",
    epilog=epilog(
        E.OK,
        E.FAILED,
        E.USAGE,
        *AWS_CODES,
        OK="stopped, or it had already ended (its state is printed)",
    ),
)
@click.argument("warm")
@machine_option
@region_option
@click.option(
    "--cause",
    default="stopped with cachewarm stop",
    show_default=True,
    help="Why, recorded in the execution's history.",
)
@click.pass_obj
@aws_errors
def stop_cmd(obj: Any, warm: str, state_machine: str | None, region: str | None, cause: str) -> None:
    """Stop WARM (a warm id or an execution ARN). The stack's teardown machine then removes its
    volumes and populators (docs/runbook.md §3.1); to warm the replica again, `cachewarm start` with
    a new warm_id (an execution's name is never reused).

    \b
    Example:
      cachewarm stop users-v2-20261122 --cause 'wrong source'"""
    sfn = _clients(obj, region, warm, state_machine).get("stepfunctions")
    arn = find_execution(sfn, warm, state_machine)
    ended = stop_warm(sfn, arn, cause)
    if ended is not None:
        click.echo(f"already ended {ended}: {arn}")
        return
    click.echo(
        f"stopped {arn}\nthe teardown machine now removes its volumes and populators (a few minutes); "
        "to warm again: cachewarm start with a new warm_id"
    )
