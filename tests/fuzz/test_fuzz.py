"""Short fuzzing runs inside `make test`; `make fuzz` runs the same for longer (FUZZ_SECONDS).

- libFuzzer targets of the dumper's response parsers (dumper-cpp/fuzz/, built here with clang into
  build/fuzz), seeded with real memcached replies (dumper-cpp/fuzz/corpus/);
- the atheris harness of the Python data-file reader (tests/fuzz/fuzz_dataformat.py), seeded with
  the golden vectors (tests/vectors/).
Each run must end without a crash, a hang (-timeout) or a large allocation (-malloc_limit_mb /
-rss_limit_mb: a length field read from the input must never size an allocation).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build" / "fuzz"
SEEDS = REPO / "dumper-cpp" / "fuzz" / "corpus"
VECTORS = REPO / "tests" / "vectors"
CPP_TARGETS = ["meta_response_fuzz", "metadump_fuzz"]


# In `make test` each target runs a fixed number of inputs from a fixed seed, with the schedules that
# read the clock off (-entropic=0: weights by execution time; -reload=0): nearly the same inputs every
# run (two runs here: 231 corpus files each, one different), so a red CI run can be replayed, not a
# roll of the dice. `make fuzz` (FUZZ_SECONDS) searches for that long from a random seed, defaults on.
FIXED_SEED = 20261128


def budget(default_s: int, runs: int) -> list[str]:
    """libFuzzer's budget flags: FUZZ_SECONDS of random search, else `runs` inputs from FIXED_SEED
    (with a time cap of 5 x default_s for a very slow machine: it then runs fewer inputs, same ones)."""
    if "FUZZ_SECONDS" in os.environ:
        return [f"-max_total_time={int(os.environ['FUZZ_SECONDS'])}"]
    cap = f"-max_total_time={5 * default_s}"
    return [f"-seed={FIXED_SEED}", f"-runs={runs}", "-entropic=0", "-reload=0", cap]


def limits() -> list[str]:
    return ["-timeout=10", "-rss_limit_mb=1024", "-malloc_limit_mb=128", "-print_final_stats=1"]


def corpus_dir(tmp_path: Path, name: str) -> Path:
    """Where a run keeps its corpus: FUZZ_CORPUS_DIR/<name> (make fuzz, kept between runs) or tmp."""
    base = os.environ.get("FUZZ_CORPUS_DIR")
    d = Path(base) / name if base else tmp_path / name
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def fuzz_build() -> Path:
    """Configure and build the libFuzzer targets with clang (incremental after the first time)."""
    clang, clang_c = shutil.which("clang++"), shutil.which("clang")
    if clang is None or clang_c is None:
        pytest.skip("clang is not installed (make deps-apt installs it): libFuzzer targets not run")
    # Both compilers clang: the parsers call the C wire core (core/*.c), built with the same sanitizers.
    cfg = subprocess.run(
        ["cmake", "-S", str(REPO / "dumper-cpp"), "-B", str(BUILD), "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
         f"-DCMAKE_CXX_COMPILER={clang}", f"-DCMAKE_C_COMPILER={clang_c}", "-DCACHEWARM_FUZZ=ON"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert cfg.returncode == 0, cfg.stdout + cfg.stderr
    b = subprocess.run(
        ["cmake", "--build", str(BUILD), "-j2", "--target", *CPP_TARGETS],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-3000:]
    return BUILD / "fuzz"


def _run(cmd: list[str], flags: list[str], artifacts: Path) -> None:
    artifacts.mkdir(parents=True, exist_ok=True)
    cap = max(int(f.split("=")[1]) for f in flags if f.startswith("-max_total_time="))
    # Through `sh … & wait`: a process forked from pytest inherits pytest's peak RSS in its own
    # ru_maxrss (Linux folds the old mm's high-water mark in at exec), which libFuzzer's -rss_limit_mb
    # reads — a 1.3 GB test session made every fuzzer "run out of memory" at its first input. A
    # background job of a small shell starts with a fresh account; `wait $!` passes on its status.
    argv = [*cmd, *flags, *limits(), f"-artifact_prefix={artifacts}/"]
    with subprocess.Popen(
        ["sh", "-c", '"$@" & wait $!', "sh", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as p:
        try:
            out, err = p.communicate(timeout=cap + 120)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            raise
    r = subprocess.CompletedProcess(argv, p.returncode, out, err)
    tail = "\n".join(r.stderr.splitlines()[-40:])
    assert r.returncode == 0, f"fuzzer found a problem (artifacts in {artifacts}):\n{tail}"
    assert "Done" in r.stderr, tail
    # libFuzzer's final lines: "stat::number_of_executed_units: 1612398" etc.
    stats = {}
    for ln in r.stderr.splitlines():
        if ln.startswith("stat::"):
            k, _, v = ln.removeprefix("stat::").partition(":")
            stats[k] = v.strip()
    name = Path(cmd[1] if cmd[0] == sys.executable else cmd[0]).name
    print(
        f"{name}: {' '.join(flags)}: {stats.get('number_of_executed_units', '?')} inputs, "
        f"{stats.get('average_exec_per_sec', '?')}/s, corpus +{stats.get('new_units_added', '?')}, "
        f"peak RSS {stats.get('peak_rss_mb', '?')} MB"
    )


@pytest.mark.parametrize("target", CPP_TARGETS)
def test_libfuzzer_target(fuzz_build: Path, target: str, tmp_path: Path) -> None:
    seeds = SEEDS / target.removesuffix("_fuzz")
    assert any(seeds.iterdir()), f"no seeds in {seeds}"
    work = corpus_dir(tmp_path, target)
    runs = {"meta_response_fuzz": 80_000, "metadump_fuzz": 300_000}[target]  # ~4 s each here
    _run([str(fuzz_build / target), str(work), str(seeds)], budget(6, runs), tmp_path / "artifacts")


def test_atheris_dataformat_reader(tmp_path: Path) -> None:
    if importlib.util.find_spec("atheris") is None:
        pytest.skip(
            "atheris is not installed (pip install -e '.[dev]' installs it): Python reader not fuzzed"
        )
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    # Every version's golden files: the record walk differs (v2's commands, v3's stamps before them).
    for f in [*VECTORS.glob("*.cwd"), *VECTORS.glob("v2/*.cwd"), *VECTORS.glob("v3/*.cwd"), VECTORS / "DONE"]:
        for mode in (0, 2):  # byte 0: real checksum; 2 = also repair the framing (see the harness)
            (seeds / f"{mode}-{f.name}").write_bytes(bytes([mode]) + f.read_bytes())
    work = corpus_dir(tmp_path, "dataformat")
    harness = Path(__file__).with_name("fuzz_dataformat.py")
    _run([sys.executable, str(harness), str(work), str(seeds)], budget(10, 150_000), tmp_path / "artifacts")


def test_iter_records_on_a_short_magic_input_raises_format_error() -> None:
    from cachewarm.datapath import format as df

    # Found by atheris: struct.error escaped before the length check (now a regression test).
    with pytest.raises(df.FormatError):
        list(df.iter_records(b"CWARMDF1\x00CWARMDF1\x01\x00:\x01\x00\x00"))
    # A header_len past the input used to yield no records silently.
    with pytest.raises(df.FormatError, match="header_len"):
        list(df.iter_records(b"CWARMDF1" + b"\x01\x00" + b"\xff\x7f" + b"\x00" * 100))


# Found by the atheris harness: a non-integer optional field used to escape as ValueError/TypeError.
@pytest.mark.parametrize(("field", "value"), [("misses", "x"), ("dump_start_ms", {"a": 1})])
def test_parse_manifest_names_a_non_integer_optional_field(field: str, value: object, tmp_path: Path) -> None:
    from cachewarm.datapath import format as df
    from cachewarm.datapath.writer import DirWriter

    w = DirWriter(tmp_path, node="src")
    w.write(0, 0, [df.Record(b"k", 0, -1, b"v")])
    m = w.manifest()
    if field == "misses":
        m["files"][0]["misses"] = value
    else:
        m[field] = value
    with pytest.raises(df.FormatError, match=field):
        df.parse_manifest(json.dumps(m))
