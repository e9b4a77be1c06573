"""Click commands of the data path: `populate`, `warm`, `verify`, `demo` (registered in cli.py).

`populate` hands its tuning options to PopulateConfig by name: a new populator flag is a field of
PopulateConfig (populate/config.py) and its option here, nothing else.

Every option says what it takes (units, default); every command's epilog lists its exit codes
(cachewarm/exitcodes.py, docs/exit-codes.md). A failure ends in one `error: …` line on stderr and the
exit code of its kind, never a traceback.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from cachewarm.datapath.cli_options import (
    BYTE_RATE,
    JSON_PROGRESS_HELP,
    RATE,
    WORKERS_DEFAULT,
    WORKERS_HELP,
    accept_options,
    check_routing,
    command_with,
    destination_timeout_option,
    fail,
    interrupted,
    legacy_protection_options,
    nodes,
    one_node,
    os_error,
    protection_of,
    routing_of,
    routing_options,
    settle_option,
    source_option,
    target_option,
    unreachable,
)
from cachewarm.datapath.ketama import Node
from cachewarm.datapath.populate import (
    PopulateConfig,
    PopulateError,
    PopulateIncomplete,
    default_state_file,
    default_workers,
    populate,
)
from cachewarm.datapath.progress import JsonDisplay, make_display, populate_summary_text
from cachewarm.datapath.remount import DEFAULT_MOUNT_CMD, DEFAULT_UMOUNT_CMD, CommandRemounter, NoopRemounter
from cachewarm.exitcodes import ExitCode, epilog
from cachewarm.shared_options import mode_option, protection_options, threads_option, ttl_tolerance_option

E = ExitCode


@click.command(
    "populate",
    epilog=epilog(
        E.OK, E.FAILED, E.USAGE, E.VOLUME, E.TIMEOUT, E.UNREACHABLE, E.DATA, E.INCOMPLETE, E.INTERRUPTED
    ),
)
@click.option(
    "--from",
    "source_dir",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Dump directory to read: data files and DONE (e.g. the volume's read-only mount).",
)
@click.option(
    "--to",
    "to",
    required=True,
    callback=nodes,
    help="Destination memcached(s), HOST:PORT[,HOST:PORT...]; several are routed by ketama.",
)
@click.option(
    "--state-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where consumed files are remembered (outside the volume); running again resumes from it.",
    show_default="~/.local/state/cachewarm/populate-<hash of --from, --to>.json",
)
@mode_option
@click.option(
    "--source",
    default=None,
    callback=lambda ctx, param, value: one_node(ctx, param, value) if value else None,
    help="The memcached the dump was made from, HOST[:PORT]: add mode re-checks every item it stores "
    "there once settled, so that a delete, touch or increment it got during the warm is not undone "
    "(required in add mode unless --accept-no-recheck); it also checks this host's clock against the "
    "dumper host's.",
    show_default="none",
)
@settle_option
@click.option(
    "--max-items-per-second",
    type=RATE,
    default=None,
    help="Write at most this many items/s to the destinations in all (split over the workers); "
    "0 = unlimited.",
    show_default="unlimited",
)
@click.option(
    "--max-bytes-per-second",
    type=BYTE_RATE,
    default=None,
    help="Write at most this many bytes/s to the destinations in all; k, M, G suffixes (powers of "
    "1024); 0 = unlimited.",
    show_default="unlimited",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=default_workers,
    show_default=WORKERS_DEFAULT,
    help=WORKERS_HELP,
)
@routing_options
@click.option(
    "--device",
    default=None,
    help="Block device to remount read-only between rounds (with --mount).",
    show_default="none: --from is a plain directory",
)
@click.option(
    "--mount",
    "mount_dir",
    default=None,
    help="Mount point of --device (and --from is under it).",
    show_default="none",
)
@click.option(
    "--mount-cmd",
    default=DEFAULT_MOUNT_CMD,
    show_default=True,
    help="Command that mounts --device read-only at --mount ({device}, {mount} filled in).",
)
@click.option(
    "--umount-cmd", default=DEFAULT_UMOUNT_CMD, show_default=True, help="Command that unmounts --mount."
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=0.01),
    default=1.0,
    show_default=True,
    help="Seconds between looks for new data files.",
)
@click.option(
    "--bad-file-timeout",
    type=click.FloatRange(min=0),
    default=300.0,
    show_default=True,
    help="Seconds a data file may stay incomplete or unverifiable, or a file DONE lists stay absent, "
    "before the run fails (exit 7).",
)
@destination_timeout_option
@click.option(
    "--idle-timeout",
    type=click.FloatRange(min=0),
    default=None,
    help="Seconds without any new data file or DONE before giving up (exit 5).",
    show_default="wait forever",
)
@accept_options
@click.option(
    "--oversize-report",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where skipped oversize items are named, one JSON line each.",
    show_default="<state file>.oversize.jsonl",
)
@click.option("--json", "as_json", is_flag=True, help=JSON_PROGRESS_HELP)
def populate_cmd(
    source_dir: Path,
    to: list,  # type: ignore[type-arg]
    state_file: Path | None,
    device: str | None,
    mount_dir: str | None,
    mount_cmd: str,
    umount_cmd: str,
    as_json: bool,
    **tuning: Any,
) -> None:
    """Write the items of a dump directory's verified data files to memcached (add mode by default),
    until every file DONE lists is applied.

    On a terminal a progress display (published files, populated items, MB/s, ETA) goes to stderr;
    elsewhere one progress line every few seconds. The summary goes to stdout and ends with the speed;
    --json gives JSON lines instead (docs/json-events.md). Any failure ends in one `error:` line naming
    the problem. On an empty directory it says so and waits for a dumper to publish files.

    \b
    Example:
      cachewarm populate --from /mnt/cw --to 10.0.2.5:11211,10.0.2.6:11211 \\
        --state-file /var/lib/cachewarm/state.json --max-items-per-second 100000"""
    if (device is None) != (mount_dir is None):
        raise click.UsageError("--device and --mount go together")
    remounter = CommandRemounter(device, mount_dir, mount_cmd, umount_cmd) if device and mount_dir else None
    config = PopulateConfig(
        source_dir=source_dir,
        destinations=to,
        state_file=state_file or default_state_file(source_dir, to),
        remounter=remounter or NoopRemounter(),
        **tuning,  # every other option, named as PopulateConfig's field
    )
    check_routing(config.routing, to)
    display = JsonDisplay(sys.stdout) if as_json else make_display(sys.stderr)
    if not _holds_dump_files(source_dir):
        click.echo(
            f"cachewarm: {source_dir} holds no data files and no DONE yet: waiting for a dumper to publish "
            "them (cachewarm-dump --out, cachewarm agent dump); --idle-timeout gives up",
            err=True,
        )
    try:
        try:
            summary = populate(config, display.populator)
        finally:
            display.close()
    except PopulateIncomplete as e:
        s = e.summary
        click.echo(s.to_json() if as_json else populate_summary_text(s))  # type: ignore[attr-defined]
        fail(e)
    except PopulateError as e:
        fail(e)
    except OSError as e:  # the state file, the oversize report: one line with the path
        fail(os_error(e), ExitCode.UNREACHABLE if unreachable(e) else ExitCode.FAILED)
    except KeyboardInterrupt:
        interrupted()
    click.echo(summary.to_json() if as_json else populate_summary_text(summary))


def _holds_dump_files(path: Path) -> bool:
    """Whether a dump directory holds DONE or a data file yet (an empty one: a dumper is awaited)."""
    from cachewarm.datapath import format as df

    try:
        return any(n == df.MANIFEST_NAME or df.parse_name(n) is not None for n in os.listdir(path))
    except OSError:
        return True  # the populator says what is wrong with it


def _s3_transport(
    url: str | None, endpoint: str | None, byte_rate: int | None, part_size: int, stream: bool
) -> Any:
    """The --via-s3 flags as an S3Transport (None without --via-s3); a bad value exits 2 naming it."""
    from cachewarm.datapath.s3transport import MAX_PART_SIZE, MIN_PART_SIZE, S3Location
    from cachewarm.datapath.s3warm import S3Transport

    if url is None:
        for flag, given in (("--s3-endpoint-url", endpoint), ("--s3-max-bytes-per-second", byte_rate)):
            if given is not None:
                raise click.UsageError(f"{flag} needs --via-s3")
        return None
    if stream:
        raise click.UsageError("--via-s3 moves data files; --stream has none: give one of them")
    try:
        loc = S3Location.parse(url)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--via-s3") from e
    if not part_size or not MIN_PART_SIZE <= part_size <= MAX_PART_SIZE:
        raise click.BadParameter(
            f"{part_size} bytes is outside 5M..64M (S3's smallest part is 5 MiB)", param_hint="--s3-part-size"
        )
    return S3Transport(loc, endpoint, part_size, byte_rate)


@click.command(
    "warm", epilog=epilog(E.OK, E.FAILED, E.USAGE, E.UNREACHABLE, E.DATA, E.INCOMPLETE, E.INTERRUPTED)
)
@source_option
@target_option
@click.option(
    "--workdir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for the dump's data files and the populator's state (empty, or use --resume).",
)
@threads_option
@mode_option
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=default_workers,
    show_default=WORKERS_DEFAULT,
    help=WORKERS_HELP + " Also the target check's.",
)
@click.option(
    "--max-items-per-second",
    type=RATE,
    default=None,
    help="Rate limit in items/s for both the reads from the source (the dumper) and the writes to "
    "the target (the populator); --source-/--target-max-items-per-second replace it on one side. "
    "0 = unlimited.",
    show_default="unlimited",
)
@click.option(
    "--source-max-items-per-second",
    type=RATE,
    default=None,
    help="Items/s the dumper reads from the source (cachewarm-dump --max-items-per-second); 0 = unlimited.",
    show_default="--max-items-per-second",
)
@click.option(
    "--target-max-items-per-second",
    type=RATE,
    default=None,
    help="Items/s the populator writes to the target; 0 = unlimited.",
    show_default="--max-items-per-second",
)
@click.option(
    "--source-max-bytes-per-second",
    type=BYTE_RATE,
    default=None,
    help="Bytes/s the dumper reads from the source; k, M, G suffixes (powers of 1024); 0 = unlimited.",
    show_default="unlimited",
)
@click.option(
    "--target-max-bytes-per-second",
    type=BYTE_RATE,
    default=None,
    help="Bytes/s the populator writes to the target; k, M, G suffixes (powers of 1024); 0 = unlimited.",
    show_default="unlimited",
)
@protection_options
@legacy_protection_options
@routing_options
@accept_options
@click.option(
    "--data-file-size",
    default="32M",
    show_default=True,
    metavar="SIZE",
    help="Bytes after which the dumper starts a new data file; k, M, G suffixes (powers of 1024).",
)
@click.option("--resume", is_flag=True, help="Continue the dump and populate already in --workdir.")
@click.option(
    "--check/--no-check",
    default=True,
    show_default=True,
    help="After populating, look up every dumped, unexpired key in the target.",
)
@click.option(
    "--check-sample",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    metavar="N",
    help="With the check: also compare the value, flags and TTL of about N random checked keys on "
    "the source and their target node (`cachewarm verify`'s rules); 0 = presence only.",
)
@click.option(
    "--dumper",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    metavar="PATH",
    help="cachewarm-dump binary.",
    show_default="$CACHEWARM_DUMP, build/release/, PATH",
)
@destination_timeout_option
@settle_option
@click.option("--json", "as_json", is_flag=True, help=JSON_PROGRESS_HELP)
@click.option(
    "--stream",
    is_flag=True,
    help="No data files: the dumper writes each item straight to its target node (docs/stream.md).",
)
@click.option(
    "--plan",
    is_flag=True,
    help="Look at the source and the targets and print what the warm would do (items, bytes, the "
    "targets' memory, the work directory's disk, the time at the source rate limit); move nothing.",
)
@click.option(
    "--via-s3",
    "via_s3",
    default=None,
    metavar="s3://BUCKET/PREFIX",
    help="Move the data files through S3 (the transport to another region, docs/transport-s3.md): "
    "dump, upload under PREFIX/<node>/, download, populate; the objects are deleted when the warm "
    "succeeds.",
    show_default="off: no S3",
)
@click.option(
    "--s3-endpoint-url",
    default=None,
    metavar="URL",
    help="S3 endpoint for --via-s3 (a local S3 such as moto's server).",
    show_default="AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS",
)
@click.option(
    "--s3-max-bytes-per-second",
    type=BYTE_RATE,
    default=None,
    help="Bytes/s of the --via-s3 upload (the source node's network is its clients'); k, M, G "
    "suffixes (powers of 1024); 0 = unlimited.",
    show_default="unlimited",
)
@click.option(
    "--s3-part-size",
    type=BYTE_RATE,
    default="8M",
    show_default=True,
    help="Bytes of one multipart-upload part and one ranged GET (the most of a file held in memory), "
    "5M..64M; k, M, G suffixes (powers of 1024).",
)
def warm_cmd(
    source: Node,
    target: list,  # type: ignore[type-arg]
    workdir: Path,
    threads: int | None,
    mode: str,
    workers: int,
    max_items_per_second: int | None,
    source_max_items_per_second: int | None,
    target_max_items_per_second: int | None,
    source_max_bytes_per_second: int | None,
    target_max_bytes_per_second: int | None,
    data_file_size: str,
    resume: bool,
    check: bool,
    check_sample: int,
    dumper: str | None,
    destination_timeout: float,
    settle_seconds: float,
    as_json: bool,
    stream: bool,
    plan: bool,
    via_s3: str | None,
    s3_endpoint_url: str | None,
    s3_max_bytes_per_second: int | None,
    s3_part_size: int | None,
    **options: Any,
) -> None:
    """Dump SOURCE and populate TARGET concurrently on this machine; exit 0 only if the target holds
    every item it should.

    On a terminal a progress display (dumped / published / populated: items, MB/s, ETA) goes to
    stderr; elsewhere one progress line every few seconds. The summary goes to stdout and ends with
    the speed; --json gives JSON lines instead (docs/json-events.md).

    Before the dumper starts, the source and every target are reached (a dead one fails now, exit 6),
    identified (a target that is the source is refused, exit 2) and sized (an empty source is named).
    WORKDIR needs about the source's `stats bytes` of disk (data files; --stream: only key lists; the
    check's lookups, ~25 bytes per item, until the check ends) and stays afterwards: remove it when
    done. --resume continues an interrupted warm (on an empty
    WORKDIR it simply starts); Ctrl-C prints the exact command.

    \b
    Example:
      cachewarm warm --source 10.0.1.5 --target 10.0.2.5:11211 --workdir /var/tmp/cw \\
        --source-max-items-per-second 50000"""
    from cachewarm.datapath.warm import WarmConfig, find_dumper, run_warm
    from cachewarm.datapath.warm_errors import DumpExists, PlanOnly, WarmError

    routing = routing_of(options)
    check_routing(routing, target)
    protection = protection_of(source_max_bytes_per_second, options)
    s3 = _s3_transport(via_s3, s3_endpoint_url, s3_max_bytes_per_second, s3_part_size, stream)
    try:
        cfg = WarmConfig(
            source=source,
            targets=target,
            workdir=workdir,
            dumper=find_dumper(dumper),
            **({} if threads is None else {"threads": threads}),  # None: the dumper's own
            mode=mode,  # type: ignore[arg-type]
            workers=workers,
            max_items_per_second=max_items_per_second,
            source_max_items_per_second=source_max_items_per_second,
            target_max_items_per_second=target_max_items_per_second,
            target_max_bytes_per_second=target_max_bytes_per_second,
            source_protection=protection,
            destination_timeout=destination_timeout,
            settle_seconds=settle_seconds,
            routing=routing,
            accept={k: v for k, v in options.items() if k.startswith("accept_")},
            data_file_size=data_file_size,
            resume=resume,
            check=check,
            check_sample=check_sample,
            stream=stream,
            plan=plan,
            s3=s3,
        )
        summary = run_warm(
            cfg, display=JsonDisplay(sys.stdout) if as_json else make_display(sys.stderr, dumper=True)
        )
    except PlanOnly as e:
        click.echo(str(e))
        return
    except DumpExists as e:
        fail(
            f"{e.path} already holds a dump; to continue it: {command_with('--resume')} "
            "(or use an empty --workdir)",
            ExitCode.USAGE,
        )
    except (WarmError, PopulateError) as e:
        fail(e)
    except OSError as e:  # the workdir's files: one line with the path
        fail(os_error(e), ExitCode.UNREACHABLE if unreachable(e) else ExitCode.FAILED)
    except KeyboardInterrupt:
        interrupted("--resume")
    click.echo(summary.to_json() if as_json else summary.text())
    if not summary.ok:
        for problem in summary.problems:
            click.echo(f"error: {problem}", err=True)
        sys.exit(int(ExitCode.INCOMPLETE))


@click.command(
    "verify",
    epilog=epilog(
        E.OK,
        E.FAILED,
        E.USAGE,
        E.UNREACHABLE,
        E.INCOMPLETE,
        E.INTERRUPTED,
        OK="every compared key is in the target with the same value, flags and TTL",
        FAILED="the comparison failed (the message says why)",
        INCOMPLETE="differences: keys missing or different in the target (listed)",
    ),
)
@source_option
@target_option
@click.option(
    "--sample",
    type=click.IntRange(min=1),
    default=None,
    help="Compare N random source keys.",
    show_default="every key",
)
@ttl_tolerance_option
@routing_options
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
def verify_cmd(
    source: Node,
    target: list,  # type: ignore[type-arg]
    sample: int | None,
    ttl_tolerance: int,
    as_json: bool,
    **routing: Any,
) -> None:
    """Compare SOURCE and TARGET: every (or a sample of) source key on its target node with the same
    value and flags and a TTL within tolerance. Non-zero exit on any difference; up to 10 examples are
    named (keys as text, other bytes escaped as \\xNN).

    \b
    Example:
      cachewarm verify --source 10.0.1.5:11211 --target 10.0.2.5:11211 --sample 100000"""
    from cachewarm.datapath.preflight import preflight
    from cachewarm.datapath.verify import verify
    from cachewarm.datapath.warm_errors import WarmError

    check_routing(routing_of(routing), target)
    try:
        preflight(source, target)  # each side reached and named; a target that is the source refused
        rep = verify(source, target, sample, ttl_tolerance, routing_of(routing))
    except WarmError as e:
        fail(e)
    except (OSError, RuntimeError, ValueError) as e:
        fail(e, ExitCode.UNREACHABLE if unreachable(e) else ExitCode.FAILED)
    except KeyboardInterrupt:
        interrupted()
    click.echo(rep.to_json() if as_json else rep.text())
    if not rep.ok:
        sys.exit(int(ExitCode.INCOMPLETE))


@click.command(
    "demo",
    epilog=epilog(
        E.OK,
        E.FAILED,
        E.USAGE,
        E.UNREACHABLE,
        E.DATA,
        E.INCOMPLETE,
        E.INTERRUPTED,
        OK="the target holds every item and verify found no difference",
    ),
)
@click.option(
    "--items",
    type=click.IntRange(min=1),
    default=1_000_000,
    show_default=True,
    help="Items to load into the demo's source memcached (values 50 B..200 KB).",
)
@click.option(
    "--sample",
    type=click.IntRange(min=1),
    default=None,
    help="Verify N random keys.",
    show_default="every key",
)
def demo_cmd(items: int, sample: int | None) -> None:
    """Start two local memcacheds, load ITEMS mixed items, warm, verify, print the summary, stop them
    (`make demo` runs it with a million).

    \b
    Example:
      cachewarm demo --items 100000"""
    from cachewarm.datapath.demo import run_demo
    from cachewarm.datapath.warm_errors import WarmError

    try:
        ok = run_demo(items, sample=sample)
    except (WarmError, PopulateError) as e:
        fail(e)
    except (OSError, LookupError, RuntimeError) as e:  # no memcached to start, a failed load
        fail(e, ExitCode.FAILED)
    except KeyboardInterrupt:
        interrupted()
    sys.exit(0 if ok else int(ExitCode.INCOMPLETE))
