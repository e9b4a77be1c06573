"""Helpers for populator tests and benchmarks: dump directories, the populator in a thread."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cachewarm.datapath.format import Record
from cachewarm.datapath.meta import Item, MetaConnection
from cachewarm.datapath.metadump import list_keys
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.populate import PopulateConfig, PopulateSummary, Progress, populate
from cachewarm.testing.memcached import MemcachedServer

# How much earlier than at its source an item may end at a destination, in seconds of this host's
# wall clock (never later, at most ~1 s earlier: docs/reliability.md "How a TTL is carried").
EXPIRY_SLACK = 1.0
# How far the tests' own reading of an expiry (expiries) may be off: each server's clock is measured
# to a few ms.
READ_SLACK = 0.05


@dataclass(frozen=True)
class Slack:
    """How far a copy may end from its source's end, beyond READ_SLACK: at most `early` s before it,
    `late` s after it; `why` names what widened it past the TTL rule (ClockWatch)."""

    early: float = EXPIRY_SLACK
    late: float = 0.0
    why: str = ""


def expiry_within(src: float, dst: float, slack: Slack = Slack()) -> bool:
    """Whether an item that ends at `src` on its source (expiries; -1 = never) ending at `dst` on its
    destination keeps the TTL rule: never later, at most EXPIRY_SLACK earlier (or `slack`)."""
    if src == -1 or dst == -1:
        return src == dst
    return src - slack.early - READ_SLACK <= dst <= src + slack.late + READ_SLACK


def clock_slack(
    source_moved: float | None, destination_moved: float, source_headroom: float | None = None
) -> Slack:
    """The TTL rule's slack widened by each server's clock move during a test (ClockWatch; seconds, > 0:
    its clock went ahead, so its items now end that much sooner on the wall clock), in the direction
    each acts: a destination ahead ends copies earlier, a source ahead ends originals earlier (the
    copy later); a slip (< 0) the other way. Moves past READ_SLACK are named.

    `source_headroom`: the source's clock was on this host, so the dumper moved every expiry by its
    ceiling (docs/reliability.md "How a TTL is carried"), and this is how far below it the source's
    clock stands now (seconds): copies end that much earlier, and a move of the source's clock widens
    nothing — no copy may end after its source, whatever the source's clock did."""
    early, late, why = EXPIRY_SLACK, 0.0, []
    if source_headroom is not None:
        early += max(0.0, source_headroom)
        source_moved = None
    for role, moved in (("source", source_moved), ("destination", destination_moved)):
        if moved is None:
            continue
        ahead, behind = max(0.0, moved), max(0.0, -moved)
        early, late = (early + behind, late + ahead) if role == "source" else (early + ahead, late + behind)
        if abs(moved) > READ_SLACK:
            why.append(f"the {role}'s clock moved {moved:+.3f} s during the test")
    return Slack(early, late, "; ".join(why))


class ClockWatch:
    """Each server's clock against this host's, measured when the watch is made (in threads, so the
    test's loading overlaps it; `join` before the warm) and again by `slack`, after it.

    Why: memcached's clock is a timer re-armed after each tick. Its ticks slip ~1 ms later every
    second (1.1-1.2 ms/s measured here, idle or loaded) and, once the slip passes a second, its clock
    turns a second early; a main thread held up (a stalled or starved process) moves the tick to
    wherever it resumes. Every item on a server whose clock moved ends that much sooner or later on
    the wall clock. A destination whose clock moved ahead during a test holds copies shorter than the
    rule, a source whose clock moved ahead after a read holds an original shorter than its copy (and
    the other way round for a slip). Neither is the warm's doing: the check widens by each measured
    move, in the direction it acts, and names the moves past READ_SLACK (clock_slack). (The touch
    scenarios use DONE's clock instead, test_exactness_faults._late_allowed: a slip before the read of
    a touched key costs a whole second, not the slip.)"""

    def __init__(self, *servers: MemcachedServer) -> None:
        self._before: dict[int, float] = {}
        self._after: dict[int, float] = {}
        self._ceiling: dict[int, float | None] = {}
        self._thread = threading.Thread(target=lambda: self._before.update(clock_aheads(*servers)))
        self._thread.start()

    def join(self) -> ClockWatch:
        self._thread.join()
        return self

    def slack(self, source: MemcachedServer | None, destination: MemcachedServer) -> Slack:
        """The slack for copies from `source` (None: a dump's records, on this host's clock) to
        `destination`, measuring each clock again (`ahead` then gives it, for `expiries`)."""
        self.join()
        servers = [s for s in (source, destination) if s is not None]
        after = clock_aheads(*servers, ceilings=self._ceiling)
        self._after = after
        for srv in servers:
            assert srv.port in self._before, f"{srv.address}: its clock was not measured before the warm"
        moved = {srv.port: self._after[srv.port] - self._before[srv.port] for srv in servers}
        ceiling = None if source is None else self._ceiling.get(source.port)
        headroom = None if source is None or ceiling is None else ceiling - after[source.port]
        return clock_slack(None if source is None else moved[source.port], moved[destination.port], headroom)

    def ahead(self, srv: MemcachedServer) -> float:
        """`srv`'s clock against this host's as `slack` last measured it."""
        return self._after[srv.port]

    def moved(self, srv: MemcachedServer) -> float:
        """How far `srv`'s clock moved from the watch's start to `slack`'s measurement (seconds)."""
        return self._after[srv.port] - self._before[srv.port]


def node(srv: MemcachedServer) -> Node:
    return Node(srv.host, srv.port)


