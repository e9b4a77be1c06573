"""Click commands of the data path: `populate`, `warm`, `verify`, `demo` (registered in cli.py).

`populate` hands its tuning options to PopulateConfig by name: a new populator flag is a field of
PopulateConfig (populate/config.py) and its option here, nothing else.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from cachewarm.datapath.ketama import EVCACHE_NODE_KEY, Routing, parse_nodes
from cachewarm.datapath.populate import (
    PopulateConfig,
    PopulateError,
    PopulateIncomplete,
    default_state_file,
    default_workers,
    populate,
    progress_printer,
)
from cachewarm.datapath.remount import DEFAULT_MOUNT_CMD, DEFAULT_UMOUNT_CMD, CommandRemounter, NoopRemounter


def _nodes(ctx: click.Context, param: click.Parameter, value: str) -> list:  # type: ignore[type-arg]
    try:
        return parse_nodes(value)
    except ValueError as e:
        raise click.BadParameter(str(e), ctx, param) from e


mode_option = click.option(
    "--mode",
    type=click.Choice(["add", "set"]),
    default="add",
    show_default=True,
    help="add: never replace a value already in the target (live traffic wins); set: overwrite.",
)


def routing_options(f):  # type: ignore[no-untyped-def]
    """How keys spread over several destinations: the same for populate, warm and verify."""
    f = click.option(
        "--node-key-format",
        default=EVCACHE_NODE_KEY,
        show_default=True,
        help="Ketama node key: {host} as given, {ip} its resolved address, {port} (EVCache's default; "
        "'{host}:{port}' or '{ip}:{port}' for several nodes on one host).",
    )(f)
    f = click.option("--ketama-reps", default=160, show_default=True, help="Ring points per node.")(f)
    f = click.option(
        "--hash-delimiter",
        default=None,
        callback=lambda ctx, param, value: value.encode() if value else None,
        help="Hash only the key part before this (hash.on.partial.key).",
    )(f)
    return f


def accept_options(f):  # type: ignore[no-untyped-def]
    """What a user may accept instead of a non-zero exit (docs/populator.md, "Exit codes")."""
    for flag, text in reversed(
        [
            (
                "--accept-oversize",
                "Exit 0 although items too large for a destination were skipped (named "
                "in the oversize report; never sent: a failed store deletes the key's live value).",
            ),
            ("--accept-evictions", "Exit 0 although the destinations evicted items during the run."),
            ("--accept-incomplete-dump", "Exit 0 although DONE says the dump is incomplete."),
            (
                "--accept-no-evictions",
                "Write to destinations running with evictions off (-M): when one "
                "fills up, its failed stores delete the live values of their keys.",
            ),
        ]
    ):
        f = click.option(flag, is_flag=True, help=text)(f)
    return f


def _routing(tuning: dict[str, Any]) -> Routing:
    return Routing(tuning["node_key_format"], tuning["ketama_reps"], tuning["hash_delimiter"])


@click.command("populate")
@click.option("--from", "source_dir", required=True, type=click.Path(path_type=Path), help="Dump directory.")
@click.option("--to", "to", required=True, callback=_nodes, help="HOST:PORT[,HOST:PORT...]")
@click.option(
    "--state-file", type=click.Path(path_type=Path), help="Consumed-file state (outside the volume)."
)
@mode_option
@click.option("--max-items-per-second", type=click.FloatRange(min=1), default=None)
@click.option("--workers", type=click.IntRange(min=1), default=default_workers, show_default="cores")
@routing_options
@click.option("--device", default=None, help="Block device to remount read-only between rounds.")
@click.option("--mount", "mount_dir", default=None, help="Mount point of --device.")
@click.option("--mount-cmd", default=DEFAULT_MOUNT_CMD, show_default=True)
@click.option("--umount-cmd", default=DEFAULT_UMOUNT_CMD, show_default=True)
@click.option("--poll-interval", type=click.FloatRange(min=0.01), default=1.0, show_default=True)
@click.option("--bad-file-timeout", type=click.FloatRange(min=0), default=300.0, show_default=True)
@click.option("--destination-timeout", type=click.FloatRange(min=0), default=120.0, show_default=True)
@click.option(
    "--idle-timeout", type=click.FloatRange(min=0), default=None, help="Give up if nothing appears."
)
@accept_options
@click.option(
    "--oversize-report",
    type=click.Path(path_type=Path),
    default=None,
    help="Where skipped oversize items are named (default: <state file>.oversize.jsonl).",
)
def populate_cmd(
    source_dir: Path,
    to: list,  # type: ignore[type-arg]
    state_file: Path | None,
    device: str | None,
    mount_dir: str | None,
    mount_cmd: str,
    umount_cmd: str,
    **tuning: Any,
) -> None:
    """Write the items of a dump directory's verified data files to memcached (add mode by default).

    Progress goes to stdout as JSON lines; the last line is the summary. Exits 1 with an error naming
    the problem on any failure (SERVER_ERROR, corrupt file, missing file, ...), and, after the summary,
    when the destinations do not hold every item (oversize items, evictions, an incomplete dump)
    unless the user accepted that reason."""
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
    try:
        summary = populate(config, progress_printer(sys.stdout))
    except PopulateIncomplete as e:
        click.echo(e.summary.to_json())  # type: ignore[attr-defined]
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    except PopulateError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    click.echo(summary.to_json())


@click.command("warm")
@click.option("--source", required=True, help="Source memcached HOST:PORT.")
@click.option("--target", required=True, callback=_nodes, help="Target HOST:PORT[,HOST:PORT...]")
@click.option("--workdir", required=True, type=click.Path(path_type=Path), help="Dump + state directory.")
@click.option("--threads", type=click.IntRange(1, 256), default=2, show_default=True, help="Dumper threads.")
@mode_option
@click.option("--workers", type=click.IntRange(min=1), default=default_workers, show_default="cores")
@click.option("--max-items-per-second", type=click.FloatRange(min=1), default=None)
@routing_options
@accept_options
@click.option("--data-file-size", default="32M", show_default=True)
@click.option("--resume", is_flag=True, help="Continue the dump and populate already in --workdir.")
@click.option("--check/--no-check", default=True, show_default=True, help="Look up every key in the target.")
@click.option("--dumper", default=None, help="cachewarm-dump binary (default: $CACHEWARM_DUMP, build/).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option(
    "--stream", is_flag=True, help="No data files: the dumper writes each item straight to its target."
)
def warm_cmd(
    source: str,
    target: list,  # type: ignore[type-arg]
    workdir: Path,
    threads: int,
    mode: str,
    workers: int,
    max_items_per_second: float | None,
    data_file_size: str,
    resume: bool,
    check: bool,
    dumper: str | None,
    as_json: bool,
    stream: bool,
    **options: Any,
) -> None:
    """Dump SOURCE and populate TARGET concurrently on this machine; exit 0 only if the target holds
    every item it should."""
    from cachewarm.datapath.warm import WarmConfig, WarmError, find_dumper, run_warm

    try:
        (src,) = parse_nodes(source)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--source") from e
    try:
        cfg = WarmConfig(
            source=src,
            targets=target,
            workdir=workdir,
            dumper=find_dumper(dumper),
            threads=threads,
            mode=mode,  # type: ignore[arg-type]
            workers=workers,
            max_items_per_second=max_items_per_second,
            routing=_routing(options),
            accept={k: v for k, v in options.items() if k.startswith("accept_")},
            data_file_size=data_file_size,
            resume=resume,
            check=check,
            stream=stream,
        )
        summary = run_warm(cfg)
    except (WarmError, PopulateError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    click.echo(summary.to_json() if as_json else summary.text())
    if not summary.ok:
        for problem in summary.problems:
            click.echo(f"error: {problem}", err=True)
        sys.exit(1)


@click.command("verify")
@click.option("--source", required=True, help="Source memcached HOST:PORT.")
@click.option("--target", required=True, callback=_nodes, help="Target HOST:PORT[,HOST:PORT...]")
@click.option(
    "--sample", type=click.IntRange(min=1), default=None, help="Compare N random keys (default all)."
)
@click.option("--ttl-tolerance", type=click.IntRange(min=0), default=5, show_default=True)
@routing_options
@click.option("--json", "as_json", is_flag=True)
def verify_cmd(
    source: str,
    target: list,  # type: ignore[type-arg]
    sample: int | None,
    ttl_tolerance: int,
    as_json: bool,
    **routing: Any,
) -> None:
    """Compare SOURCE and TARGET: every (or a sample of) source key on its target node with the same
    value and flags and a TTL within tolerance. Non-zero exit on any difference."""
    from cachewarm.datapath.verify import verify

    try:
        (src,) = parse_nodes(source)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--source") from e
    try:
        rep = verify(src, target, sample, ttl_tolerance, _routing(routing))
    except (OSError, RuntimeError, ValueError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    click.echo(rep.to_json() if as_json else rep.text())
    if not rep.ok:
        sys.exit(1)


@click.command("demo")
@click.option("--items", type=click.IntRange(min=1), default=1_000_000, show_default=True)
@click.option("--sample", type=click.IntRange(min=1), default=None, help="Verify a sample (default all).")
def demo_cmd(items: int, sample: int | None) -> None:
    """Start two local memcacheds, load ITEMS mixed items, warm, verify, print the summary, stop them."""
    from cachewarm.datapath.demo import run_demo
    from cachewarm.datapath.warm import WarmError

    try:
        ok = run_demo(items, sample=sample)
    except (WarmError, PopulateError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    sys.exit(0 if ok else 1)
