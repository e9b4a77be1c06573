"""The options and error handling the data path's commands share (`datapath/commands.py`,
`warm_command.py`): how keys are routed, what a user may accept, the help texts of options several
commands have, and the one-line errors with the exit code of their kind (cachewarm/exitcodes.py). The
options `cachewarm agent` takes too are in cachewarm/shared_options.py."""

from __future__ import annotations

import shlex
import socket
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar, NoReturn

import click

from cachewarm.contract.inputs import ADAPTIVE_TARGET_MAX, ADAPTIVE_TARGET_MIN, CRAWL_SLEEP_MAX
from cachewarm.datapath.dumper import SourceProtection
from cachewarm.datapath.nodes import DEFAULT_PORT, Node, parse_nodes
from cachewarm.datapath.populate.config import default_workers
from cachewarm.datapath.routing import EVCACHE_NODE_KEY, Routing
from cachewarm.exitcodes import ExitCode, code_of
from cachewarm.shared_options import source_protection


def fail(e: BaseException, code: ExitCode | None = None) -> NoReturn:
    """One line on stderr and the exit code of the error's kind."""
    click.echo(f"error: {e}", err=True)
    sys.exit(int(code if code is not None else code_of(e)))


def interrupted(resume_flag: str | None = None) -> NoReturn:
    """Exit 130 with the way to continue: the same command (populate: its state file resumes), or —
    `resume_flag` given — the exact command line with that flag added (warm: `--resume`)."""
    if resume_flag is None:
        click.echo("error: interrupted; run the same command again to resume", err=True)
    else:
        click.echo(f"error: interrupted; to continue: {command_with(resume_flag)}", err=True)
    sys.exit(int(ExitCode.INTERRUPTED))


def command_with(flag: str) -> str:
    """This process's `cachewarm` command line (as the shell gets it back) with `flag` added once."""
    args = sys.argv[1:]
    return shlex.join(["cachewarm", *args, *([] if flag in args else [flag])])


def os_error(e: OSError) -> str:
    """One line for a file system error: what failed, on which path (no traceback)."""
    where = f" {e.filename}" if e.filename else ""
    return f"{e.strerror or e}:{where}" if where else str(e.strerror or e)


def unreachable(e: BaseException) -> bool:
    return isinstance(e, (ConnectionError, TimeoutError, socket.gaierror))


def nodes(ctx: click.Context, param: click.Parameter, value: str) -> list:  # type: ignore[type-arg]
    """HOST[:PORT][,...] (memcached's port 11211 by default); an error names the flag."""
    try:
        return parse_nodes(value, what=param.opts[0], default_port=DEFAULT_PORT)
    except ValueError as e:
        raise click.BadParameter(str(e), ctx, param) from e


def one_node(ctx: click.Context, param: click.Parameter, value: str) -> Node:
    found = nodes(ctx, param, value)
    if len(found) != 1:
        raise click.BadParameter(f"{param.opts[0]} takes one HOST[:PORT], not {len(found)}", ctx, param)
    return found[0]


