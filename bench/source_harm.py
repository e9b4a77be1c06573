"""What a dump does to the source's live clients, and what the default protection buys back (issues 16, 22).

    python3 bench/source_harm.py [--memcached PATH ...] [--sizes 1000000x1000,100000x10000] [--runs 3]

The method (issue 22; an independent measurement agreed with it):
  * a fresh `memcached -t 4` per release (--memcached, repeatable; default: the first on PATH, Debian
    12's 1.6.18), loaded with each --sizes ITEMSxBYTES in turn;
  * the live client (bench/zipf_client.py), a process of its own on 4 connections of its own: a
    steady --rate of requests, open loop (each sent when it falls due, its latency counted from
    then: a stall delays every request due during it), Zipf keys (s = 1), 90% `mg <key> v`, 10%
    `ms <key> <size> T0`;
  * the client runs at a higher priority than the dump (nice --client-nice, -10: it needs root,
    else the dumper runs at nice +10 instead): the client's own scheduling delays are its floor, and
    a harm ratio is only as good as that floor (FACTS.md);
  * the client's p99 is taken per 1-s window (by due time) and the median of the windows reported —
    one noisy second neither hides nor makes the harm;
  * the dump's output goes to tmpfs (/dev/shm): a slow disk would throttle the dumper for it;
  * phases alternate within each run: no dump (--alone-s seconds), an unthrottled dump (the
    dumper's defaults, measured first: the harm there is to protect against), a dump with the
    default protection (`--adaptive`, as on AWS); --with-fixed adds a fixed --max-items-per-second
    and --max-bytes-per-second at half the unthrottled speed (issue 16's comparison).
Dump speed = records / wall time of the dumper process (listing included). Medians over --runs.
Prints one JSON document: per release and size, each phase's medians, p99 / no-dump p99 and dump
speed / unthrottled, and whether the target holds (protected p99 <= 1.5x alone, speed >= 0.5x).
"""

from __future__ import annotations

import argparse
import json
import math
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
PROTECTED = "default protection (--adaptive)"
UNTHROTTLED = "unthrottled dump"
ALONE = "no dump"


def can_raise_priority() -> bool:
    return os.geteuid() == 0


class Client:
    """bench/zipf_client.py in its own process, at a higher priority than the dump when allowed."""

    def __init__(self, srv: MemcachedServer, a: argparse.Namespace, items: int, size: int, seconds: float,
                 work: Path) -> None:  # fmt: skip
        self.out = work / f"client-{time.monotonic_ns()}.json"
        args = [f"{srv.host}:{srv.port}", "--items", str(items), "--rate", str(a.rate)]
        args += ["--seconds", str(seconds), "--out", str(self.out), "--value-size", str(size)]
        args += ["--set-fraction", str(a.set_fraction), "--ready"]
        nice = a.client_nice if can_raise_priority() else 0
        self.proc = subprocess.Popen(
            [sys.executable, str(BENCH / "zipf_client.py"), *args],
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=(lambda: os.nice(nice)) if nice else None,
        )
        assert self.proc.stdout is not None
        # Its key table takes seconds for a million keys: a dump started before would be half measured.
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("live client failed to start")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def result(self) -> dict[str, Any]:
        if self.proc.wait() != 0:
            raise RuntimeError("live client failed")
        d: dict[str, Any] = json.loads(self.out.read_text())
        self.out.unlink()
        return d


def window(d: dict[str, Any], start: float, end: float) -> dict[str, Any]:
    """The client's requests due in [start, end] (wall clock): percentiles of the whole span, and
    the median of the p99s of its whole 1-s windows (the reported statistic)."""
    h = HdrHistogram(1, 60_000_000, 3)
    per_s: dict[int, HdrHistogram] = {}
    t0 = float(d["t0_wall"])
    n = 0
    whole = max(1, math.floor(end - start))
    for due, lat in zip(d["due"], d["latency_us"], strict=True):
        t = t0 + due
        if start <= t <= end:
            h.record_value(max(1, lat))
            n += 1
            w = int(t - start)
            if w < whole:
                per_s.setdefault(w, HdrHistogram(1, 60_000_000, 3)).record_value(max(1, lat))
    span = max(1e-9, end - start)
    p99s = [x.get_value_at_percentile(99) / 1000 for x in per_s.values() if x.get_total_count() >= 100]
    return {
        "requests": n,
        "throughput_per_s": round(n / span),
        "p99_ms": statistics.median(p99s) if p99s else h.get_value_at_percentile(99) / 1000,
        "windows": len(p99s),
        "p50_ms": h.get_value_at_percentile(50) / 1000,
        "pooled_p99_ms": h.get_value_at_percentile(99) / 1000,
        "p999_ms": h.get_value_at_percentile(99.9) / 1000,
        "max_ms": h.get_max_value() / 1000,
    }


