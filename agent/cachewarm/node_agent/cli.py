"""`cachewarm agent dump` / `cachewarm agent populate`: the commands the SSM documents run.

Exit codes (ExitCode): 0 done; 1 the dumper/populator failed; 2 bad flags; 3 volume problem;
4 status bucket not writable; 5 timed out waiting for the source; 130 interrupted. Whatever happens
after the first heartbeat, the status object ends `done` or `failed` with the reason, and running the
same command again resumes.
"""

from __future__ import annotations

import re
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from cachewarm.node_agent.errors import AgentError, ExitCode
from cachewarm.node_agent.jobs import (
    DEFAULT_STATE_DIR,
    DumpJob,
    PopulateJob,
    find_dumper,
    run_dump,
    run_populate,
)
from cachewarm.node_agent.runner import SubprocessRunner
from cachewarm.node_agent.status import Role, StatusLocation, StatusPublisher
from cachewarm.node_agent.volume import Volume

# The same shapes the SSM documents' allowedPatterns accept (checked again here: defense in depth).
PATTERNS = {
    "warm_id": r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
    "node_id": r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
    "device": r"^/dev/[A-Za-z0-9][A-Za-z0-9/_.-]{0,200}$",
    "mount": r"^/[A-Za-z0-9_.-][A-Za-z0-9/_.-]{0,200}$",
    "status_bucket": r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$",
    "status_prefix": r"^[A-Za-z0-9][A-Za-z0-9/_-]{0,98}[A-Za-z0-9]$|^[A-Za-z0-9]$",
    "endpoint": r"^[A-Za-z0-9.-]{1,253}:[0-9]{1,5}$",
}


