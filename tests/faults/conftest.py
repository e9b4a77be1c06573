"""Fault-suite fixtures and the closing tables: (scenario, memcached release, trials, lost, corrupt,
leaked), and for the live-operations scenarios (test_liveops_faults.py) their own figures.

The table is printed at the end of the pytest run (terminal summary) and, when FAULT_REPORT names a
file, written there as Markdown (`make faults` puts it in build/faults.md)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.faults.harness import LiveTally, Tally

_ROWS = pytest.StashKey[list[Tally]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_ROWS] = []


# Under pytest-xdist the scenarios run in worker processes: each worker hands its rows to the
# controller (plain data: execnet carries no objects), which prints the one table.
def pytest_sessionfinish(session: pytest.Session) -> None:
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        rows = session.config.stash.get(_ROWS, [])
        out["fault_rows"] = [(isinstance(r, LiveTally), dataclasses.asdict(r)) for r in rows]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    rows = getattr(node, "workeroutput", {}).get("fault_rows", [])
    node.config.stash[_ROWS].extend((LiveTally if live else Tally)(**r) for live, r in rows)


@pytest.fixture
def tally(request: pytest.FixtureRequest) -> Callable[..., Tally]:
    """`t = tally("scenario")`: a Tally that ends up in the closing table, its scenario named with the
    memcached release it ran against (when the test is on the version matrix); a test expected to
    fail (xfail) is listed as a known bug with the xfail's reason."""
    params = getattr(request.node, "callspec", None)
    version = params.params.get("memcached_version") if params is not None else None
    xfail = request.node.get_closest_marker("xfail")

    def make(scenario: str, known_bug: str | None = None, kind: type[Tally] = Tally) -> Tally:
        if known_bug is None and xfail is not None:
            known_bug = str(xfail.kwargs.get("reason", "xfail"))
        t = kind(scenario, known_bug=known_bug, release=version)
        request.config.stash[_ROWS].append(t)
        return t

    return make


@pytest.fixture
def live_tally(tally: Callable[..., Tally]) -> Callable[..., LiveTally]:
    """`t = live_tally("scenario")`: a LiveTally, listed in the live-operations table."""

    def make(scenario: str, known_bug: str | None = None) -> LiveTally:
        t = tally(scenario, known_bug, kind=LiveTally)
        assert isinstance(t, LiveTally)
        return t

    return make


def _result(r: Tally) -> str:
    if r.known_bug:
        return f"known bug (xfail): {r.known_bug}"
    return "ok" if r.clean else "FAIL"


def _ordered(rows: list[Tally]) -> list[Tally]:
    """In the order the scenarios ran, each scenario's releases together."""
    order: dict[str, int] = {}
    for r in rows:
        order.setdefault(r.scenario, len(order))
    return sorted(rows, key=lambda r: (order[r.scenario], r.release or ""))


def table(rows: list[Tally]) -> str:
    """One row per scenario and memcached release ("—": the scenario starts no server), in the
    order the scenarios ran, each scenario's releases together; the live-operations scenarios in a
    second table of their own figures."""
    out: list[str] = []
    plain = [r for r in rows if not isinstance(r, LiveTally)]
    if plain:
        out += [
            "| scenario | memcached | trials | lost | corrupt | leaked | result |",
            "|---|---|---:|---:|---:|---:|---|",
        ]
    for r in _ordered(plain):
        figures = f"{r.trials} | {r.lost} | {r.corrupt} | {r.leaked}"
        out.append(f"| {r.scenario} | {r.release or '—'} | {figures} | {_result(r)} |")
    live = [r for r in rows if isinstance(r, LiveTally)]
    if live:
        out += [
            *([""] if out else []),
            "| live operations | memcached | trials | deleted alive | outliving | counters behind (ahead) "
            "| fresher lost | lost | counted missing | exit codes | result |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
        ]
        for r in _ordered(live):
            figures = (
                f"{r.trials} | {r.deleted_alive} | {r.outliving} | {r.counters_behind} ({r.counters_ahead})"
                f" | {r.fresher_lost} | {r.lost} | {r.counted_missing} | {r.exit_codes()}"
            )
            out.append(f"| {r.scenario} | {r.release or '—'} | {figures} | {_result(r)} |")
    return "\n".join(out)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    rows = config.stash.get(_ROWS, [])
    if not rows:
        return
    terminalreporter.section("fault scenarios")
    terminalreporter.write_line(table(rows))
    report = os.environ.get("FAULT_REPORT")
    if report:
        Path(report).parent.mkdir(parents=True, exist_ok=True)
        Path(report).write_text(table(rows) + "\n")