def alone(srv: MemcachedServer, a: argparse.Namespace, items: int, size: int, work: Path) -> dict[str, Any]:
    c = Client(srv, a, items, size, a.alone_s + 1.0, work)
    d = c.result()
    t0 = float(d["t0_wall"])
    return {"phase": ALONE, **window(d, t0 + 1.0, t0 + 1.0 + a.alone_s)}  # the first second settles


def dump(name: str, args: list[str], srv: MemcachedServer, a: argparse.Namespace, items: int, size: int,
         out_root: Path, work: Path) -> dict[str, Any]:  # fmt: skip
    out = out_root / "dump"
    shutil.rmtree(out, ignore_errors=True)
    c = Client(srv, a, items, size, a.max_dump_s, work)
    time.sleep(1.0)  # the client settles (its first second is not measured alone either)
    argv = [str(DUMPER), "--port", str(srv.port), "--out", str(out), "--progress-interval", "3600", *args]
    # Without root the client cannot be raised: the dumper is lowered instead.
    lower = 0 if can_raise_priority() else 10
    env = dict(os.environ)
    if a.trace_dir and "--adaptive" in args:
        a.trace_dir.mkdir(parents=True, exist_ok=True)
        env["CACHEWARM_GUARD_TRACE"] = str(a.trace_dir / f"{items}x{size}-{time.monotonic_ns()}.jsonl")
    t_start = time.time()
    r = subprocess.run(argv, capture_output=True, text=True, check=False, env=env,
                       preexec_fn=(lambda: os.nice(lower)) if lower else None)  # fmt: skip
    t_end = time.time()
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
    p = done.get("source_protection") or {}
    # memcached's own view: connections that yielded their thread, and its CPU seconds, during the dump.
    res["server"] = {"conn_yields": p.get("server_conn_yields"), "cpu_s": p.get("server_cpu_s")}
    if p.get("adaptive"):
        keys = (
            "backoffs",
            "backed_off_ms",
            "congested_windows",
            "lowest_rate",
            "lowest_bytes_rate",
            "probe_p99_before_us",
            "probe_window_p99_median_us",
            "probe_p99_ratio",
            "probe_threshold_us",
        )
        res["guard"] = {k: p.get(k) for k in keys}
    res.update(window(d, t_start, t_end))
    if took > a.max_dump_s - 2:
        res["warning"] = "the dump outlasted the client's window (--max-dump-s)"
    return res


def med(rs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(float(r[key]) for r in rs))


