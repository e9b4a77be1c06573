"""The options and error handling the data path's commands share (`datapath/commands.py`): how keys
are routed, what a user may accept, the help texts of options several commands have, and the one-line
errors with the exit code of their kind (cachewarm/exitcodes.py)."""

from __future__ import annotations

import socket
import sys
from typing import Any, ClassVar, NoReturn

import click

from cachewarm.datapath.ketama import EVCACHE_NODE_KEY, Routing, parse_nodes
from cachewarm.exitcodes import ExitCode, code_of


def fail(e: BaseException, code: ExitCode | None = None) -> NoReturn:
    """One line on stderr and the exit code of the error's kind."""
    click.echo(f"error: {e}", err=True)
    sys.exit(int(code if code is not None else code_of(e)))


def interrupted() -> NoReturn:
    click.echo("error: interrupted; run the same command again to resume", err=True)
    sys.exit(int(ExitCode.INTERRUPTED))


def unreachable(e: BaseException) -> bool:
    return isinstance(e, (ConnectionError, TimeoutError, socket.gaierror))


def nodes(ctx: click.Context, param: click.Parameter, value: str) -> list:  # type: ignore[type-arg]
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
        ]
    ):
        f = click.option(flag, is_flag=True, help=text)(f)
    return f


class ByteRate(click.ParamType):
    """Bytes per second: an integer with an optional k, M, G suffix (powers of 1024), at least 1."""

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
        if not digits.isdigit() or int(digits) < 1:
            self.fail(f"{value!r} is not a byte rate (e.g. 50000000, 64M)", param, ctx)
        return int(digits) * self._UNITS[unit]


BYTE_RATE = ByteRate()


def routing_of(tuning: dict[str, Any]) -> Routing:
    return Routing(tuning["node_key_format"], tuning["ketama_reps"], tuning["hash_delimiter"])


WORKERS_HELP = "Populator worker processes, each writing one data file at a time."
WORKERS_DEFAULT = "cores, 2..8"
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
source_option = click.option("--source", required=True, help="Source memcached HOST:PORT.")
target_option = click.option(
    "--target",
    required=True,
    callback=nodes,
    help="Target memcached(s), HOST:PORT[,HOST:PORT...]; several are routed by ketama.",
)
JSON_PROGRESS_HELP = (
    "Machine output: progress events and the summary as JSON lines on stdout, instead of the progress "
    "display (stderr) and the text summary."
)