def records(n: int, prefix: bytes = b"k", size: int = 100, start: int = 0) -> list[Record]:
    return [Record(b"%s%d" % (prefix, i), i, -1, b"v%d-" % i + b"x" * size) for i in range(start, start + n)]


def fetch(srv: MemcachedServer, keys: list[bytes]) -> dict[bytes, Item]:
    with MetaConnection(srv.host, srv.port) as r:
        return r.get_many(keys)


def clock_ahead(srv: MemcachedServer) -> float:
    """The server's clock minus this host's, seconds, to a few ms (MetaConnection.measure_clock)."""
    with MetaConnection(srv.host, srv.port) as r:
        clock = r.measure_clock()
    return (clock.lo + clock.hi) / 2


def clock_and_ceiling(srv: MemcachedServer, patience: float = 8.0) -> tuple[float, float | None]:
    """The server's clock against this host's (as clock_ahead) and its ceiling, or None when no tick
    settled it within `patience` s. A test's own look (the dumper's is WatchClock, server_clock.h):
    memcached's time is floor(the monotonic clock at its tick) + an integer K fixed at its start, so a
    tick seen between two readings gives K, and the ceiling = K + (monotonic - wall). Readings that
    straddle a whole monotonic second leave K one of two: the next ticks are watched until one
    settles it (the higher K would excuse copies a second short). A server of this host only (the
    same monotonic clock)."""
    ahead: float | None = None
    k_lo, k_hi = -math.inf, math.inf
    with MetaConnection(srv.host, srv.port) as r:
        a, ma = time.time(), time.monotonic()
        last = int(r.stats()["time"])
        deadline = ma + patience
        while time.monotonic() < deadline:
            time.sleep(0.002)
            a1, m1 = time.time(), time.monotonic()
            now = int(r.stats()["time"])
            b, mb = time.time(), time.monotonic()
            if now != last:
                k_lo, k_hi = max(k_lo, now - math.floor(mb)), min(k_hi, now - math.floor(ma))
                if ahead is None and b - a <= 0.02:
                    ahead = now - (a + b) / 2
                if ahead is not None and k_lo == k_hi:
                    return ahead, k_hi + (mb - b)
            a, ma, last = a1, m1, now
    return (clock_ahead(srv) if ahead is None else ahead), None


def clock_aheads(
    *servers: MemcachedServer, ceilings: dict[int, float | None] | None = None
) -> dict[int, float]:
    """clock_ahead of each server by port, measured at once (each waits up to a second for a tick);
    with `ceilings`, each server's ceiling (clock_and_ceiling) goes there."""
    out: dict[int, float] = {}

    def look(s: MemcachedServer) -> None:
        if ceilings is None:
            out[s.port] = clock_ahead(s)
        else:
            out[s.port], ceilings[s.port] = clock_and_ceiling(s)

    threads = [threading.Thread(target=look, args=(s,)) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def expiries(srv: MemcachedServer, keys: list[bytes], ahead: float | None = None) -> dict[bytes, float]:
    """Each present key's end as a moment of this host's wall clock (-1 = never), to a few ms: `mg t`
    read between two equal `stats time`s, plus that time, less the server's clock against ours
    (`ahead`, else measured after the reading: a short TTL does not run out meanwhile). Comparable
    across servers whatever their clocks."""
    with MetaConnection(srv.host, srv.port) as r:
        while True:
            before = int(r.stats()["time"])
            got = r.get_many(keys)
            if int(r.stats()["time"]) == before:
                break
    if ahead is None:
        ahead = clock_ahead(srv)
    return {k: -1 if it.ttl == -1 else before + int(it.ttl or 0) - ahead for k, it in got.items()}


def listed_expiries(srv: MemcachedServer, ahead: float | None = None) -> dict[bytes, float]:
    """Every key's end as `expiries` gives it, from the server's listing (metadump's exp: the only
    expiry of a key no meta command can name)."""
    if ahead is None:
        ahead = clock_ahead(srv)
    return {k: -1 if e == -1 else e - ahead for k, e in list_keys(srv.host, srv.port)}


def config(src: Path, tmp: Path, dests: list[MemcachedServer], **kw: object) -> PopulateConfig:
    base: dict[str, object] = {
        "source_dir": src,
        "destinations": [node(d) for d in dests],
        "state_file": tmp / "state" / "populate.json",
        "workers": 2,
        "poll_interval": 0.05,
        "bad_file_timeout": 30.0,
        "destination_timeout": 20.0,
        "node_key_format": "{host}:{port}",
        "progress_interval": 0.0,
    }
    base.update(kw)
    # Tests of other things than the re-check (docs/reliability.md "Live traffic") give no source.
    base.setdefault("accept_no_recheck", base.get("source") is None)
    return PopulateConfig(**base)  # type: ignore[arg-type]


@dataclass
class Background:
    """The populator running in a thread, so a test can change the directory under it."""

    cfg: PopulateConfig
    events: list[Progress] = field(default_factory=list)
    summary: PopulateSummary | None = None
    error: BaseException | None = None
    thread: threading.Thread | None = None

    def start(self) -> Background:
        def run() -> None:
            try:
                self.summary = populate(self.cfg, self.events.append)
            except BaseException as e:
                self.error = e

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        return self

    def wait_for(self, pred: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            if self.error is not None:
                raise AssertionError(f"populator failed: {self.error}")
            assert time.monotonic() < deadline, "timed out waiting"
            time.sleep(0.02)

    def rounds(self) -> int:
        return max((e.round for e in self.events), default=0)

    def join(self, timeout: float = 60.0) -> None:
        assert self.thread is not None
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "populator did not finish"
