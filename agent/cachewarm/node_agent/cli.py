"""`cachewarm agent dump` / `populate` / `stream` / `verify`: the commands the SSM documents run.

Exit codes (ExitCode, docs/exit-codes.md): 0 done; 1 the dumper/populator failed; 2 bad flags;
3 volume problem; 4 status bucket not writable; 5 timed out waiting for the source; populate also
6 a destination unreachable, 7 bad data, 8 incomplete; 130 interrupted. Whatever happens after the
first heartbeat, the status object ends `done` or `failed` with the reason, and running the same
command again resumes.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from cachewarm.cli_types import Matching, MatchingInt
from cachewarm.contract import inputs
from cachewarm.datapath.s3transport import S3Location
from cachewarm.exitcodes import epilog
from cachewarm.node_agent.errors import ExitCode
from cachewarm.node_agent.jobs import (
    DEFAULT_PUBLISH_INTERVAL_S,
    DEFAULT_STATE_DIR,
    DumpJob,
    PopulateJob,
    find_dumper,
    run_dump,
    run_populate,
)
from cachewarm.node_agent.lifecycle import log, run
from cachewarm.node_agent.options import (
    BYTE_RATE_OPTION,
    DUMPER_OPTION,
    HEARTBEAT_OPTION,
    MEMCACHED_OPTION,
    NODE_ID_OPTION,
    PLACEMENT_OPTION,
    RATE_OPTION,
    REGION_OPTION,
    S3_REGION_OPTION,
    STATUS_BUCKET_OPTION,
    STATUS_PREFIX_OPTION,
    TO_OPTION,
    WARM_ID_OPTION,
    AgentFlags,
    checked,
    common_options,
    protection_fields,
    protection_options,
    s3_url,
)
from cachewarm.node_agent.runner import CommandRunner
from cachewarm.node_agent.status import StatusPublisher
from cachewarm.node_agent.verify_job import now_ms, run_verify, write_result
from cachewarm.node_agent.volume import READER_MOUNT_OPTIONS, reader_mount_options
from cachewarm.shared_options import mode_option, threads_option, ttl_tolerance_option


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
@MEMCACHED_OPTION
@threads_option
@RATE_OPTION
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
    callback=s3_url(inputs.S3_TRANSPORT_URL, lambda v: S3Location.parse(v) and v),
    help="S3 as the transport: upload the dump to s3://BUCKET/PREFIX/<node-id>/ as it is written, DONE "
    "last (no freeze/thaw; --device optional: without it --mount is a plain directory). Default: the "
    "volume transport (the dump stays on --device).",
)
@S3_REGION_OPTION
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

    def work(status: StatusPublisher, runner: CommandRunner) -> None:
        volume = flags.volume(runner)
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
            run_dump_to_s3(job, opts, status, runner, log, use_volume=flags.device is not None)
        else:
            run_dump(job, status, runner, log)

    if to_s3 is None and flags.device is None:
        raise click.UsageError("--device is required (only --to-s3 dumps without a volume)")
    if to_s3 is None and (upload_rate is not None or s3_region is not None):
        raise click.UsageError("--upload-rate and --s3-region go with --to-s3")
    run(flags.publisher("dump"), work)


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
@TO_OPTION
@mode_option
@RATE_OPTION
@BYTE_RATE_OPTION
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
    callback=lambda ctx, param, value: checked(reader_mount_options, value, param),
    help="Read-only mount options; must include ro,norecovery (tests add nouuid: two mounts, one kernel).",
)
@PLACEMENT_OPTION
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
    callback=s3_url(inputs.S3_NODE_URL, lambda v: v),
    help="S3 as the transport: read s3://BUCKET/PREFIX/<node-id> (the source node's objects; it ends "
    "in --node-id) with parallel range GETs into --mount/dump, a plain directory (no --device). "
    "Default: the volume transport (read --device).",
)
@S3_REGION_OPTION
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

    def work(status: StatusPublisher, runner: CommandRunner) -> None:
        volume = flags.volume(runner)
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
            summary = run_populate_from_s3(s3job, status, log=log)
        else:
            summary = run_populate(job, status, log=log)
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
    run(flags.publisher("populate"), work)


@agent_group.command(
    "stream",
    epilog=epilog(ExitCode.OK, ExitCode.FAILED, ExitCode.USAGE, ExitCode.STATUS, ExitCode.INTERRUPTED),
)
@WARM_ID_OPTION
@NODE_ID_OPTION
@MEMCACHED_OPTION
@TO_OPTION
@mode_option
@threads_option
@RATE_OPTION
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
@PLACEMENT_OPTION
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

    def work(status: StatusPublisher, runner: CommandRunner) -> None:
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
        click.echo(json.dumps(run_stream(job, status, runner, log)))

    factory = publisher_factory(
        status_bucket, status_prefix, warm_id, node_id, heartbeat_seconds, region, log
    )
    run(factory, work)


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
@NODE_ID_OPTION
@click.option("--source", required=True, type=Matching(inputs.ENDPOINT), help="Source memcached HOST:PORT.")
@TO_OPTION
@click.option(
    "--sample",
    required=True,
    type=MatchingInt(inputs.SAMPLE_KEYS, 1),
    help="How many of the source's keys to compare.",
)
@STATUS_BUCKET_OPTION
@STATUS_PREFIX_OPTION
@ttl_tolerance_option
@REGION_OPTION
@PLACEMENT_OPTION
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
    result = write_result(
        lambda: run_verify(warm_id, node_id, source, to, sample, ttl_tolerance, now_ms, placement),
        status_bucket,
        status_prefix,
        region,
    )
    click.echo(result.to_json())
