"""A clock the tests advance (Wait states, pacing sleeps, assumed call latencies)."""

from __future__ import annotations


class FakeClock:
    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
