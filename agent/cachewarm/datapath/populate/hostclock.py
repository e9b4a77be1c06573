"""The dumper host's clock against this one's (issue 21, files path). A data file's expiries are on
the dumper host's wall clock, and the populator moves them onto each destination's clock as measured
against its own host's wall clock: the two host clocks are taken to agree (NTP / Amazon Time Sync,
docs/reliability.md "How a TTL is carried"). Where that can be checked, it is, and a disagreement
larger than HOST_CLOCK_TOLERANCE_S is refused, naming the node and the offset:

- every file: its header's dump_start_ms (the dumper host's clock when the dump began) may not be
  ahead of this host's clock (this host behind: every TTL would arrive longer);
- when the populator knows the source memcached (a warm does) and reaches it: the source's clock
  against this host's, against the one the dumper recorded against its host's (the header's
  source_clock_ms) - the same memcached measured from both hosts gives the hosts' offset, either sign.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from cachewarm.datapath import format as df
from cachewarm.datapath.ketama import Node
from cachewarm.datapath.meta import DestinationUnavailable, MetaConnection, ServerClock

# More than this between the two hosts' clocks is refused (the measurements are good to a few ms;
# memcached's own 1-s timer may move its tick by a few ms more between the two looks).
HOST_CLOCK_TOLERANCE_S = 1.0


@dataclass(frozen=True)
class SourceClock:
    """The source memcached's clock against this host's, measured at the populate's start."""

    address: str
    pid: int
    started: int
    clock: ServerClock


def measure_source(node: Node, timeout: float = 5.0) -> SourceClock | None:
    """The source's clock from this host, or None when it cannot be reached (nothing to compare)."""
    try:
        with MetaConnection(node.connect_host, node.port, timeout) as c:
            ident = c.identity()
            clock = c.measure_clock()
    except (DestinationUnavailable, OSError):
        return None
    return SourceClock(node.address, ident.pid, ident.started, clock)


def check(header: df.Header, source: SourceClock | None, now: float | None = None) -> str | None:
    """Why this file's expiries cannot be kept exact on this host's clock, or None."""
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
    # The same memcached from both hosts: (its clock - dumper host's) - (its clock - this host's).
    offset = header.source_clock_ms / 1000 - source.clock.hi
    if abs(offset) > HOST_CLOCK_TOLERANCE_S + (source.clock.hi - source.clock.lo):
        return (
            f"this host's clock is {offset:+.1f} s off the clock of the host that dumped node {header.node}, "
            f"measured against the source memcached {source.address} (its clock is "
            f"{header.source_clock_ms / 1000:+.3f} s off that host's, {source.clock.hi:+.3f} s off this "
            "one's): every TTL would arrive that much off. Synchronize both hosts' clocks (NTP, Amazon "
            "Time Sync) and populate again"
        )
    return None
