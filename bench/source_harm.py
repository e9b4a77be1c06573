"""What a dump does to the source's live clients, and what each protection buys back (issue 16).

    python3 bench/source_harm.py [--items 1000000] [--value-size 1000] [--rate 2000] [--runs 2]

Setup: a fresh `memcached -t 4` (the first on PATH; Debian 12's is 1.6.18; --memcached picks another),
--items of --value-size bytes. The live client (bench/zipf_client.py) is a process of its own on 4
connections of its own: a steady --rate of requests, open loop, Zipf keys (s = 1), 90% `mg <key> v`
and 10% `ms <key> <size> T0`; its latencies (from each request's due time) go into an HdrHistogram
(`hdrhistogram`, 1 us .. 60 s, 3 digits) per phase. Phases, alternating within each run:
  * no dump (--alone-s seconds);
  * during an unthrottled dump (the dumper's defaults);
  * during a dump at a fixed --max-items-per-second = half the unthrottled speed of the calibration dump;
  * during a dump at a fixed --max-bytes-per-second = half the calibration dump's bytes/s;
  * during an --adaptive dump (probes the source's latency, backs off rate, batch and crawl pace).
The calibration dump (unthrottled, before the runs) is not counted. Every dump uses the default order
(recency: the listing ends before the first fetch). For each phase: the client's p50/p99/p99.9 and
throughput (answered requests/s), and the dump's speed (records / wall time of the dumper process).
Prints one JSON document. Targets: adaptive p99 <= 1.5x the no-dump p99 (medians over the runs), and
the adaptive dump >= 50% of the unthrottled dump's speed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO / "agent"))
sys.path.insert(0, str(BENCH))

from cachewarm.stdio import survive_closed_outputs  # noqa: E402
from cachewarm.testing.memcached import MemcachedServer  # noqa: E402
from source_latency import load  # noqa: E402

DUMPER = Path(os.environ.get("CACHEWARM_DUMP", REPO / "build" / "release" / "cachewarm-dump"))


class Client:
    """bench/zipf_client.py in its own process."""

    def __init__(self, srv: MemcachedServer, a: argparse.Namespace, seconds: float, work: Path) -> None:
        self.out = work / f"client-{time.monotonic_ns()}.json"
        args = [f"{srv.host}:{srv.port}", "--items", str(a.items), "--rate", str(a.rate)]
        args += ["--seconds", str(seconds), "--out", str(self.out), "--value-size", str(a.value_size)]
        args += ["--set-fraction", str(a.set_fraction)]
        self.proc = subprocess.Popen([sys.executable, str(BENCH / "zipf_client.py"), *args])

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def result(self) -> dict[str, Any]:
        if self.proc.wait() != 0:
            raise RuntimeError("live client failed")
        d: dict[str, Any] = json.loads(self.out.read_text())
        self.out.unlink()
        return d


def window(d: dict[str, Any], start: float, end: float) -> dict[str, Any]:
    """The client's requests due in [start, end] (wall clock): an HdrHistogram's percentiles."""
    h = HdrHistogram(1, 60_000_000, 3)
    t0 = float(d["t0_wall"])
    n = 0
    for due, lat in zip(d["due"], d["latency_us"], strict=True):
        if start <= t0 + due <= end:
            h.record_value(max(1, lat))
            n += 1
    span = max(1e-9, end - start)
    return {
        "requests": n,
        "throughput_per_s": round(n / span),
        "p50_ms": h.get_value_at_percentile(50) / 1000,
        "p99_ms": h.get_value_at_percentile(99) / 1000,
        "p999_ms": h.get_value_at_percentile(99.9) / 1000,
        "max_ms": h.get_max_value() / 1000,
    }


def alone(srv: MemcachedServer, a: argparse.Namespace, work: Path) -> dict[str, Any]:
    c = Client(srv, a, a.alone_s + 1.0, work)
    d = c.result()
    t0 = float(d["t0_wall"])
    return {"phase": "no dump", **window(d, t0 + 1.0, t0 + 1.0 + a.alone_s)}  # the first second settles


def dump(name: str, args: list[str], srv: MemcachedServer, a: argparse.Namespace, out_root: Path,
         work: Path, client: bool = True) -> dict[str, Any]:  # fmt: skip
    out = out_root / "dump"
    shutil.rmtree(out, ignore_errors=True)
    c = Client(srv, a, a.max_dump_s, work) if client else None
    if c is not None:
        time.sleep(1.0)  # the client settles
    argv = [str(DUMPER), "--port", str(srv.port), "--out", str(out), "--progress-interval", "3600", *args]
    t_start = time.time()
    r = subprocess.run(argv, capture_output=True, text=True, check=False)
    t_end = time.time()
    d = None
    if c is not None:
        time.sleep(0.3)
        c.stop()
        d = c.result()
    if r.returncode != 0:
        raise RuntimeError(f"{name}: dumper failed: {r.stderr[-500:]}")
    done = json.loads((out / "DONE").read_text())
    shutil.rmtree(out, ignore_errors=True)
    records = int(done["totals"]["records"])
    nbytes = int(done["totals"].get("bytes", 0))
    took = t_end - t_start
    res: dict[str, Any] = {
        "phase": name,
        "dump_args": args,
        "dump_s": round(took, 2),
        "dump_items_per_s": round(records / took),
        "dump_bytes_per_s": round(nbytes / took),
        "records": records,
        "complete": done.get("complete"),
    }
    if "source_protection" in done:
        p = done["source_protection"]
        res["guard"] = {k: p.get(k) for k in ("backoffs", "windows", "congested_windows", "lowest_rate",
                                               "probe_baseline_us", "probe_threshold_us")}  # fmt: skip
    if d is not None:
        res.update(window(d, t_start, t_end))
        if took > a.max_dump_s - 2:
            res["warning"] = "the dump outlasted the client's window (--max-dump-s)"
    return res


def med(rs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(float(r[key]) for r in rs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--value-size", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=2000.0, help="live client requests per second")
    ap.add_argument("--set-fraction", type=float, default=0.1)
    ap.add_argument("--alone-s", type=float, default=8.0)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--max-dump-s", type=float, default=120.0)
    ap.add_argument("--memcached", default=None, help="memcached binary (default: the first on PATH)")
    a = ap.parse_args()
    if not DUMPER.exists():
        sys.exit(f"{DUMPER} not built: run `make build`")
    result: dict[str, Any] = {
        "benchmark": "source_harm",
        "cpus": os.cpu_count(),
        "note": "shared, noisy machine: compare within this run only",
        "items": a.items,
        "value_size": a.value_size,
        "live_client": {
            "rate_per_s": a.rate,
            "mix": f"{1 - a.set_fraction:.0%} mg / {a.set_fraction:.0%} ms",
            "keys": "Zipf s=1",
            "connections": 4,
            "open_loop": True,
        },
        "load_average_at_start": [round(x, 1) for x in os.getloadavg()],
    }
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    mem = a.items * (a.value_size + 200) // 2**20 + 256
    with (
        tempfile.TemporaryDirectory(prefix="cwharm-") as tmp,
        tempfile.TemporaryDirectory(prefix="cwharm-", dir=shm) as tmp_mem,
        MemcachedServer(memory_mb=mem, threads=4, binary=a.memcached) as srv,
    ):
        work, out_root = Path(tmp), Path(tmp_mem)
        result["memcached_version"] = srv.stats()["version"]
        t0 = time.monotonic()
        load(srv, a.items, a.value_size)
        result["load_s"] = round(time.monotonic() - t0, 1)
        time.sleep(2.0)  # the server's own background crawler runs after bulk loads
        cal = dump("calibration (unthrottled, no client)", [], srv, a, out_root, work, client=False)
        result["calibration"] = cal
        half_items = max(1000, cal["dump_items_per_s"] // 2)
        half_bytes = max(1 << 20, cal["dump_bytes_per_s"] // 2)
        variants: list[tuple[str, list[str]]] = [
            ("unthrottled dump", []),
            ("fixed items/s", ["--max-items-per-second", str(half_items)]),
            ("fixed bytes/s", ["--max-bytes-per-second", str(half_bytes)]),
            ("adaptive", ["--adaptive"]),
        ]
        phases: list[dict[str, Any]] = []
        for i in range(a.runs):
            order: list[tuple[str, list[str]] | None] = [None, *variants]
            for k in range(len(order)):
                v = order[(i + k) % len(order)]
                phases.append(alone(srv, a, work) if v is None else dump(v[0], v[1], srv, a, out_root, work))
                print(json.dumps({k2: phases[-1].get(k2) for k2 in ("phase", "p99_ms", "dump_items_per_s")}),
                      file=sys.stderr)  # fmt: skip
        result["phases"] = phases
        by: dict[str, list[dict[str, Any]]] = {}
        for p in phases:
            by.setdefault(p["phase"], []).append(p)
        base_p99 = med(by["no dump"], "p99_ms")
        base_speed = med(by["unthrottled dump"], "dump_items_per_s")
        summary: dict[str, Any] = {}
        for name, rs in by.items():
            s = {k: med(rs, k) for k in ("p50_ms", "p99_ms", "p999_ms", "throughput_per_s")}
            s["p99_over_no_dump"] = round(s["p99_ms"] / base_p99, 2)
            if name != "no dump":
                s["dump_items_per_s"] = med(rs, "dump_items_per_s")
                s["dump_speed_over_unthrottled"] = round(s["dump_items_per_s"] / base_speed, 2)
            summary[name] = s
        result["summary_medians"] = summary
        ad = summary["adaptive"]
        result["target_adaptive_p99_le_1_5x"] = ad["p99_over_no_dump"] <= 1.5
        result["target_adaptive_speed_ge_50pct"] = ad["dump_speed_over_unthrottled"] >= 0.5
    result["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    survive_closed_outputs()  # `... | head`: the run still finishes and stops what it started
    main()
