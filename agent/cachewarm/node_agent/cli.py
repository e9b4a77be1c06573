"""`cachewarm agent dump` / `populate` / `verify`: the commands the SSM documents run.

Exit codes (ExitCode, docs/exit-codes.md): 0 done; 1 the dumper/populator failed; 2 bad flags;
3 volume problem; 4 status bucket not writable; 5 timed out waiting for the source; populate also
6 a destination unreachable, 7 bad data, 8 incomplete; 130 interrupted. Whatever happens after the
first heartbeat, the status object ends `done` or `failed` with the reason, and running the same
command again resumes.
"""

from __future__ import annotations

import functools
import json
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, NoReturn

import click

from cachewarm.contract import inputs
from cachewarm.contract.status import Role, StatusLocation, VerifyResult, verify_key
from cachewarm.datapath.dumper import SourceProtection
from cachewarm.datapath.s3transport import S3Location
from cachewarm.exitcodes import epilog
from cachewarm.node_agent.errors import AgentError, ExitCode
from cachewarm.node_agent.jobs import (
    DEFAULT_PUBLISH_INTERVAL_S,
    DEFAULT_STATE_DIR,
    DumpJob,
    PopulateJob,
    find_dumper,
    run_dump,
    run_populate,
)
from cachewarm.node_agent.runner import CommandRunner, SubprocessRunner
from cachewarm.node_agent.status import StatusPublisher
from cachewarm.node_agent.volume import READER_MOUNT_OPTIONS, Volume, reader_mount_options


class Matching(click.ParamType):
    """A flag whose value must match its pattern in `cachewarm.contract.inputs` — the one the SSM
    documents' allowedPattern carries for it (`--device` excepted: any block device), checked again
    here as defense in depth; tests/contract/test_agent_cli.py holds the two together. The whole value
    must match: a bare `$` would accept a trailing newline."""

    name = "text"

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str) or not inputs.matches(self.pattern, value):
            self.fail(f"{value!r} does not match {self.pattern}", param, ctx)
        return value


class MatchingInt(Matching):
    """A number flag: its string must match the contract's pattern, its value lie in [lo, hi]."""

    name = "integer"

    def __init__(self, pattern: str, lo: int, hi: int | None = None) -> None:
        super().__init__(pattern)
        self.lo, self.hi = lo, hi

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        n = int(super().convert(value, param, ctx))
        if self.hi is None and n < self.lo:
            self.fail(f"{n} is less than {self.lo}", param, ctx)
        if self.hi is not None and not self.lo <= n <= self.hi:
            self.fail(f"{n} is not in {self.lo}..{self.hi}", param, ctx)
        return n


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


def _checked(check: Callable[[str], str], value: str, param: click.Parameter) -> str:
    try:
        return check(value)
    except ValueError as e:
        raise click.BadParameter(str(e), param=param) from e


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


@dataclass(frozen=True)
class AgentFlags:
    """The flags both agents take: which warm and node, the volume, where the status goes."""

    warm_id: str
    node_id: str
    device: str | None  # None: no volume (the S3 transport only; --mount is then a plain directory)
    mount: str
    status_bucket: str
    status_prefix: str
    heartbeat_seconds: float
    device_timeout: float
    region: str | None

    def publisher(self, role: Role) -> Callable[[], StatusPublisher]:
        def make() -> StatusPublisher:
            import boto3

            s3 = boto3.client("s3", region_name=self.region)
            from cachewarm.node_agent.identity import this_instance_arn

            where = StatusLocation(
                self.status_bucket, self.status_prefix, self.warm_id, role, self.node_id, this_instance_arn()
            )
            return StatusPublisher(s3, where, interval_s=self.heartbeat_seconds, log=_log)

        return make

    def job_fields(self, volume: Volume) -> dict[str, Any]:
        """What every job (DumpJob, PopulateJob) takes from these flags."""
        return {
            "warm_id": self.warm_id,
            "node_id": self.node_id,
            "volume": volume,
            "device_timeout_s": self.device_timeout,
        }