def unlimited_if_zero(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    return value or None


class Rate(click.ParamType):
    """Items per second: a whole number, 0 = unlimited (as cachewarm-dump reads it)."""

    name = "N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | None:
        if value is None or isinstance(value, int):
            return value or None
        text = str(value).strip()
        if not text.isdigit():
            self.fail(f"{value!r} is not a rate: whole items per second, 0 = unlimited", param, ctx)
        return int(text) or None


# Every items/s flag of the data path takes this (one number type; 0 = unlimited, like the dumper).
RATE = Rate()


def _placement(ctx: click.Context, param: click.Parameter, value: str | None) -> object:
    from cachewarm.datapath.placement import PlacementError, PlacementSpec

    if value is None or value == "evcache":
        return None
    try:
        return PlacementSpec.parse(value)
    except PlacementError as e:
        raise click.BadParameter(str(e), ctx, param) from e


def routing_options(f):  # type: ignore[no-untyped-def]
    """How keys spread over several destinations: the same for populate, warm and verify."""
    f = click.option(
        "--placement",
        default=None,
        metavar="SCHEME[,KEY=VALUE...]",
        callback=_placement,
        help="Place keys where this client looks for them: evcache (the default: the ketama options "
        "below), twemproxy,config=NUTCRACKER.yml,pool=NAME; mcrouter,config=MCROUTER.json,pool=NAME; "
        "libmemcached[,distribution=modula|ketama|ketama-weighted|ketama-spy][,hash=NAME][,namespace=P]"
        "[,weights=W1:W2:...]; "
        "pymemcache[,keys=str|bytes][,prefix=P]; gomemcache; "
        "spymemcached[,format=spymemcached|libmemcached][,reps=N][,weighted=true][,weights=W1:W2:...] "
        "(docs/placement.md).",
        show_default="evcache",
    )(f)
    f = click.option(
        "--node-key-format",
        default=EVCACHE_NODE_KEY,
        show_default=True,
        help="Ketama node key: {host} as given, {ip} its resolved address, {port} (EVCache's default; "
        "'{host}:{port}' or '{ip}:{port}' for several nodes on one host).",
    )(f)
    f = click.option(
        "--ketama-reps",
        type=click.IntRange(min=4),
        default=160,
        show_default=True,
        help="Ring points per node (EVCache's bucket.size).",
    )(f)
    f = click.option(
        "--hash-delimiter",
        default=None,
        callback=lambda ctx, param, value: value.encode() if value else None,
        help="Hash only the key part before this string (EVCache's hash.on.partial.key).",
        show_default="the whole key",
    )(f)
    return f


def accept_options(f):  # type: ignore[no-untyped-def]
    """What a user may accept instead of a non-zero exit (docs/populator.md, "Exit codes")."""
    for flag, text in reversed(
        [
            (
                "--accept-oversize",
                "Exit 0, not 8, although items too large for a destination were skipped (named "
                "in the oversize report; never sent: memcached refuses it, and a refused set deletes "
                "the key's value).",
            ),
            ("--accept-evictions", "Exit 0, not 8, although the destinations evicted items during the run."),
            ("--accept-incomplete-dump", "Exit 0, not 8, although DONE says the dump is incomplete."),
            (
                "--accept-no-evictions",
                "Write to destinations running with evictions off (-M): when one "
                "fills up it fails stores (SERVER_ERROR out of memory) and the run fails; in set "
                "mode each failed store also deletes its key's value.",
            ),
            (
                "--accept-no-recheck",
                "Run add mode without the re-check that keeps a delete, touch or increment the source "
                "gets during the warm from being undone (it needs the source, CAS on at both ends, the "
                "binary protocol at the destination and data files of format 3): such ops may then be "
                "undone. Named in the summary.",
            ),
        ]
    ):
        f = click.option(flag, is_flag=True, help=text)(f)
    return f


settle_option = click.option(
    "--settle-seconds",
    type=click.FloatRange(min=0),
    default=2.0,
    show_default=True,
    help="Seconds after a data file's last write before its re-check on the source: at least the "
    "largest delay between a client's write to one replica and to the other (docs/reliability.md).",
)


class ByteRate(click.ParamType):
    """Bytes per second: an integer with an optional k, M, G suffix (powers of 1024); 0 = unlimited."""

    name = "BYTES"
    _UNITS: ClassVar[dict[str, int]] = {
        "": 1,
        "k": 1 << 10,
        "K": 1 << 10,
        "m": 1 << 20,
        "M": 1 << 20,
        "g": 1 << 30,
        "G": 1 << 30,
    }

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        unit = text[-1:] if text[-1:] in self._UNITS and not text[-1:].isdigit() else ""
        digits = text[: len(text) - len(unit)]
        if not digits.isdigit():
            self.fail(f"{value!r} is not a byte rate (e.g. 50000000, 64M; 0 = unlimited)", param, ctx)
        return int(digits) * self._UNITS[unit] or None  # type: ignore[return-value]


BYTE_RATE = ByteRate()


def legacy_protection_options(f):  # type: ignore[no-untyped-def]
    """`cachewarm warm`'s former spellings of the source's protection, still read (hidden): the guard
    was a switch with its threshold apart, the crawl's pace named for the source."""
    f = click.option("--no-adaptive", is_flag=True, hidden=True, help="Former spelling of --adaptive off.")(f)
    f = click.option(
        "--adaptive-target",
        type=click.FloatRange(ADAPTIVE_TARGET_MIN, ADAPTIVE_TARGET_MAX),
        default=None,
        hidden=True,
        help="Former spelling of --adaptive RATIO.",
    )(f)
    return click.option(
        "--source-crawl-sleep-us",
        type=click.IntRange(0, CRAWL_SLEEP_MAX),
        default=None,
        hidden=True,
        help="Former spelling of --crawl-sleep-us.",
    )(f)


def protection_of(max_bytes_per_second: int | None, flags: dict[str, Any]) -> SourceProtection:
    """The shared protection flags (shared_options.protection_options) with what the former spellings
    (legacy_protection_options) say, from a command's keyword arguments."""
    adaptive, no_adaptive, adaptive_target = flags["adaptive"], flags["no_adaptive"], flags["adaptive_target"]
    source_crawl_sleep_us = flags["source_crawl_sleep_us"]
    if no_adaptive and (adaptive_target is not None or adaptive != "on"):
        raise click.UsageError("--no-adaptive is --adaptive off: give one of them")
    protection = source_protection(
        max_bytes_per_second, "off" if no_adaptive else adaptive, flags["order"], flags["crawl_sleep_us"]
    )
    if adaptive_target is not None:
        if not protection.adaptive:
            raise click.UsageError("--adaptive-target goes with the adaptive guard on: --adaptive RATIO")
        protection = replace(protection, adaptive_target=adaptive_target)
    if source_crawl_sleep_us is not None:
        protection = replace(protection, crawl_sleep_us=source_crawl_sleep_us)
    return protection


def routing_of(tuning: dict[str, Any]) -> Routing:
    return Routing(
        tuning["node_key_format"], tuning["ketama_reps"], tuning["hash_delimiter"], tuning["placement"]
    )


def check_routing(routing: Routing, nodes: list, param_hint: str = "--placement") -> None:  # type: ignore[type-arg]
    """Refuse, before anything is sent, a placement that does not fit the destinations."""
    from cachewarm.datapath.placement import PlacementError

    try:
        routing.ring(nodes)
    except PlacementError as e:
        raise click.BadParameter(str(e), param_hint=param_hint) from e
    except ValueError as e:  # EVCache's ring: node keys that collide (several nodes on one host)
        raise click.BadParameter(str(e), param_hint="--node-key-format") from e


def workers_option(also: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--workers` (the populator's worker processes); `also`: what else the command sizes by it."""
    return click.option(
        "--workers",
        type=click.IntRange(min=1),
        default=default_workers,
        show_default="cores, 2..8",
        help="Populator worker processes, each writing one data file at a time." + also,
    )


DESTINATION_TIMEOUT_HELP = (
    "Seconds a destination may refuse connections or stay silent before the run fails (exit 6); "
    "meanwhile it says which one it waits for, and retries."
)
destination_timeout_option = click.option(
    "--destination-timeout",
    type=click.FloatRange(min=0),
    default=120.0,
    show_default=True,
    help=DESTINATION_TIMEOUT_HELP,
)
# warm and verify: the source and the target(s), named alike.
source_option = click.option(
    "--source",
    required=True,
    callback=one_node,
    help="Source memcached HOST[:PORT] (port 11211 by default).",
)
target_option = click.option(
    "--target",
    required=True,
    callback=nodes,
    help="Target memcached(s), HOST[:PORT][,HOST[:PORT]...] (port 11211 by default); several are "
    "routed by ketama.",
)
JSON_PROGRESS_HELP = (
    "Machine output: progress events and the summary as JSON lines on stdout, instead of the progress "
    "display (stderr) and the text summary."
)
