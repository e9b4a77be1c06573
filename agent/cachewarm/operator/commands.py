"""The click commands `cachewarm start|status|watch` (the work is in `aws` and `view`).

AWS trouble ends in one `error:` line, never a botocore traceback: no credentials or region (exit 9),
an endpoint that cannot be reached (6, within seconds: aws.CONNECT_TIMEOUT_S), any other refusal (1).
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
from cachewarm.operator.aws import Clients, load_view, start_warm
from cachewarm.operator.view import WarmView, render, watch_loop

E = ExitCode
region_option = click.option(
    "--region", default=None, help="AWS region.", show_default="the SDK's: AWS_REGION, ~/.aws/config"
)
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
            raise CliError(str(e)) from e
        except KeyboardInterrupt as e:
            raise CliError("interrupted", E.INTERRUPTED) from e

    return run  # type: ignore[return-value]


def _clients(obj: Any, region: str | None) -> Clients:
    """The clients a test passed as the click context object, else real ones for `region`."""
    return obj if isinstance(obj, Clients) else Clients(region)


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
    the same warm id again finds the first one)."""
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
    arn, started = start_warm(_clients(obj, region).get("stepfunctions"), state_machine, doc)
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
@click.argument("execution_arn")
@bucket_option
@region_option
@click.pass_obj
@aws_errors
def status_cmd(obj: Any, execution_arn: str, status_bucket: str | None, region: str | None) -> None:
    """Per-node progress of a warm, from its status objects and execution history."""
    clients = _clients(obj, region)
    sfn, s3, asg = clients.get("stepfunctions"), clients.get("s3"), clients.get("autoscaling")
    view = load_view(sfn, s3, execution_arn, status_bucket, asg)
    click.echo(render(view))
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
@click.argument("execution_arn")
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
@click.pass_obj
@aws_errors
def watch_cmd(
    obj: Any,
    execution_arn: str,
    status_bucket: str | None,
    region: str | None,
    interval: float,
    max_bars: int,
) -> None:
    """Follow a warm with progress bars until it ends; exit 0 only if it succeeded."""
    clients = _clients(obj, region)
    sfn, s3, asg = clients.get("stepfunctions"), clients.get("s3"), clients.get("autoscaling")

    # The first look before any bar is drawn: a warm that cannot be read fails with its line alone.
    first = [load_view(sfn, s3, execution_arn, status_bucket, asg)]

    def load() -> WarmView:
        return first.pop() if first else load_view(sfn, s3, execution_arn, status_bucket, asg)

    view = watch_loop(load, interval, max_bars)
    click.echo(render(view))
    sys.exit(0 if view.status == "SUCCEEDED" else 1)