WARM_ID_OPTION = click.option(
    "--warm-id", required=True, type=Matching(inputs.WARM_ID), help="The warm's id (the execution's name)."
)
STATUS_BUCKET_OPTION = click.option(
    "--status-bucket",
    required=True,
    type=Matching(inputs.STATUS_BUCKET),
    help="S3 bucket the status objects go to (stack output StatusBucketName).",
)
STATUS_PREFIX_OPTION = click.option(
    "--status-prefix",
    required=True,
    type=Matching(inputs.STATUS_PREFIX),
    help="Key prefix of the status objects in --status-bucket.",
)
HEARTBEAT_OPTION = click.option(
    "--heartbeat-seconds",
    type=click.FloatRange(min=0.01),
    default=30.0,
    show_default=True,
    help="Seconds between status uploads (heartbeats) while the job runs.",
)
REGION_OPTION = click.option(
    "--region", default=None, help="AWS region of the status bucket (default: the SDK's)."
)
DUMPER_OPTION = click.option(
    "--dumper", default=None, help="cachewarm-dump binary (default: $CACHEWARM_DUMP, /opt/cachewarm/bin)."
)
_AGENT_FLAGS = [
    WARM_ID_OPTION,
    click.option("--node-id", required=True, type=Matching(inputs.INSTANCE_ID), help="Source node id."),
    # DEVICE, not EBS_DEVICE: a loop device in tests or a device renamed by hand is fine here.
    click.option(
        "--device",
        default=None,
        type=Matching(inputs.DEVICE),
        help="Block device of the volume (required but with --to-s3 / --from-s3, where the default, none, "
        "means --mount is a plain directory: docs/transport-s3.md).",
    ),
    click.option("--mount", required=True, type=Matching(inputs.AGENT_MOUNT), help="Mount point."),
    STATUS_BUCKET_OPTION,
    STATUS_PREFIX_OPTION,
    HEARTBEAT_OPTION,
    click.option(
        "--device-timeout",
        type=click.FloatRange(min=0),
        default=600.0,
        show_default=True,
        help="Seconds to wait for the device to appear.",
    ),
    REGION_OPTION,
]
# 0 (unlimited) is never passed: the SSM documents leave the flag out for it.
_PLACEMENT_OPTION = click.option(
    "--placement",
    type=Matching(inputs.PLACEMENT),
    default=inputs.DEFAULT_PLACEMENT,
    show_default=True,
    help="Where the destination's client looks for a key: evcache, libmemcached[,…], pymemcache[,…], "
    "gomemcache (docs/placement.md; twemproxy and mcrouter read a configuration: `cachewarm warm`).",
)
_TO_OPTION = click.option(
    "--to",
    "to",
    required=True,
    type=Matching(inputs.ENDPOINT_LIST),
    help="Destination HOST:PORT[,HOST:PORT…]",
)
_MODE_OPTION = click.option(
    "--mode",
    type=click.Choice(["add", "set"]),
    default=inputs.DEFAULT_MODE,
    show_default=True,
    help="add: never replace a value already in the destination (live traffic wins); set: overwrite.",
)
_RATE_OPTION = click.option(
    "--max-items-per-second",
    type=MatchingInt(inputs.RATE, 1),
    default=None,
    help="Rate limit in items/s (leave out for unlimited).",
)
_BYTE_RATE_OPTION = click.option(
    "--max-bytes-per-second",
    type=MatchingInt(inputs.BYTE_RATE, 1),
    default=None,
    help="Rate limit in bytes/s (leave out for unlimited).",
)


_S3_REGION_OPTION = click.option(
    "--s3-region",
    type=Matching(inputs.AWS_REGION),
    default=None,
    help="Region of the --to-s3 / --from-s3 bucket (default: the SDK's).",
)


