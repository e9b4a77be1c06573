"""The clocks watched while the populate runs: each destination's offset against this host's, which
must not move (every T went out moved by it), and the source's clock from this host, looked at again
every CLOCK_REMEASURE_S on a thread of its own (`hostclock` says what a look means)."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from cachewarm.datapath.nodes import Node
from cachewarm.datapath.populate import hostclock
from cachewarm.datapath.populate.config import PopulateError
from cachewarm.datapath.populate.destinations import CLOCK_REMEASURE_S, DestinationProbe

# Two whole-second readings of one destination's clock offset differ by up to 1 (rounding) and ~1
# (memcached's clock ticks once a second); more is a clock that moved.
CLOCK_TOLERANCE = 2


@dataclass
class DestinationClocks:
    # (address, server identity) -> its clock offset when first seen.
    base: dict[tuple[str, tuple[int, int] | None], int] = field(default_factory=dict)

    def check(self, offsets: dict[str, int], identities: dict[str, tuple[int, int]]) -> None:
        """Every T went out moved by its destination's clock offset as the worker measured it at
        connect. An offset that moved by more than its own rounding (a clock step, a paused VM) means
        the items written before expire that much off their TTL: refuse, naming the node."""
        for addr, offset in offsets.items():
            ident = identities.get(addr)
            base = self.base.setdefault((addr, ident), offset)
            if abs(offset - base) > CLOCK_TOLERANCE:
                raise PopulateError(
                    f"destination {addr}'s clock moved {offset - base:+d} s against this host's during the "
                    f"populate (offset {base:+d} s, now {offset:+d} s): the items written to it before "
                    "expire that much off their TTL; warm it again"
                )


@dataclass
class SourceClockWatch:
    """The source memcached's clock from this host (hostclock.check and hostclock.shortening), when
    a source is given and reached. A look waits up to a second for a tick: the loop goes on meanwhile."""

    source: Node | None
    clock: hostclock.SourceClock | None = None
    # When it was last looked at (monotonic clock; 0: never), and the look under way.
    _measured: float = 0.0
    _look: Future[hostclock.SourceClock | None] | None = None
    _looks: ThreadPoolExecutor | None = None

    def measure(self) -> None:
        """At once at the start, then again, in the background, once CLOCK_REMEASURE_S have passed
        (its timer may have slipped or jumped since: files dumped before a jump are shortened by it).
        A look's result is taken when it is done."""
        if self.source is None:
            return
        if self._look is not None:
            if not self._look.done():
                return
            self.clock = self._look.result()
            self._look = None
        now = time.monotonic()
        if not self._measured:
            self._measured = now
            self.clock = hostclock.measure_source(self.source)
        elif now - self._measured >= CLOCK_REMEASURE_S:
            self._measured = now
            if self._looks is None:
                self._looks = ThreadPoolExecutor(max_workers=1, thread_name_prefix="source-clock")
            self._look = self._looks.submit(hostclock.measure_source, self.source, self.clock)

    def close(self) -> None:
        if self._looks is not None:
            self._looks.shutdown(wait=False, cancel_futures=True)

    def detail(self, probe: DestinationProbe) -> str:
        """Each destination's clock against this host's (and the source's, when measured)."""
        parts = [f"{a} {lo:+.3f} s" for (a, _), lo in probe.clock_items()]
        s = self.clock
        if s is not None:
            parts.append(f"source {s.address} {s.clock.lo:+.3f} .. {s.clock.hi:+.3f} s")
        elif self.source is not None:
            parts.append(f"source {self.source.address} not reached: the hosts' clocks are assumed to agree")
        return "clocks against this host's: " + ", ".join(parts)
