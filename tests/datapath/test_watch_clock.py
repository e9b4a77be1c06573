"""watch_clock against a scripted server clock: its bound always holds the true offset, and a tick
bounded wide (this host descheduled between the readings around it) is watched again — no timing."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

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
    assert CLOCK_WATCH_S <= took <= CLOCK_WATCH_S + 0.01


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
