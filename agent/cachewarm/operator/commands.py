"""The click commands `cachewarm start|status|watch` (the work is in `aws` and `view`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from botocore.exceptions import BotoCoreError, ClientError

from cachewarm.contract import tags
from cachewarm.operator.aws import Clients, OperatorError, load_view, start_warm
from cachewarm.operator.view import WarmView, render, watch_loop

region_option = click.option("--region", default=None, help="AWS region (default: the SDK's).")
bucket_option = click.option(
    "--status-bucket",
    default=None,
    help=f"Status bucket (default: the state machine's {tags.STATUS_BUCKET} tag).",
)


def _clients(obj: Any, region: str | None) -> Clients:
    """The clients a test passed as the click context object, else real ones for `region`."""
    return obj if isinstance(obj, Clients) else Clients(region)


@click.command("start")
@click.option("--state-machine", "state_machine", required=True, help="State machine ARN (stack output).")
@click.option(
    "--input", "input_file", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@region_option
@click.pass_obj
def start_cmd(obj: Any, state_machine: str, input_file: Path, region: str | None) -> None:
    """Start a warm: an execution of the state machine with the JSON input in FILE."""
    try:
        doc = json.loads(input_file.read_text())
    except ValueError as e:
        raise OperatorError(f"{input_file}: not valid JSON ({e})") from e
    if not isinstance(doc, dict):
        raise OperatorError(f"{input_file}: the input must be a JSON object")
    arn, started = start_warm(_clients(obj, region).get("stepfunctions"), state_machine, doc)
    click.echo(("started " if started else "already started: ") + arn)


@click.command("status")
@click.argument("execution_arn")
@bucket_option
@region_option
@click.pass_obj
def status_cmd(obj: Any, execution_arn: str, status_bucket: str | None, region: str | None) -> None:
    """Per-node progress of a warm, from its status objects and execution history."""
    clients = _clients(obj, region)
    view = load_view(clients.get("stepfunctions"), clients.get("s3"), execution_arn, status_bucket)
    click.echo(render(view))
    sys.exit(0 if view.status in ("RUNNING", "SUCCEEDED") else 1)


@click.command("watch")
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
    sfn, s3 = clients.get("stepfunctions"), clients.get("s3")

    def load() -> WarmView:
        try:
            return load_view(sfn, s3, execution_arn, status_bucket)
        except (ClientError, BotoCoreError) as e:
            raise OperatorError(str(e)) from e

    view = watch_loop(load, interval, max_bars)
    click.echo(render(view))
    sys.exit(0 if view.status == "SUCCEEDED" else 1)
