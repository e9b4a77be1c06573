"""watch_clock against a scripted server clock: its bound always holds the true offset, a tick
bounded wide (this host descheduled between the readings around it) is watched again, a stalled
server is watched until it ticks — no timing. The shared vectors (tests/vectors/clock_watch.txt) pin
the rule for both watches: this one and the dumper's WatchClock (server_clock_test.cc reads them)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from cachewarm.datapath.meta import CLOCK_PATIENCE_S, CLOCK_TIGHT_S, CLOCK_WATCH_S, watch_clock


@dataclass
class ScriptedServer:
    """A memcached whose `stats time` is floor(w + beta) at this host's wall time w. A reading costs
    `cost(w) = (before, after)`: the time until the server reads its clock, then until the answer is
    in (a host that deschedules the reader after the server answered has a large `after`)."""

    beta: float
    t: float
    cost: Callable[[float], tuple[float, float]]
    stopped_at: int | None = None
    reads: int = 0

    def wall(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s

    def read(self) -> int:
        before, after = self.cost(self.t)
        self.reads += 1
        self.t += before
        now = math.floor(self.t + self.beta)
        self.t += after
        return now if self.stopped_at is None else self.stopped_at

    def watch(self) -> tuple[float, float, float]:
        start = self.t
        c = watch_clock(self.read, self.wall, self.sleep)
        return c.lo, c.hi, self.t - start


def quiet(_: float) -> tuple[float, float]:
    return 0.0005, 0.0005


def test_a_quiet_host_bounds_the_offset_to_a_few_ms_within_one_tick() -> None:
    s = ScriptedServer(beta=-0.4123, t=1_000_000.25, cost=quiet)
    lo, hi, took = s.watch()
    assert lo <= s.beta <= hi and hi - lo <= 0.004
    assert took <= 1.0


def test_a_wide_first_tick_is_watched_again_and_the_tight_one_kept() -> None:
    start = 1_000_000.25
    # Descheduled for 300 ms after each answer during the first second (the first tick falls there).
    s = ScriptedServer(beta=-0.4123, t=start, cost=lambda w: (0.0005, 0.3) if w < start + 1.0 else quiet(w))
    lo, hi, took = s.watch()
    assert lo <= s.beta <= hi and hi - lo <= CLOCK_TIGHT_S
    assert 1.0 < took <= 2.2


def test_a_host_always_slow_keeps_the_tightest_bound_and_gives_up_in_time() -> None:
    s = ScriptedServer(beta=0.2571, t=1_000_000.9, cost=lambda w: (0.001, 0.05))
    lo, hi, took = s.watch()
    assert lo <= s.beta <= hi and CLOCK_TIGHT_S < hi - lo <= 0.11  # two readings and a pause
    assert took <= CLOCK_PATIENCE_S + 0.11


def test_a_clock_that_never_ticks_keeps_the_one_reading_bound() -> None:
    s = ScriptedServer(beta=-0.4, t=1_000_000.5, cost=quiet, stopped_at=1_000_000)
    lo, hi, took = s.watch()
    assert hi - lo == pytest.approx(1.0, abs=0.002)
    assert CLOCK_PATIENCE_S <= took <= CLOCK_PATIENCE_S + 0.01


def test_a_stalled_server_is_watched_until_it_ticks() -> None:
    """No tick within CLOCK_WATCH_S (its main thread held up for 2 s): watched on, the tick after it
    resumes bounds its clock — where it now ticks, not where it stood."""
    m = VectorServer(
        beta=-0.4123, t=1_000_000.5, before=0.0005, after=0.0005, stall=(1_000_000.4, 1_000_002.7)
    )
    c = watch_clock(m.read, m.wall, m.sleep)
    assert c.hi - c.lo <= 0.01
    assert c.lo <= m.beta_after <= c.hi
    assert m.t - 1_000_000.5 > CLOCK_WATCH_S


VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "clock_watch.txt"


@dataclass
class VectorServer:
    """The shared vectors' server (tests/vectors/clock_watch.txt; server_clock_test.cc has the same):
    `stats time` is floor(w + beta) at wall time w; a reading costs `before` until the server reads
    its clock and `after` until the answer is in (`slow_after` instead while w < slow_until); during
    `stall` (wall times) its clock stands still, and after it the clock ticks where the main thread
    resumed (floor(w + beta_after), beta_after = beta moved to the stall's end)."""

    beta: float
    t: float
    before: float
    after: float
    slow_until: float = 0.0
    slow_after: float = 0.0
    stall: tuple[float, float] = (0.0, 0.0)

    @property
    def beta_after(self) -> float:
        # Ticking from the moment it resumed: its second turns at the stall's end (mod 1).
        end = self.stall[1]
        return self.beta - ((end + self.beta) % 1.0) if end else self.beta

    def time(self, w: float) -> int:
        s0, s1 = self.stall
        if s1 and s0 <= w < s1:
            return math.floor(s0 + self.beta)
        return math.floor(w + (self.beta_after if s1 and w >= s1 else self.beta))

    def wall(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s

    def read(self) -> int:
        slow = self.t < self.slow_until
        self.t += self.before
        now = self.time(self.t)
        self.t += self.slow_after if slow else self.after
        return now


def vector_rows() -> list[tuple[VectorServer, float, float]]:
    """(server, lo, hi) of each line: beta t before after slow_until slow_after stall_from stall_to lo hi."""
    rows = []
    for line in VECTORS.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        f = [float(x) for x in line.split()]
        rows.append((VectorServer(f[0], f[1], f[2], f[3], f[4], f[5], (f[6], f[7])), f[8], f[9]))
    return rows


def test_the_shared_vectors() -> None:
    rows = vector_rows()
    assert len(rows) >= 10
    for m, lo, hi in rows:
        c = watch_clock(m.read, m.wall, m.sleep)
        assert (c.lo, c.hi) == (pytest.approx(lo, abs=1e-6), pytest.approx(hi, abs=1e-6)), m
        truth = m.beta_after if m.stall[1] and m.t >= m.stall[1] else m.beta
        assert c.lo <= truth <= c.hi or c.hi - c.lo > 0.99, m


@pytest.mark.parametrize("seed", range(20))
def test_the_bound_always_holds_the_true_offset(seed: int) -> None:
    rng = random.Random(seed)

    def cost(_: float) -> tuple[float, float]:
        slow = rng.random() < 0.2
        return rng.uniform(0, 0.002), rng.uniform(0, 0.4 if slow else 0.002)

    s = ScriptedServer(beta=rng.uniform(-1.9, 0.99), t=1_000_000 + rng.random(), cost=cost)
    lo, hi, took = s.watch()
    assert lo <= s.beta <= hi, (lo, s.beta, hi)
    assert took <= CLOCK_PATIENCE_S + 0.41