def _s3_url(
    pattern: str, check: Callable[[str], Any]
) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None:
            return None
        if not inputs.matches(pattern, value):
            raise click.BadParameter(f"{value!r} does not match {pattern}", param=param)
        try:
            return check(value)
        except ValueError as e:
            raise click.BadParameter(str(e), param=param) from e

    return callback


_PROTECTION_OPTIONS = [
    _BYTE_RATE_OPTION,
    click.option(
        "--adaptive",
        type=Matching(inputs.ADAPTIVE),
        default=inputs.DEFAULT_ADAPTIVE,
        show_default=True,
        help="on: the dumper backs off its rate, batch size and crawl pace while the source's latency "
        "(its own probes) is above 1.5x what it was before the dump; RATIO (1.05..100, e.g. 1.2): on, "
        "backing off above RATIO x instead; off: only the fixed limits.",
    ),
    click.option(
        "--order",
        type=Matching(inputs.ORDER),
        default=inputs.DEFAULT_ORDER,
        show_default=True,
        help="recency: fetch the most recently used items first; crawl: in the crawl's order.",
    ),
    click.option(
        "--crawl-sleep-us",
        type=Matching(inputs.CRAWL_SLEEP),
        default=inputs.DEFAULT_CRAWL_SLEEP,
        show_default=True,
        help="memcached's `lru_crawler sleep` (us per 1000 items listed) while the dump runs, restored "
        "afterwards; server: leave the server's own.",
    ),
]


def protection_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The dumper's protection of the source (dump and stream): bytes/s, adaptive, order, crawl pace."""
    for opt in reversed(_PROTECTION_OPTIONS):
        f = opt(f)
    return f


def protection_fields(
    max_bytes_per_second: int | None, adaptive: str, order: str, crawl_sleep_us: str
) -> dict[str, Any]:
    """The protection flags as DumpJob / StreamJob's `protection`."""
    return {
        "protection": SourceProtection(
            max_bytes_per_second=max_bytes_per_second,
            adaptive=adaptive != "off",
            adaptive_target=None if adaptive in ("on", "off") else float(adaptive),
            order=order,
            crawl_sleep_us=None if crawl_sleep_us == "server" else int(crawl_sleep_us),
        )
    }


