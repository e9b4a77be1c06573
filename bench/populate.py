"""Populator benchmark (issue 3). Prints JSON.

Same run, fresh memcached (`-m 4096 -t 2`) per measurement, median of TRIALS:
1. populator items/s vs. a raw ceiling writer — the same number of processes sending pre-encoded
   pipelined quiet `ms` batches (nothing else: no file reading, no checksum, no parsing) — for
   1,000,000 x 1 KB and 200,000 x 10 KB. Target: populator >= 0.7 x ceiling.
2. end-to-end `cachewarm warm` time vs. dump alone and populate alone (1,000,000 x 1 KB).
   Target: warm <= 1.2 x max(dump alone, populate alone).

The machine is shared (other engineers' builds and tests run on the same 2 cores): compare within
one run only. Env: BENCH_TRIALS (default 3), BENCH_SCALE (default 1.0, e.g. 0.1 for a quick run).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from cachewarm.dataformat import DirWriter, Record
from cachewarm.ketama import Node
from cachewarm.meta import MetaConnection
from cachewarm.populate import PopulateConfig, populate
from cachewarm.testing.memcached import MemcachedServer
from cachewarm.warm import WarmConfig, find_dumper, run_warm

TRIALS = int(os.environ.get("BENCH_TRIALS", "3"))
SCALE = float(os.environ.get("BENCH_SCALE", "1.0"))
WORKERS = int(os.environ.get("BENCH_WORKERS", "2"))
PER_FILE_BYTES = 32 << 20


class CpuMeter:
    """Whole-machine CPU busy fraction over an interval (0..1 of all cores): shows whether a phase
    already saturates the 2 cores, in which case overlapping two phases cannot shorten the run."""

    def __enter__(self) -> CpuMeter:
        self.t0 = psutil.cpu_times()
        return self

    def __exit__(self, *exc: object) -> None:
        t1 = psutil.cpu_times()
        idle = (t1.idle + getattr(t1, "iowait", 0)) - (self.t0.idle + getattr(self.t0, "iowait", 0))
        total = sum(t1) - sum(self.t0)
        self.busy = round(1 - idle / total, 3) if total > 0 else 0.0


def make_dump(out: Path, n: int, size: int) -> None:
    """A dump directory of n items of `size` bytes, in ~32 MB files, like the dumper writes."""
    w = DirWriter(out, node="bench")
    per_file = max(1, PER_FILE_BYTES // (size + 40))
    value = b"v" * size
    for chunk, start in enumerate(range(0, n, per_file)):
        recs = [Record(b"key:%d" % i, i & 0xFFFF, -1, value) for i in range(start, min(n, start + per_file))]
        w.write(chunk, 0, recs)
    w.done()


def _ceiling_worker(args: tuple[str, int, int, int, int, int]) -> float:
    host, port, lo, hi, size, batch = args
    value = b"v" * size
    payloads = []
    for s in range(lo, hi, batch):
        buf = bytearray()
        for i in range(s, min(hi, s + batch)):
            buf += b"ms key:%d %d T0 F%d ME q\r\n" % (i, size, i & 0xFFFF)
            buf += value
            buf += b"\r\n"
        payloads.append((bytes(buf), min(hi, s + batch) - s))
    c = MetaConnection(host, port)
    c.connect()
    t0 = time.monotonic()
    for p, cnt in payloads:
        c.send_batch(p, cnt)
    tot = c.flush()
    dt = time.monotonic() - t0
    c.close()
    if tot.errors:
        raise RuntimeError(f"ceiling writer got errors: {tot.first_error}")
    return dt


def ceiling(srv: MemcachedServer, n: int, size: int) -> float:
    """items/s of WORKERS processes sending pre-encoded `ms ... q` batches (encoding not timed)."""
    step = (n + WORKERS - 1) // WORKERS
    jobs = [(srv.host, srv.port, lo, min(n, lo + step), size, 1000) for lo in range(0, n, step)]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(WORKERS) as pool:
        times = pool.map(_ceiling_worker, jobs)
    # Workers start their clocks when their payloads are ready; the slowest one bounds the rate.
    return n / max(times)


def run_populate(src: Path, srv: MemcachedServer, state: Path) -> tuple[float, float]:
    t0 = time.monotonic()
    s = populate(
        PopulateConfig(
            source_dir=src,
            destinations=[Node(srv.host, srv.port)],
            state_file=state,
            workers=WORKERS,
            poll_interval=0.05,
        )
    )
    dt = time.monotonic() - t0
    assert s.stored == s.records, s
    return s.records / dt, dt


def fresh() -> MemcachedServer:
    """A new server for a `with` block (which starts it and stops it)."""
    return MemcachedServer(memory_mb=4096, threads=2)


def bench_set(tmp: Path, n: int, size: int) -> dict[str, object]:
    src = tmp / f"dump-{n}x{size}"
    make_dump(src, n, size)
    ceil, pop = [], []
    for t in range(TRIALS):
        with fresh() as srv:
            ceil.append(ceiling(srv, n, size))
        with fresh() as srv:
            pop.append(run_populate(src, srv, tmp / f"state-{n}-{size}-{t}.json")[0])
    c, p = statistics.median(ceil), statistics.median(pop)
    return {
        "items": n,
        "value_bytes": size,
        "ceiling_items_per_s": round(c),
        "populator_items_per_s": round(p),
        "populator_mb_per_s": round(p * size / 1e6, 1),
        "ratio": round(p / c, 3),
        "target_ratio": 0.7,
        "meets_target": p / c >= 0.7,
        "trials": {"ceiling": [round(x) for x in ceil], "populator": [round(x) for x in pop]},
    }


def bench_warm(tmp: Path, n: int) -> dict[str, object]:
    dumper = find_dumper()
    dump_t, pop_t, warm_t = [], [], []
    busy: dict[str, list[float]] = {"dump": [], "populate": [], "warm": []}
    for t in range(TRIALS):
        with fresh() as source:
            _load_1k(source, n)
            out = tmp / f"alone-{t}"
            t0 = time.monotonic()
            with CpuMeter() as m_dump:
                subprocess.run(
                    [
                        *(str(dumper), "--host", source.host, "--port", str(source.port), "--out", str(out)),
                        *("--threads", "2", "--data-file-size", "32M"),
                    ],
                    check=True,
                    stdout=subprocess.DEVNULL,
                )
            dump_t.append(time.monotonic() - t0)
            busy["dump"].append(m_dump.busy)
            with fresh() as target, CpuMeter() as m_pop:
                pop_t.append(run_populate(out, target, tmp / f"alone-state-{t}.json")[1])
            busy["populate"].append(m_pop.busy)
            with fresh() as target, CpuMeter() as m_warm:
                t0 = time.monotonic()
                s = run_warm(
                    WarmConfig(
                        source=Node(source.host, source.port),
                        targets=[Node(target.host, target.port)],
                        workdir=tmp / f"warm-{t}",
                        dumper=dumper,
                        workers=WORKERS,
                        check=False,
                    ),
                    stream=open(os.devnull, "w"),  # noqa: SIM115
                )
                warm_t.append(time.monotonic() - t0)
                assert s.copied == n, s
            busy["warm"].append(m_warm.busy)
    d, p, w = statistics.median(dump_t), statistics.median(pop_t), statistics.median(warm_t)
    floor = d * statistics.median(busy["dump"]) + p * statistics.median(busy["populate"])
    return {
        "items": n,
        "value_bytes": 1000,
        "dump_alone_s": round(d, 2),
        "populate_alone_s": round(p, 2),
        "warm_s": round(w, 2),
        "ratio_warm_vs_max_alone": round(w / max(d, p), 3),
        "target_ratio": 1.2,
        "meets_target": w / max(d, p) <= 1.2,
        "cpu_busy_fraction_median": {k: statistics.median(v) for k, v in busy.items()},
        # When each phase alone already keeps every core busy, running them concurrently cannot
        # take less than the sum of their CPU time: this floor is what the machine allows.
        "cpu_floor_s": round(floor, 2),
        "ratio_warm_vs_cpu_floor": round(w / floor, 3) if floor else None,
        "trials": {
            "dump_s": [round(x, 2) for x in dump_t],
            "populate_s": [round(x, 2) for x in pop_t],
            "warm_s": [round(x, 2) for x in warm_t],
        },
    }


def _load_1k(srv: MemcachedServer, n: int) -> None:
    c = MetaConnection(srv.host, srv.port)
    c.connect()
    value = b"v" * 1000
    for s in range(0, n, 1000):
        buf = bytearray()
        for i in range(s, min(n, s + 1000)):
            buf += b"ms key:%d 1000 T0 F%d q\r\n" % (i, i & 0xFFFF) + value + b"\r\n"
        c.send_batch(buf, min(n, s + 1000) - s)
    t = c.flush()
    c.close()
    if t.errors:
        raise RuntimeError(t.first_error)


def main() -> None:
    n1 = int(1_000_000 * SCALE)
    n10 = int(200_000 * SCALE)
    with tempfile.TemporaryDirectory(prefix="cachewarm-bench-") as d:
        tmp = Path(d)
        result = {
            "benchmark": "populate",
            "note": "2 shared cores (other engineers' work runs concurrently); medians of trials",
            "trials": TRIALS,
            "workers": WORKERS,
            "populate_1k": bench_set(tmp, n1, 1000),
            "populate_10k": bench_set(tmp, n10, 10_000),
            "warm_1k": bench_warm(tmp, n1),
        }
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
