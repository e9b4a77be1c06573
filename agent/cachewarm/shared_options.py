"""The options `cachewarm warm` / `verify` / `populate` and `cachewarm agent` share: one name, type,
default and help each, declared here once (tests/cli/test_shared_options.py holds both CLIs to it).

The source's protection is one vocabulary everywhere, the one the dump agent's SSM document speaks:
`--adaptive on|off|RATIO`, `--crawl-sleep-us N|server`, `--order recency|crawl`. The adaptive guard is
on by default wherever a dump reads a source: a warm by hand reads a production source as often as the
controller does. A `cachewarm warm` whose source and targets are all loopback addresses (a lab warm, the
demo, the tests) leaves it off unless asked: the source's latency there measures the warm's own
populator and destination on the same cores, not harm to anyone's clients.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from cachewarm.cli_types import Matching, MatchingInt
from cachewarm.contract import inputs
from cachewarm.datapath.dumper import SourceProtection

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

mode_option: Decorator = click.option(
    "--mode",
    type=click.Choice(["add", "set"]),
    default=inputs.DEFAULT_MODE,
    show_default=True,
    help="add: never replace a value already in the destination (live traffic wins); set: overwrite.",
)
threads_option: Decorator = click.option(
    "--threads",
    type=MatchingInt(inputs.THREADS, 1, inputs.THREADS_MAX),
    default=None,
    help=f"Dumper worker threads (connections to the source memcached), 1..{inputs.THREADS_MAX}.",
    show_default="the dumper's: 2",
)
ttl_tolerance_option: Decorator = click.option(
    "--ttl-tolerance",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="Seconds a destination item's remaining TTL may differ from the source's.",
)

ADAPTIVE_HELP = (
    "Protect the source's live clients: on, the dumper probes the source's latency and backs off its "
    f"rate, batch size and crawl pace while it is above {inputs.DEFAULT_ADAPTIVE_TARGET}x its latency "
    f"before the dump; RATIO ({inputs.ADAPTIVE_TARGET_MIN}..{inputs.ADAPTIVE_TARGET_MAX:g}, e.g. 1.2): on, "
    "backing off above RATIO x instead; off: only the fixed limits. `cachewarm warm` between memcacheds "
    "all on this machine (loopback) leaves it off unless given: it would measure the warm's own processes."
)
# Without a value (`--adaptive` alone, as the flag once was) it means on.
adaptive_option: Decorator = click.option(
    "--adaptive",
    type=Matching(
        inputs.ADAPTIVE,
        f"on, off or a ratio {inputs.ADAPTIVE_TARGET_MIN}..{inputs.ADAPTIVE_TARGET_MAX:g} (2 decimals)",
    ),
    default=inputs.DEFAULT_ADAPTIVE,
    is_flag=False,
    flag_value="on",
    metavar="on|off|RATIO",
    show_default=True,
    help=ADAPTIVE_HELP,
)
order_option: Decorator = click.option(
    "--order",
    type=click.Choice(["recency", "crawl"]),
    default=inputs.DEFAULT_ORDER,
    show_default=True,
    help="recency: the most recently used items first (the listing ends before the first fetch); "
    "crawl: in the crawl's order, fetching while it lists.",
)
crawl_sleep_option: Decorator = click.option(
    "--crawl-sleep-us",
    type=Matching(inputs.CRAWL_SLEEP, f"server or microseconds 0..{inputs.CRAWL_SLEEP_MAX}"),
    default=inputs.DEFAULT_CRAWL_SLEEP,
    metavar="N|server",
    show_default=True,
    help="Pace the source's own crawl: memcached's `lru_crawler sleep` (microseconds per 1000 items "
    f"listed, 0..{inputs.CRAWL_SLEEP_MAX}) while the dump runs, restored afterwards; with the adaptive "
    "guard the floor it backs off from; server: leave the server's own.",
)

# What tests/cli/test_shared_options.py checks command by command: the option's name -> its declaration.
SHARED: dict[str, Decorator] = {
    "--mode": mode_option,
    "--threads": threads_option,
    "--ttl-tolerance": ttl_tolerance_option,
    "--adaptive": adaptive_option,
    "--order": order_option,
    "--crawl-sleep-us": crawl_sleep_option,
}


def protection_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The dumper's protection of the source: the adaptive guard, the order, the crawl's pace."""
    for opt in (crawl_sleep_option, order_option, adaptive_option):
        f = opt(f)
    return f


def source_protection(
    max_bytes_per_second: int | None, adaptive: str, order: str, crawl_sleep_us: str
) -> SourceProtection:
    """The protection flags, as given (strings), as the dumper's SourceProtection."""
    return SourceProtection(
        max_bytes_per_second=max_bytes_per_second,
        adaptive=adaptive != "off",
        adaptive_target=None if adaptive in ("on", "off") else float(adaptive),
        order=order,
        crawl_sleep_us=None if crawl_sleep_us == "server" else int(crawl_sleep_us),
    )