def common_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Adds the flags of AgentFlags; the command receives them as one `flags: AgentFlags`."""
    names = [fld.name for fld in fields(AgentFlags)]

    @functools.wraps(f)
    def command(**kwargs: Any) -> Any:
        flags = AgentFlags(**{n: kwargs.pop(n) for n in names})
        return f(flags, **kwargs)

    for opt in reversed(_AGENT_FLAGS):
        command = opt(command)
    return command


def _run(
    flags: AgentFlags, role: Role, work: Callable[[StatusPublisher, CommandRunner, Volume], None]
) -> NoReturn:
    """Run one agent: its volume's commands through the real runner, SIGTERM unwinding it. Without
    --device the "volume" is the plain directory --mount (never formatted or mounted)."""
    runner = SubprocessRunner()
    volume = Volume(flags.device or "", Path(flags.mount), runner, log=_log)
    with _sigterm_raises():
        code = execute(flags.publisher(role), lambda status: work(status, runner, volume))
    sys.exit(code)


@click.group("agent")
def agent_group() -> None:
    """Run on instances by the SSM documents: the dump and populate agents."""


@agent_group.command(
    "dump",
    epilog=epilog(
        ExitCode.OK, ExitCode.FAILED, ExitCode.USAGE, ExitCode.VOLUME, ExitCode.STATUS, ExitCode.INTERRUPTED
    ),
)
@common_options
@click.option(
    "--memcached", required=True, type=Matching(inputs.ENDPOINT), help="Source memcached HOST:PORT."
)
@click.option(
    "--threads",
    type=MatchingInt(inputs.THREADS, 1, inputs.THREADS_MAX),
    default=None,
    help=f"Dumper worker threads (connections to memcached), 1..{inputs.THREADS_MAX}.",
    show_default="the dumper's: 2",
)
@_RATE_OPTION
@protection_options
@DUMPER_OPTION
@click.option(
    "--publish-interval",
    type=click.FloatRange(min=0.1, max=3600),
    default=DEFAULT_PUBLISH_INTERVAL_S,
    show_default=True,
    help="At most one freeze/thaw (makes new files visible to the populators) per this many seconds.",
)
@click.option(
    "--to-s3",
    "to_s3",
    default=None,
    callback=_s3_url(inputs.S3_TRANSPORT_URL, lambda v: S3Location.parse(v) and v),
    help="S3 as the transport: upload the dump to s3://BUCKET/PREFIX/<node-id>/ as it is written, DONE "
    "last (no freeze/thaw; --device optional: without it --mount is a plain directory). Default: the "
    "volume transport (the dump stays on --device).",
)
@_S3_REGION_OPTION
@click.option(
    "--upload-rate",
    type=MatchingInt(inputs.BYTE_RATE, 1),
    default=None,
    help="The S3 upload's own limit in bytes/s (leave out for unlimited); it also waits while the "
    "adaptive guard backs off.",
)
def dump_cmd(
    flags: AgentFlags,
    memcached: str,
    threads: int | None,
    max_items_per_second: int | None,
    max_bytes_per_second: int | None,
    adaptive: str,
    order: str,
    crawl_sleep_us: str,
    dumper: str | None,
    publish_interval: float,
    to_s3: str | None,
    s3_region: str | None,
    upload_rate: int | None,
) -> None:
    """Format (if blank) and mount the volume read-write, run or resume cachewarm-dump.

    \b
    Example (what the dump-agent SSM document runs):
      cachewarm agent dump --warm-id users-v2-20261122 --node-id i-0123456789abcdef0 \\
        --status-bucket my-status-bucket --device /dev/xvdf \\
        --mount /mnt/cachewarm/users-v2-20261122 --memcached 127.0.0.1:11211"""
    host, port = memcached.rsplit(":", 1)

    def work(status: StatusPublisher, runner: CommandRunner, volume: Volume) -> None:
        job = DumpJob(
            **flags.job_fields(volume),
            memcached_host=host,
            memcached_port=int(port),
            dumper=find_dumper(dumper),
            threads=threads,
            max_items_per_second=max_items_per_second,
            publish_interval_s=publish_interval,
            **protection_fields(max_bytes_per_second, adaptive, order, crawl_sleep_us),
        )
        if to_s3 is not None:
            from cachewarm.node_agent.identity import this_account
            from cachewarm.node_agent.s3 import S3Options, run_dump_to_s3

            opts = S3Options(S3Location.parse(to_s3), s3_region, upload_rate, owner=this_account())
            run_dump_to_s3(job, opts, status, runner, _log, use_volume=flags.device is not None)
        else:
            run_dump(job, status, runner, _log)

    if to_s3 is None and flags.device is None:
        raise click.UsageError("--device is required (only --to-s3 dumps without a volume)")
    if to_s3 is None and (upload_rate is not None or s3_region is not None):
        raise click.UsageError("--upload-rate and --s3-region go with --to-s3")
    _run(flags, "dump", work)


@agent_group.command(
    "populate",
    epilog=epilog(
        ExitCode.OK,
        ExitCode.FAILED,
        ExitCode.USAGE,
        ExitCode.VOLUME,
        ExitCode.STATUS,
        ExitCode.TIMEOUT,
        ExitCode.UNREACHABLE,
        ExitCode.DATA,
        ExitCode.INCOMPLETE,
        ExitCode.INTERRUPTED,
    ),
)
@common_options
@_TO_OPTION
@_MODE_OPTION
@_RATE_OPTION
@_BYTE_RATE_OPTION
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
@click.option(
    "--mount-options",
    default=READER_MOUNT_OPTIONS,
    show_default=True,
    callback=lambda ctx, param, value: _checked(reader_mount_options, value, param),
    help="Read-only mount options; must include ro,norecovery (tests add nouuid: two mounts, one kernel).",
)
@_PLACEMENT_OPTION
@click.option(
    "--source",
    "source",
    default=None,
    type=Matching(inputs.ENDPOINT),
    help="The source memcached HOST:PORT: add mode re-checks every item it stores there once settled, "
    "so that a delete, touch or increment it got during the warm is not undone (docs/reliability.md). "
    "Add mode needs it, or --accept-no-recheck.",
    show_default="none",
)
@click.option(
    "--accept-no-recheck",
    is_flag=True,
    help="Add mode without --source: no re-check (a delete, touch or increment the source gets during "
    "the warm may be undone); named in the summary.",
)
@click.option(
    "--from-s3",
    "from_s3",
    default=None,
    callback=_s3_url(inputs.S3_NODE_URL, lambda v: v),
    help="S3 as the transport: read s3://BUCKET/PREFIX/<node-id> (the source node's objects; it ends "
    "in --node-id) with parallel range GETs into --mount/dump, a plain directory (no --device). "
    "Default: the volume transport (read --device).",
)
@_S3_REGION_OPTION
def populate_cmd(
    flags: AgentFlags,
    to: str,
    mode: str,
    placement: str,
    max_items_per_second: int | None,
    max_bytes_per_second: int | None,
    state_dir: Path,
    source_timeout: float,
    mount_options: str,
    source: str | None,
    accept_no_recheck: bool,
    from_s3: str | None,
    s3_region: str | None,
) -> None:
    """Mount the volume ro,norecovery and run the populator loop until the dump's DONE is consumed.

    \b
    Example (what the populate-agent SSM document runs):
      cachewarm agent populate --warm-id users-v2-20261122 --node-id i-0123456789abcdef0 \\
        --status-bucket my-status-bucket --device /dev/xvdf \\
        --mount /mnt/cachewarm/users-v2-20261122 --to 10.0.1.21:11211,10.0.2.22:11211 \\
        --source 10.0.1.7:11211"""

    def work(status: StatusPublisher, runner: CommandRunner, volume: Volume) -> None:
        volume.reader_options = mount_options
        job = PopulateJob(
            **flags.job_fields(volume),
            destinations=to,
            mode=mode,  # type: ignore[arg-type]
            max_items_per_second=max_items_per_second,
            max_bytes_per_second=max_bytes_per_second,
            state_dir=state_dir,
            source_timeout_s=source_timeout,
            placement=placement,
            source=source,
            accept_no_recheck=accept_no_recheck,
        )
        if from_s3 is not None:
            from cachewarm.node_agent.identity import this_account
            from cachewarm.node_agent.s3 import S3PopulateJob, parse_from_s3, run_populate_from_s3

            loc, node = parse_from_s3(from_s3)
            s3job = S3PopulateJob(job, loc, node, s3_region, owner=this_account())
            summary = run_populate_from_s3(s3job, status, log=_log)
        else:
            summary = run_populate(job, status, log=_log)
        click.echo(summary.to_json())

    if from_s3 is None and flags.device is None:
        raise click.UsageError("--device is required (only --from-s3 populates without a volume)")
    if from_s3 is not None and flags.device is not None:
        raise click.UsageError("--from-s3 reads S3, not a volume: leave out --device")
    if from_s3 is not None and not from_s3.endswith("/" + flags.node_id):
        raise click.UsageError(
            f"--from-s3 {from_s3} must end in --node-id {flags.node_id} (PREFIX/<node-id>)"
        )
    if from_s3 is None and s3_region is not None:
        raise click.UsageError("--s3-region goes with --from-s3")
    if mode == "add" and source is None and not accept_no_recheck:
        raise click.UsageError(
            "add mode re-checks every stored item on the source: give --source HOST:PORT, or "
            "--accept-no-recheck to populate without the re-check"
        )
    _run(flags, "populate", work)


@agent_group.command(
    "stream",
    epilog=epilog(ExitCode.OK, ExitCode.FAILED, ExitCode.USAGE, ExitCode.STATUS, ExitCode.INTERRUPTED),
)
@WARM_ID_OPTION
@click.option("--node-id", required=True, type=Matching(inputs.INSTANCE_ID), help="Source node id.")
@click.option(
    "--memcached", required=True, type=Matching(inputs.ENDPOINT), help="Source memcached HOST:PORT."
)
@_TO_OPTION
@_MODE_OPTION
@click.option(
    "--threads",
    type=MatchingInt(inputs.THREADS, 1, inputs.THREADS_MAX),
    default=None,
    help=f"Dumper worker threads, 1..{inputs.THREADS_MAX}.",
    show_default="the dumper's default",
)
@_RATE_OPTION
@protection_options
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path),
    default=DEFAULT_STATE_DIR,
    show_default=True,
    help="Where the stream keeps its key lists and checkpoint (a re-run resumes).",
)
@DUMPER_OPTION
@STATUS_BUCKET_OPTION
@STATUS_PREFIX_OPTION
@HEARTBEAT_OPTION
@REGION_OPTION
@_PLACEMENT_OPTION
def stream_cmd(
    warm_id: str,
    node_id: str,
    memcached: str,
    to: str,
    mode: str,
    threads: int | None,
    max_items_per_second: int | None,
    max_bytes_per_second: int | None,
    adaptive: str,
    order: str,
    crawl_sleep_us: str,
    state_dir: Path,
    dumper: str | None,
    status_bucket: str,
    status_prefix: str,
    heartbeat_seconds: float,
    region: str | None,
    placement: str,
) -> None:
    """Stream the source straight into the destination(s): no volume, no populator (same-AZ warms).
    The status is published as this node's `populate` object.

    \b
    Example:
      cachewarm agent stream --warm-id users-v2-20261122 --node-id i-0123456789abcdef0 \\
        --status-bucket my-status-bucket --memcached 127.0.0.1:11211 --to 10.0.1.21:11211,10.0.2.22:11211"""
    from cachewarm.node_agent.stream import StreamJob, publisher_factory, run_stream

    host, port = memcached.rsplit(":", 1)

    def work(status: StatusPublisher) -> None:
        job = StreamJob(
            warm_id=warm_id,
            node_id=node_id,
            memcached_host=host,
            memcached_port=int(port),
            destinations=to,
            dumper=find_dumper(dumper),
            mode=mode,  # type: ignore[arg-type]
            threads=threads,
            max_items_per_second=max_items_per_second,
            state_dir=state_dir,
            placement=placement,
            **protection_fields(max_bytes_per_second, adaptive, order, crawl_sleep_us),
        )
        click.echo(json.dumps(run_stream(job, status, SubprocessRunner(), _log)))

    factory = publisher_factory(
        status_bucket, status_prefix, warm_id, node_id, heartbeat_seconds, region, _log
    )
    with _sigterm_raises():
        code = execute(factory, work)
    sys.exit(code)


def _data_path_verify() -> tuple[Callable[..., Any], Callable[[str], list[Any]]]:
    """`cachewarm verify`'s comparison and node parser (imported late: the other agent commands
    do not need them)."""
    from cachewarm.datapath.nodes import parse_nodes
    from cachewarm.datapath.verify import verify

    return verify, parse_nodes


def run_verify(
    warm_id: str,
    node_id: str,
    source: str,
    to: str,
    sample: int,
    ttl_tolerance: int,
    now_ms: Callable[[], int],
    placement: str = inputs.DEFAULT_PLACEMENT,
) -> VerifyResult:
    """Compare `sample` of the source's keys with the destination; any failure to compare becomes
    the result's `error` (the controller reports it), never an exception."""
    try:
        verify, parse_nodes = _data_path_verify()
        from cachewarm.datapath.routing import Routing
        from cachewarm.node_agent.jobs import placement_spec

        (src,) = parse_nodes(source)
        targets = parse_nodes(to)
        routing = Routing(placement=placement_spec(placement, targets))
        # One source node of many: its targets hold the other nodes' keys too, so keys only the
        # targets hold cannot be told from theirs here (`cachewarm verify` of a whole warm does).
        rep = verify(src, targets, sample, ttl_tolerance, routing, target_keys=False)
    except (OSError, RuntimeError, ValueError, AgentError) as e:
        return VerifyResult(warm_id, node_id, now_ms(), error=f"{type(e).__name__}: {e}")
    return VerifyResult(
        warm_id=warm_id,
        node_id=node_id,
        finished_ms=now_ms(),
        source_keys=rep.source_keys,
        checked=rep.checked,
        gone_from_source=rep.gone_from_source,
        missing=rep.missing,
        value_mismatch=rep.value_mismatch,
        flags_mismatch=rep.flags_mismatch,
        ttl_mismatch=rep.ttl_mismatch,
        examples=tuple(rep.examples[:10]),
    )


