"""Shared fixtures: real memcached servers on 127.0.0.1, started and stopped by each test, of the
releases a test names (the version matrix).

The matrix: the data-path tests run against every release in MATRIX. A test that uses a server
(`memcached`, `memcached_binary`) takes its release from the `memcached_version` fixture, which is
parametrized here:
- `@pytest.mark.memcached_versions("1.6.45", ...)` on a test (or module) names the releases it needs;
- otherwise tests under tests/datapath, tests/dumper and tests/faults get all of MATRIX (slow tests,
  marked `slow`, one release: DEFAULT_VERSION), and every other test DEFAULT_VERSION;
- `CACHEWARM_MEMCACHED_VERSIONS=1.6.45,...` narrows every list to those releases (local runs).
A release whose binary is missing fails the test (`make test` builds them first:
`make memcached-versions`); `CACHEWARM_MEMCACHED_MISSING=skip` skips instead, with the reason.
The matrix's items carry the `memcached_matrix` mark: `make test-matrix` runs them alone.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cachewarm.testing.memcached import MemcachedNotFound, MemcachedServer
from cachewarm.testing.memcached import memcached_binary as find_binary

REPO = Path(__file__).resolve().parent.parent
VECTORS = REPO / "tests" / "vectors"

# Debian 12's package, Debian 13's (trixie), the current release.
MATRIX = ("1.6.18", "1.6.38", "1.6.45")
DEFAULT_VERSION = "1.6.18"
MATRIX_DIRS = ("datapath", "dumper", "faults")
# The warm's two data paths (`warm_mode`): through data files, and the stream mode (`--stream`: the
# dumper writes straight to the targets). Stream variants run on these releases only (CI time; the
# writes are the same meta commands on every release): CACHEWARM_STREAM_VERSIONS=all widens it.
WARM_MODES = ("files", "stream")
STREAM_VERSIONS = (DEFAULT_VERSION,)


def stream_versions() -> tuple[str, ...]:
    """The releases stream-only tests run on: STREAM_VERSIONS, or every release of MATRIX with
    CACHEWARM_STREAM_VERSIONS=all (`make faults` sets it)."""
    return MATRIX if os.environ.get("CACHEWARM_STREAM_VERSIONS") == "all" else STREAM_VERSIONS


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "memcached_versions(*versions): the memcached releases this test runs against"
    )
    config.addinivalue_line("markers", "memcached_matrix: on the version matrix (`make test-matrix`)")


def _versions(metafunc: pytest.Metafunc) -> tuple[list[str], bool]:
    """(the releases of this test, whether it is on the matrix: named releases or a matrix dir)."""
    marker = metafunc.definition.get_closest_marker("memcached_versions")
    rel = Path(str(metafunc.definition.path)).relative_to(REPO / "tests").parts
    if marker is not None:
        versions, matrix = list(marker.args), True
    elif rel and rel[0] in MATRIX_DIRS:
        slow = metafunc.definition.get_closest_marker("slow") is not None
        versions, matrix = [DEFAULT_VERSION] if slow else list(MATRIX), True
    else:
        versions, matrix = [DEFAULT_VERSION], False
    only = os.environ.get("CACHEWARM_MEMCACHED_VERSIONS")
    if only:
        versions = [v for v in versions if v in only.split(",")]
    return versions, matrix


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "warm_mode" in metafunc.fixturenames:
        metafunc.parametrize("warm_mode", WARM_MODES)
    if "memcached_version" not in metafunc.fixturenames:
        return
    params = []
    versions, matrix = _versions(metafunc)
    for v in versions:
        marks: list[pytest.MarkDecorator] = []
        if matrix:
            marks.append(pytest.mark.memcached_matrix)
        params.append(pytest.param(v, marks=marks, id=v))
    if not params:  # CACHEWARM_MEMCACHED_VERSIONS excludes every release this test needs
        params = [pytest.param(None, marks=pytest.mark.skip(reason="release not selected"), id="none")]
    metafunc.parametrize("memcached_version", params)


def _fault_variant(item: pytest.Item) -> str | None:
    """A fault scenario's variant: its test and every parameter but the release (None: not a fault
    scenario on the release matrix)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if params.get("memcached_version") is None:
        return None
    if not Path(str(item.path)).is_relative_to(REPO / "tests" / "faults"):
        return None
    others = sorted((k, str(v)) for k, v in params.items() if k != "memcached_version")
    return f"{item.nodeid.split('[')[0]}{others}"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups (_xdist_groups)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Stream variants only on STREAM_VERSIONS (unless CACHEWARM_STREAM_VERSIONS=all); each fault
    scenario variant (tests/faults) on one of its releases, picked by hashing the variant, so the
    scenarios spread over every release and a variant keeps its release from run to run (unless
    CACHEWARM_FAULT_RELEASES=all, as `make faults` sets: every scenario on every release). CI time: the
    scenarios wait out real TTLs and rate-limited dumps, ~12 min when each ran on every release."""
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        off = (
            os.environ.get("CACHEWARM_STREAM_VERSIONS") != "all"
            and params.get("warm_mode") == "stream"
            and params.get("memcached_version", DEFAULT_VERSION) not in (None, *STREAM_VERSIONS)
        )
        (drop if off else keep).append(item)
    if os.environ.get("CACHEWARM_FAULT_RELEASES") != "all":
        releases: dict[str, list[str]] = {}
        for item in keep:
            variant = _fault_variant(item)
            if variant is not None:
                releases.setdefault(variant, []).append(item.callspec.params["memcached_version"])
        chosen = {v: sorted(r)[zlib.crc32(v.encode()) % len(r)] for v, r in releases.items()}
        kept = []
        for item in keep:
            variant = _fault_variant(item)
            off = variant is not None and item.callspec.params["memcached_version"] != chosen[variant]
            (drop if off else kept).append(item)
        keep = kept
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # The long work first, so that none is left running alone at the end: `make test-py` passes
        # --no-loadscope-reorder, so workers take the groups in the order their first test has here.
        # Longest first: the tests marked slow (1-2 min of CPU each), then the groups (a shared moto
        # world, CDK synth, venv installs, a Go build: 20-140 s each), then the fault scenarios
        # (20-60 s each), then the rest (mostly seconds each). The sort is stable: within a tier, the
        # collection's order.
        faults = REPO / "tests" / "faults"
        items.sort(
            key=lambda item: (
                item.get_closest_marker("slow") is None,
                _xdist_group(item) is None,
                not Path(str(item.path)).is_relative_to(faults),
            )
        )
    if config.pluginmanager.hasplugin("xdist"):
        _xdist_groups(items)


# Under pytest-xdist (`make test-py`: `-n N --dist loadgroup`) each test may run in any worker, except
# these groups, each kept on one worker: the tests of one module sharing a module-scoped fixture (a moto
# world, a server loaded once: built once, not once per worker), the tests of one expensive session
# fixture (a CDK synth: seconds of CPU each), and the loop-device tests (they attach and detach devices
# another worker could be given).
SESSION_GROUPS = {"synth": "cdk-synth", "cli_single": "cdk-cli", "cli_two_regions": "cdk-cli"}
DIR_GROUPS = {"volume": "loop-devices"}


def _xdist_group(item: pytest.Item) -> str | None:
    rel = Path(str(item.path)).relative_to(REPO / "tests").parts
    if rel and rel[0] in DIR_GROUPS:
        return DIR_GROUPS[rel[0]]
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs if info is not None else {}
    sessions = sorted({SESSION_GROUPS[n] for n in defs if n in SESSION_GROUPS})
    if sessions:
        return "+".join(sessions)
    if any(d[-1].scope == "module" for d in defs.values()):
        return item.nodeid.split("::")[0]
    return None


def _xdist_groups(items: list[pytest.Item]) -> None:
    for item in items:
        group = _xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Refuse a worker whose groups xdist will not honour. `--dist loadgroup` learns an item's group
    from a `@group` suffix xdist's own hook writes into the node id (after ours, which adds the marks);
    a pytest whose node ids ignore that write (9.2 with xdist 3.8) spreads every group over the
    workers without a word: two workers then build the fuzzers into one directory at once, attach the
    same loop devices, or start a module's servers twice."""
    if not os.environ.get("PYTEST_XDIST_WORKER") or not session.config.getvalue("loadgroup"):
        return
    lost = [i.nodeid for i in session.items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
    if lost:
        raise pytest.UsageError(
            f"pytest-xdist ignores the xdist_group marks under this pytest ({pytest.__version__}): "
            f"{len(lost)} grouped tests have no @group in their ids, e.g. {lost[0]} "
            "(pin pytest as pyproject.toml does)"
        )


@pytest.fixture
def warm_mode(request: pytest.FixtureRequest) -> str:
    """ "files" or "stream" (parametrized by pytest_generate_tests); `warm_args` gives its flags."""
    return str(request.param)


@pytest.fixture
def warm_args(warm_mode: str) -> list[str]:
    """The `cachewarm warm` flags of this test's data path."""
    return ["--stream"] if warm_mode == "stream" else []


@pytest.fixture
def memcached_version(request: pytest.FixtureRequest) -> str:
    """The memcached release of this test (parametrized by pytest_generate_tests)."""
    return str(getattr(request, "param", DEFAULT_VERSION))


@pytest.fixture
def memcached_binary(memcached_version: str) -> str:
    """The binary of this test's release; a missing one fails the test (or skips, if asked to)."""
    try:
        return find_binary(memcached_version)
    except MemcachedNotFound as e:
        if os.environ.get("CACHEWARM_MEMCACHED_MISSING") == "skip":
            pytest.skip(str(e))
        pytest.fail(str(e), pytrace=False)


@pytest.fixture
def memcached(memcached_binary: str) -> Iterator[Callable[..., MemcachedServer]]:
    """Factory: `memcached(memory_mb=64, max_item_size="8m")` starts a server of this test's release;
    all are killed at teardown (a graceful stop costs ~0.5 s each and saves nothing here)."""
    started: list[MemcachedServer] = []

    def start(**kw: object) -> MemcachedServer:
        kw.setdefault("binary", memcached_binary)
        srv = MemcachedServer(**kw).start()  # type: ignore[arg-type]
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.kill()


@pytest.fixture(scope="session")
def dumper_bin() -> Path:
    """The Release build of cachewarm-dump (make builds it; CACHEWARM_DUMP overrides)."""
    path = Path(os.environ.get("CACHEWARM_DUMP", REPO / "build" / "release" / "cachewarm-dump"))
    if not path.exists():
        pytest.fail(f"cachewarm-dump not built at {path}: run `make build`")
    return path
