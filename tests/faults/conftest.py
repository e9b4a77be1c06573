"""Fault-suite fixtures and the closing table (scenario, memcached release, trials, lost, corrupt,
leaked).

The table is printed at the end of the pytest run (terminal summary) and, when FAULT_REPORT names a
file, written there as Markdown (`make faults` puts it in build/faults.md)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.faults.harness import Tally

_ROWS = pytest.StashKey[list[Tally]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_ROWS] = []


@pytest.fixture
def tally(request: pytest.FixtureRequest) -> Callable[..., Tally]:
    """`t = tally("scenario")`: a Tally that ends up in the closing table, its scenario named with the
    memcached release it ran against (when the test is on the version matrix); a test expected to
    fail (xfail) is listed as a known bug with the xfail's reason."""
    params = getattr(request.node, "callspec", None)
    version = params.params.get("memcached_version") if params is not None else None
    xfail = request.node.get_closest_marker("xfail")

    def make(scenario: str, known_bug: str | None = None) -> Tally:
        if known_bug is None and xfail is not None:
            known_bug = str(xfail.kwargs.get("reason", "xfail"))
        t = Tally(scenario, known_bug=known_bug, release=version)
        request.config.stash[_ROWS].append(t)
        return t

    return make


def table(rows: list[Tally]) -> str:
    """One row per scenario and memcached release ("—": the scenario starts no server), in the
    order the scenarios ran, each scenario's releases together."""
    out = [
        "| scenario | memcached | trials | lost | corrupt | leaked | result |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    order: dict[str, int] = {}
    for r in rows:
        order.setdefault(r.scenario, len(order))
    for r in sorted(rows, key=lambda r: (order[r.scenario], r.release or "")):
        result = "ok" if r.clean else "FAIL"
        if r.known_bug:
            result = f"known bug (xfail): {r.known_bug}"
        figures = f"{r.trials} | {r.lost} | {r.corrupt} | {r.leaked}"
        out.append(f"| {r.scenario} | {r.release or '—'} | {figures} | {result} |")
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
