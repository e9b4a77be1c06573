"""`cachewarm warm` (registered in cli.py): dump a source and populate targets concurrently on this
machine, through data files, a stream or S3.

Its epilog lists its exit codes (cachewarm/exitcodes.py, docs/exit-codes.md); a failure ends in one
`error: …` line on stderr and the exit code of its kind, never a traceback.
"""

from __future__ import annotations

import ipaddress
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from cachewarm.datapath.cli_options import (
    BYTE_RATE,
    JSON_PROGRESS_HELP,
    RATE,
    accept_options,
    check_routing,
    command_with,
    destination_timeout_option,
    fail,
    interrupted,
    legacy_protection_options,
    os_error,
    protection_of,
    routing_of,
    routing_options,
    settle_option,
    source_option,
    target_option,
    unreachable,
    workers_option,
)
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.populate import PopulateError
from cachewarm.datapath.progress import JsonDisplay, make_display
from cachewarm.exitcodes import ExitCode, epilog
from cachewarm.shared_options import mode_option, protection_options, threads_option

E = ExitCode


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
@workers_option(" Also the target check's.")
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
    if _guard_by_default(options) and _all_on_this_machine([source, *target]):
        # The guard reads the source's latency as the harm the dump does to its clients; with the
        # source and every target on this machine it would read the warm's own processes (populator,
        # destination) competing for the same cores, and slow a lab warm several times.
        protection = replace(protection, adaptive=False)
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


def _guard_by_default(options: dict[str, Any]) -> bool:
    """The adaptive guard is on only because nothing on the command line said otherwise."""
    ctx = click.get_current_context()
    return (
        ctx.get_parameter_source("adaptive") is ParameterSource.DEFAULT
        and not options["no_adaptive"]
        and options["adaptive_target"] is None
    )


def _all_on_this_machine(nodes: list[Node]) -> bool:
    """Every node is a loopback address (or `localhost`): a warm between local memcacheds."""

    def loopback(host: str) -> bool:
        try:
            return ipaddress.ip_address(host.strip("[]")).is_loopback
        except ValueError:
            return host == "localhost"

    return all(loopback(n.host) for n in nodes)