def one_size(srv: MemcachedServer, a: argparse.Namespace, items: int, size: int, out_root: Path,
             work: Path) -> dict[str, Any]:  # fmt: skip
    t0 = time.monotonic()
    load(srv, items, size)
    res: dict[str, Any] = {"items": items, "value_size": size, "load_s": round(time.monotonic() - t0, 1)}
    time.sleep(2.0)  # the server's own background crawler runs after bulk loads
    variants: list[tuple[str, list[str]]] = [(UNTHROTTLED, []), (PROTECTED, ["--adaptive"])]
    for text in a.variant:
        name, _, args = text.partition("=")
        variants.append((name, args.split()))
    phases: list[dict[str, Any]] = []
    first = dump(UNTHROTTLED, [], srv, a, items, size, out_root, work)  # the harm first: is there any?
    phases.append(first)
    if a.with_fixed:
        half_items = max(1000, first["dump_items_per_s"] // 2)
        half_bytes = max(1 << 20, first["dump_bytes_per_s"] // 2)
        variants.append(("fixed items/s (half)", ["--max-items-per-second", str(half_items)]))
        variants.append(("fixed bytes/s (half)", ["--max-bytes-per-second", str(half_bytes)]))
    for i in range(a.runs):
        order: list[tuple[str, list[str]] | None] = [None, *variants]
        for k in range(len(order)):
            v = order[(i + k) % len(order)]
            if i == 0 and v is not None and v[0] == UNTHROTTLED:
                continue  # measured first, above
            if v is None:
                ph = alone(srv, a, items, size, work)
            else:
                ph = dump(v[0], v[1], srv, a, items, size, out_root, work)
            phases.append(ph)
            brief = {k2: ph.get(k2) for k2 in ("phase", "p99_ms", "dump_items_per_s")}
            print(json.dumps({"items": items, "value_size": size, **brief}), file=sys.stderr)
    res["phases"] = phases
    by: dict[str, list[dict[str, Any]]] = {}
    for p in phases:
        by.setdefault(p["phase"], []).append(p)
    base_p99 = med(by[ALONE], "p99_ms")
    base_speed = med(by[UNTHROTTLED], "dump_items_per_s")
    summary: dict[str, Any] = {}
    for name, rs in by.items():
        s = {k: med(rs, k) for k in ("p50_ms", "p99_ms", "pooled_p99_ms", "p999_ms", "throughput_per_s")}
        s["p99_over_alone"] = round(s["p99_ms"] / base_p99, 2)
        if name != ALONE:
            s["dump_items_per_s"] = med(rs, "dump_items_per_s")
            s["speed_over_unthrottled"] = round(s["dump_items_per_s"] / base_speed, 2)
        summary[name] = s
    res["summary_medians"] = summary
    prot = summary[PROTECTED]
    res["target_p99_le_1_5x_alone"] = prot["p99_over_alone"] <= 1.5
    res["target_speed_ge_0_5x_unthrottled"] = prot["speed_over_unthrottled"] >= 0.5
    return res


def parse_sizes(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        try:
            n, b = part.lower().split("x")
            out.append((int(n), int(b)))
        except ValueError:
            sys.exit(f"--sizes: {part!r} is not ITEMSxBYTES (e.g. 1000000x1000)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000x1000,100000x10000", help="ITEMSxBYTES, comma-separated")
    ap.add_argument("--rate", type=float, default=2000.0, help="live client requests per second")
    ap.add_argument("--set-fraction", type=float, default=0.1)
    ap.add_argument("--alone-s", type=float, default=6.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-dump-s", type=float, default=120.0)
    ap.add_argument("--client-nice", type=int, default=-10, help="the live client's nice value (needs root)")
    ap.add_argument("--with-fixed", action="store_true", help="also fixed items/s and bytes/s limits")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                    help="another phase: the dumper with these flags, e.g. 'b20=--batch 20'")  # fmt: skip
    ap.add_argument("--trace-dir", type=Path, default=None,
                    help="each --adaptive dump's decisions (CACHEWARM_GUARD_TRACE)")  # fmt: skip
    ap.add_argument("--memcached", action="append", default=None,
                    help="memcached binary (repeatable; default: the first on PATH)")  # fmt: skip
    a = ap.parse_args()
    if not DUMPER.exists():
        sys.exit(f"{DUMPER} not built: run `make build`")
    sizes = parse_sizes(a.sizes)
    result: dict[str, Any] = {
        "benchmark": "source_harm",
        "cpus": os.cpu_count(),
        "note": "shared, noisy machine: compare within this run only",
        "method": "open loop from due time; p99 per 1-s window, median of windows; dump output on tmpfs",
        "priority": f"client at nice {a.client_nice}" if can_raise_priority() else "dumper at nice +10",
        "live_client": {
            "rate_per_s": a.rate,
            "mix": f"{1 - a.set_fraction:.0%} mg / {a.set_fraction:.0%} ms",
            "keys": "Zipf s=1",
            "connections": 4,
            "open_loop": True,
        },
        "load_average_at_start": [round(x, 1) for x in os.getloadavg()],
        "releases": [],
    }
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    for binary in a.memcached or [None]:
        for items, size in sizes:
            mem = items * (size + 200) // 2**20 + 256
            with (
                tempfile.TemporaryDirectory(prefix="cwharm-") as tmp,
                tempfile.TemporaryDirectory(prefix="cwharm-", dir=shm) as tmp_mem,
                MemcachedServer(memory_mb=mem, threads=4, binary=binary) as srv,
            ):
                r = one_size(srv, a, items, size, Path(tmp_mem), Path(tmp))
                r["memcached_version"] = srv.stats()["version"]
                result["releases"].append(r)
    result["targets_met"] = all(
        r["target_p99_le_1_5x_alone"] and r["target_speed_ge_0_5x_unthrottled"] for r in result["releases"]
    )
    result["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    survive_closed_outputs()  # `... | head`: the run still finishes and stops what it started
    main()
