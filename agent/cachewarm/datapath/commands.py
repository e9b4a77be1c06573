"""Click commands of the data path: `populate`, `verify`, `demo` (registered in cli.py; `warm` is in
warm_command.py).

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
    accept_options,
    check_routing,
    destination_timeout_option,
    fail,
    interrupted,
    nodes,
    one_node,
    os_error,
    routing_of,
    routing_options,
    settle_option,
    source_option,
    target_option,
    unreachable,
    workers_option,
)
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.populate import (
    PopulateConfig,
    PopulateError,
    PopulateIncomplete,
    default_state_file,
    populate,
)
from cachewarm.datapath.progress import JsonDisplay, make_display, populate_summary_text
from cachewarm.datapath.remount import DEFAULT_MOUNT_CMD, DEFAULT_UMOUNT_CMD, CommandRemounter, NoopRemounter
from cachewarm.exitcodes import ExitCode, epilog
from cachewarm.shared_options import mode_option, ttl_tolerance_option

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
@workers_option()
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
