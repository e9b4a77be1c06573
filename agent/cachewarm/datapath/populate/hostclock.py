"""The source memcached's clock seen from this host (files path).

A data file's expiries are the source's, moved onto the dumper host's wall clock by the header's
`source_clock_ms` (docs/data-format.md section 2.1): the ceiling of the source's clock when the dumper
runs beside it (its clock can never be ahead of it), else the upper bound the dumper measured. The
populator moves them on to each destination's clock as measured from this host. Two things make that
late, and both show as the source's clock, measured from here, ahead of `source_clock_ms`:

- the source's clock went ahead since the file's measurement (memcached's timer slips, and jumps a
  whole second when the slip passes one; a stalled main thread moves its tick): only a file moved by a
  measured bound, never one moved by the ceiling;
- this host's clock is behind the dumper host's.

The two cannot be told apart and need not be: a source seen from here up to s seconds ahead ends its
items up to s seconds sooner on this host's clock than the file says, so every expiry is shortened by
the most any look from here saw (`shortening`), never lengthened. The source is looked at when the
populate starts and every CLOCK_REMEASURE_S after (the loop).

What memcached's own clock cannot explain is refused, naming the node and the offset: its clock stays
below its ceiling and less than a second under it (a measured bound: a second either way of the
measurement, its spread included), so the source seen from here outside that window by more than
HOST_CLOCK_TOLERANCE_S (and a stall's second on the low side) is a disagreement of the two hosts'
clocks (NTP / Amazon Time Sync), never noise. Every file's dump_start_ms must also not be ahead of this
host's clock (this host behind: every TTL would arrive longer).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from cachewarm.datapath import format as df
from cachewarm.datapath.meta import MetaConnection, ServerClock
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.wire import DestinationUnavailable

# The two hosts' clocks may disagree by this much before a populate is refused (what they disagree by
# within it, the shortening takes back).
HOST_CLOCK_TOLERANCE_S = 1.0
# How far below its window a source's clock may be seen: its main thread held up longer than a watch
# waits (memcached's time stands still meanwhile).
STALL_S = 1.0
# The spread of a measurement whose file does not say (an older dumper's): a one-reading bound.
UNKNOWN_SPREAD_S = 1.1


@dataclass(frozen=True)
class SourceClock:
    """The source memcached's clock against this host's: the latest look, and the highest upper bound
    any look of this populate gave (what the shortening uses: a clock that slipped back since never
    lengthens a TTL)."""

    address: str
    pid: int
    started: int
    clock: ServerClock
    hi_max: float


def measure_source(node: Node, before: SourceClock | None = None, timeout: float = 5.0) -> SourceClock | None:
    """The source's clock from this host (`before`: the last look, whose highest bound is kept for the
    same server), or `before` when it cannot be reached (None: nothing to compare)."""
    try:
        with MetaConnection(node.connect_host, node.port, timeout) as c:
            ident = c.identity()
            clock = c.measure_clock()
    except (DestinationUnavailable, OSError):
        return before
    hi_max = clock.hi
    if before is not None and before.pid == ident.pid and abs(before.started - ident.started) <= 2:
        hi_max = max(hi_max, before.hi_max)
    return SourceClock(node.address, ident.pid, ident.started, clock, hi_max)


def shortening(header: df.Header, source: SourceClock | None) -> float:
    """Seconds every expiry of this file is brought forward by: how far ahead of the file's
    `source_clock_ms` this host has seen the source's clock (0: never ahead, or not measured)."""
    if source is None or header.expiry_fraction is None:
        return 0.0
    return max(0.0, source.hi_max - header.source_clock_ms / 1000)


def window(header: df.Header) -> tuple[float, float]:
    """Where the source's clock may be against the dumper host's, whenever looked at: under its
    ceiling and less than a second below it; or a second either way of the measured bounds."""
    top = header.source_clock_ms / 1000
    if header.clock_ceiling:
        return top - 1.0, top
    spread = header.source_clock_spread_ms
    low = top - (UNKNOWN_SPREAD_S if spread is None else spread / 1000)
    return low - 1.0, top + 1.0


def check(header: df.Header, source: SourceClock | None, now: float | None = None) -> str | None:
    """Why this file's expiries cannot be kept on this host's clock, or None."""
    now = time.time() if now is None else now
    ahead = header.dump_start_ms / 1000 - now
    if ahead > HOST_CLOCK_TOLERANCE_S:
        return (
            f"this host's clock is at least {ahead:.1f} s behind the clock of the host that dumped node "
            f"{header.node} (its dump began at {header.dump_start_ms / 1000:.0f} by that clock, {now:.0f} "
            "by this one): every TTL would arrive that much longer. Synchronize both hosts' clocks (NTP, "
            "Amazon Time Sync) and populate again"
        )
    if source is None or header.expiry_fraction is None:
        return None
    low, high = window(header)
    seen = source.clock
    if seen.lo > high + HOST_CLOCK_TOLERANCE_S:
        off, side = high - seen.lo, "behind"
    elif seen.hi < low - STALL_S - HOST_CLOCK_TOLERANCE_S:
        off, side = low - seen.hi, "ahead of"
    else:
        return None
    return (
        f"this host's clock is {off:+.1f} s off the clock of the host that dumped node {header.node}, at "
        f"least {abs(off):.1f} s {side} it, measured against the source memcached {source.address} (its "
        f"clock is {low:+.3f} .. {high:+.3f} s off that host's, {seen.lo:+.3f} .. {seen.hi:+.3f} s off this "
        "one's): every TTL would arrive that much off. Synchronize both hosts' clocks (NTP, Amazon Time "
        "Sync) and populate again"
    )