@agent_group.command(
    "verify",
    epilog=epilog(
        ExitCode.OK,
        ExitCode.USAGE,
        ExitCode.STATUS,
        OK="the result is written (whatever it says; a comparison that failed is in its `error`)",
    ),
)
@WARM_ID_OPTION
@click.option("--node-id", required=True, type=Matching(inputs.INSTANCE_ID), help="Source node id.")
@click.option("--source", required=True, type=Matching(inputs.ENDPOINT), help="Source memcached HOST:PORT.")
@_TO_OPTION
@click.option(
    "--sample",
    required=True,
    type=MatchingInt(inputs.SAMPLE_KEYS, 1),
    help="How many of the source's keys to compare.",
)
@STATUS_BUCKET_OPTION
@STATUS_PREFIX_OPTION
@click.option(
    "--ttl-tolerance",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="Seconds a destination item's remaining TTL may differ from the source's.",
)
@REGION_OPTION
@_PLACEMENT_OPTION
def verify_cmd(
    warm_id: str,
    node_id: str,
    source: str,
    to: str,
    sample: int,
    status_bucket: str,
    status_prefix: str,
    ttl_tolerance: int,
    region: str | None,
    placement: str,
) -> None:
    """Compare a sample of one source node's keys with the destination (`cachewarm verify --sample`)
    and write the result to `<prefix>/<warm-id>/verify/<node-id>/<this instance's ARN>.json`; the
    controller judges it.
    Exit 0 once the result is written (whatever it says), 4 if the status bucket is not writable.

    \b
    Example (what the verify-agent SSM document runs):
      cachewarm agent verify --warm-id users-v2-20261122 --node-id i-0123456789abcdef0 \\
        --status-bucket my-status-bucket --source 10.0.0.5:11211 \\
        --to 10.0.1.21:11211,10.0.2.22:11211 --sample 10000"""
    import time

    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from cachewarm.node_agent.identity import this_instance_arn

    try:
        writer = this_instance_arn()
    except AgentError as e:
        _log(str(e))
        sys.exit(int(e.code))
    result = run_verify(
        warm_id, node_id, source, to, sample, ttl_tolerance, lambda: int(time.time() * 1000), placement
    )
    key = verify_key(status_prefix, warm_id, node_id, writer)
    try:
        boto3.client("s3", region_name=region).put_object(
            Bucket=status_bucket,
            Key=key,
            Body=result.to_json().encode(),
            ContentType="application/json",
            ExpectedBucketOwner=writer.split(":")[4],  # this instance's account owns the status bucket
        )
    except (BotoCoreError, ClientError) as e:
        _log(f"cannot write s3://{status_bucket}/{key}: {e}")
        sys.exit(int(ExitCode.STATUS))
    _log(
        f"verify {node_id}: {result.checked} keys compared, {result.differences} differ"
        + (f", error: {result.error}" if result.error else "")
    )
    click.echo(result.to_json())