def _pattern(name: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    rx = re.compile(PATTERNS[name])

    def check(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        # fullmatch: `$` alone would accept a trailing newline.
        if value is not None and not rx.fullmatch(value):
            raise click.BadParameter(f"{value!r} does not match {PATTERNS[name]}", ctx, param)
        return value

    return check


def _endpoints(ctx: click.Context, param: click.Parameter, value: str) -> str:
    for part in value.split(","):
        if not re.fullmatch(PATTERNS["endpoint"], part):
            raise click.BadParameter(f"{part!r} is not HOST:PORT", ctx, param)
    return value


class Interrupted(BaseException):
    """SIGTERM (SSM CancelCommand, instance stop): unwind, publish `failed`, exit 130."""


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    def handler(signum: int, frame: object) -> None:
        raise Interrupted(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _log(msg: str) -> None:
    click.echo(f"cachewarm-agent: {msg}", err=True)


def execute(publisher_factory: Callable[[], StatusPublisher], work: Callable[[StatusPublisher], None]) -> int:
    """Run one job between a first heartbeat and a final done/failed status; return the exit code."""
    try:
        publisher = publisher_factory()
        publisher.start()
    except AgentError as e:
        _log(str(e))
        return int(e.code)
    code: ExitCode = ExitCode.OK
    error: str | None = None
    try:
        work(publisher)
    except AgentError as e:
        code, error = e.code, str(e)
    except (Interrupted, KeyboardInterrupt) as e:
        code, error = ExitCode.INTERRUPTED, f"interrupted ({e or 'SIGINT'}); re-run to resume"
    except Exception as e:  # a bug: still tell the controller, with the traceback on stderr
        traceback.print_exc()
        code, error = ExitCode.WORK_FAILED, f"unexpected error: {e!r}"
    if error:
        _log(error)
    try:
        publisher.finish("failed" if error else "done", error)
    except AgentError as e:
        _log(str(e))
        return int(ExitCode.STATUS) if code == ExitCode.OK else int(code)
    _log("done" if not error else f"exit {int(code)}")
    return int(code)


def common_options(f: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.option("--warm-id", required=True, callback=_pattern("warm_id")),
        click.option("--node-id", required=True, callback=_pattern("node_id"), help="Source node id."),
        click.option(
            "--device", required=True, callback=_pattern("device"), help="Block device of the volume."
        ),
        click.option("--mount", required=True, callback=_pattern("mount"), help="Mount point."),
        click.option("--status-bucket", required=True, callback=_pattern("status_bucket")),
        click.option("--status-prefix", required=True, callback=_pattern("status_prefix")),
        click.option("--heartbeat-seconds", type=click.FloatRange(min=0.01), default=30.0, show_default=True),
        click.option(
            "--device-timeout",
            type=click.FloatRange(min=0),
            default=600.0,
            show_default=True,
            help="Seconds to wait for the device to appear.",
        ),
        click.option("--region", default=None, help="AWS region of the status bucket (default: the SDK's)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def _publisher(
    region: str | None, bucket: str, prefix: str, warm_id: str, role: Role, node_id: str, interval: float
) -> Callable[[], StatusPublisher]:
    def make() -> StatusPublisher:
        import boto3

        s3 = boto3.client("s3", region_name=region)
        return StatusPublisher(
            s3, StatusLocation(bucket, prefix, warm_id, role, node_id), interval_s=interval, log=_log
        )

    return make


@click.group("agent")
def agent_group() -> None:
    """Run on instances by the SSM documents: the dump and populate agents."""


@agent_group.command("dump")
@common_options
@click.option("--memcached", required=True, callback=_pattern("endpoint"), help="Source memcached HOST:PORT.")
@click.option("--threads", type=click.IntRange(1, 256), default=None)
@click.option("--max-items-per-second", type=click.IntRange(min=1), default=None)
@click.option(
    "--dumper", default=None, help="cachewarm-dump binary (default: $CACHEWARM_DUMP, /opt/cachewarm/bin)."
)
def dump_cmd(
    warm_id: str,
    node_id: str,
    device: str,
    mount: str,
    status_bucket: str,
    status_prefix: str,
    heartbeat_seconds: float,
    device_timeout: float,
    region: str | None,
    memcached: str,
    threads: int | None,
    max_items_per_second: int | None,
    dumper: str | None,
) -> None:
    """Format (if blank) and mount the volume read-write, run or resume cachewarm-dump."""
    host, port = memcached.rsplit(":", 1)
    runner = SubprocessRunner()

    def work(status: StatusPublisher) -> None:
        job = DumpJob(
            warm_id=warm_id,
            node_id=node_id,
            volume=Volume(device, Path(mount), runner, log=_log),
            memcached_host=host,
            memcached_port=int(port),
            dumper=find_dumper(dumper),
            threads=threads,
            max_items_per_second=max_items_per_second,
            device_timeout_s=device_timeout,
        )
        run_dump(job, status, runner, _log)

    with _sigterm_raises():
        code = execute(
            _publisher(region, status_bucket, status_prefix, warm_id, "dump", node_id, heartbeat_seconds),
            work,
        )
    sys.exit(code)


@agent_group.command("populate")
@common_options
@click.option("--to", "to", required=True, callback=_endpoints, help="Destination HOST:PORT[,HOST:PORT…]")
@click.option("--mode", type=click.Choice(["add", "set"]), default="add", show_default=True)
@click.option("--max-items-per-second", type=click.IntRange(min=1), default=None)
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path),
    default=DEFAULT_STATE_DIR,
    show_default=True,
    help="Where the populator remembers consumed files (outside the read-only volume).",
)
@click.option(
    "--source-timeout",
    type=click.FloatRange(min=0),
    default=3600.0,
    show_default=True,
    help="Seconds to wait for the source to format the volume and start dumping.",
)
def populate_cmd(
    warm_id: str,
    node_id: str,
    device: str,
    mount: str,
    status_bucket: str,
    status_prefix: str,
    heartbeat_seconds: float,
    device_timeout: float,
    region: str | None,
    to: str,
    mode: str,
    max_items_per_second: int | None,
    state_dir: Path,
    source_timeout: float,
) -> None:
    """Mount the volume ro,norecovery and run the populator loop until the dump's DONE is consumed."""
    runner = SubprocessRunner()

    def work(status: StatusPublisher) -> None:
        job = PopulateJob(
            warm_id=warm_id,
            node_id=node_id,
            volume=Volume(device, Path(mount), runner, log=_log),
            destinations=to,
            mode=mode,  # type: ignore[arg-type]
            max_items_per_second=max_items_per_second,
            state_dir=state_dir,
            device_timeout_s=device_timeout,
            source_timeout_s=source_timeout,
        )
        summary = run_populate(job, status, log=_log)
        click.echo(summary.to_json())

    with _sigterm_raises():
        code = execute(
            _publisher(region, status_bucket, status_prefix, warm_id, "populate", node_id, heartbeat_seconds),
            work,
        )
    sys.exit(code)
