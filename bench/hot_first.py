"""Hot items first (issue 16): how soon a new replica serves the reads clients actually send, in
crawl order and in recency order.

    python3 bench/hot_first.py [--items 500000] [--value-size 1000] [--warm-rate 50000] [--runs 2]

Setup: a source `memcached -t 4` (the first on PATH; Debian 12's is 1.6.18; --memcached picks another)
with --items of --value-size bytes; then the Zipf read workload (s = 1, bench/zipf_client.py's keys)
replayed against it, --touch requests, pipelined: the keys clients ask for become active with a recent
last access (`la=`; memcached sets it on an item's second fetch), the others keep their store time.
Each warm (`cachewarm warm --order crawl|recency`, the source read at --warm-rate items/s — the paced
warm a production source gets; unpaced, a local warm of this size is over in a couple of seconds) goes
into a fresh, empty target while the same Zipf read workload (`mg <key> v` only, open loop, --rate/s,
4 connections) runs against the target. Its hit rate over the warm's duration (process start to exit,
listing included) is printed at 10%, 25% and 50% of it (each the requests due in a window of +-5% of
the duration around that point), with a 5% time series, and t90: the seconds from the warm's start
until a 0.5 s window of reads first hits 90%. Orders alternate within each run. Prints one JSON
document. Targets: recency's hit rate at 25% >= 2x crawl order's, recency's t90 <= 0.5x crawl
order's, and recency's warm within 10% of crawl order's (medians over the runs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO / "agent"))
sys.path.insert(0, str(BENCH))

from cachewarm.stdio import survive_closed_outputs  # noqa: E402
from cachewarm.testing.memcached import MemcachedServer  # noqa: E402
from source_latency import load  # noqa: E402
from zipf_client import ZipfKeys  # noqa: E402

DUMPER = Path(os.environ.get("CACHEWARM_DUMP", REPO / "build" / "release" / "cachewarm-dump"))
POINTS = (0.10, 0.25, 0.50)
# t90: the hit rate over the last this many seconds of requests (1,000 requests at the default --rate).
T90_WINDOW_S = 0.5


def touch(srv: MemcachedServer, items: int, n: int, batch: int = 1000) -> None:
    """n Zipf-distributed `mg <key>` on the source, pipelined (the clients' recent reads)."""
    keys = ZipfKeys(items)
    with socket.create_connection((srv.host, srv.port), timeout=120) as s:
        for _ in range(0, n, batch):
            s.sendall(b"".join(b"mg k%d q\r\n" % keys.key() for _ in range(batch)) + b"mn\r\n")
            reply = b""
            while not reply.endswith(b"MN\r\n"):
                reply += s.recv(1 << 20)


def hit_rates(d: dict[str, Any], start: float, took: float) -> dict[str, Any]:
    t0 = float(d["t0_wall"])
    rel = [(t0 + due - start) / took for due in d["due"]]

    def rate(lo: float, hi: float) -> float | None:
        hs = [h for r, h in zip(rel, d["hit"], strict=True) if lo <= r < hi]
        return round(sum(1 for h in hs if h == 1) / len(hs), 3) if hs else None

    return {
        "t90_s": t90(d, start),
        "at": {f"{int(p * 100)}%": rate(p - 0.05, p + 0.05) for p in POINTS},
        "series_5pct": [rate(i / 20, (i + 1) / 20) for i in range(20)],
        "after_warm": rate(1.0, 10.0),
    }


def t90(d: dict[str, Any], start: float) -> float | None:
    """Seconds from the warm's start until the target serves 90% of the read load: the end of the
    first T90_WINDOW_S window whose hit rate reaches 0.9 (None: never)."""
    t0 = float(d["t0_wall"])
    reqs = sorted((t0 + due - start, h) for due, h in zip(d["due"], d["hit"], strict=True))
    reqs = [(t, h) for t, h in reqs if t >= 0]
    lo = 0
    hits = 0
    for hi, (t, h) in enumerate(reqs):
        hits += h == 1
        while reqs[lo][0] < t - T90_WINDOW_S:
            hits -= reqs[lo][1] == 1
            lo += 1
        n = hi - lo + 1
        if t >= T90_WINDOW_S and n >= 50 and hits >= 0.9 * n:
            return round(t, 2)
    return None


def one_warm(order: str, src: MemcachedServer, a: argparse.Namespace, work: Path) -> dict[str, Any]:
    wd = work / "warm"
    shutil.rmtree(wd, ignore_errors=True)
    mem = a.items * (a.value_size + 200) // 2**20 + 256
    with MemcachedServer(memory_mb=mem, threads=2, binary=a.memcached) as dst:
        out = work / f"client-{time.monotonic_ns()}.json"
        client = subprocess.Popen([
            sys.executable, str(BENCH / "zipf_client.py"), f"{dst.host}:{dst.port}", "--items", str(a.items),
            "--rate", str(a.rate), "--seconds", "600", "--out", str(out), "--set-fraction", "0",
        ])  # fmt: skip
        time.sleep(1.0)
        env = dict(os.environ, CACHEWARM_DUMP=str(DUMPER), PYTHONPATH=str(REPO / "agent"))
        argv = [sys.executable, "-m", "cachewarm", "warm", "--source", f"{src.host}:{src.port}",
                "--target", f"{dst.host}:{dst.port}", "--workdir", str(wd), "--order", order, "--no-check",
                "--source-max-items-per-second", str(a.warm_rate)]  # fmt: skip
        start = time.time()
        r = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        took = time.time() - start
        time.sleep(max(1.0, 0.1 * took))
        client.send_signal(signal.SIGTERM)
        if client.wait() != 0:
            raise RuntimeError("live client failed")
        d = json.loads(out.read_text())
        out.unlink()
        if r.returncode != 0:
            raise RuntimeError(f"warm --order {order} failed: {r.stderr[-800:]}")
        done = json.loads((wd / "dump" / "DONE").read_text()) if (wd / "dump" / "DONE").exists() else {}
        items = int(dst.stats()["curr_items"])
    shutil.rmtree(wd, ignore_errors=True)
    res: dict[str, Any] = {"order": order, "warm_s": round(took, 2), "target_items": items}
    if "order" in done:
        res["first_key_list_after_s"] = done["order"].get("first_key_list_after_s")
    res.update(hit_rates(d, start, took))
    return res


def median_or_none(xs: list[float | None]) -> float | None:
    """A run that never reached 90% counts as the longest."""
    if any(x is None for x in xs):
        return None if all(x is None for x in xs) else max(x for x in xs if x is not None)
    return statistics.median(x for x in xs if x is not None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=500_000)
    ap.add_argument("--value-size", type=int, default=1000)
    ap.add_argument("--touch", type=int, default=1_000_000, help="Zipf reads replayed on the source")
    ap.add_argument("--warm-rate", type=int, default=50_000, help="the warm's items/s from the source")
    ap.add_argument("--rate", type=float, default=2000.0, help="the target's read workload, requests/s")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--memcached", default=None, help="memcached binary (default: the first on PATH)")
    a = ap.parse_args()
    if not DUMPER.exists():
        sys.exit(f"{DUMPER} not built: run `make build`")
    result: dict[str, Any] = {
        "benchmark": "hot_first",
        "cpus": os.cpu_count(),
        "note": "shared, noisy machine: compare within this run only",
        "items": a.items,
        "value_size": a.value_size,
        "warm_rate_items_per_s": a.warm_rate,
        "read_workload": {"rate_per_s": a.rate, "command": "mg <key> v", "keys": "Zipf s=1"},
        "load_average_at_start": [round(x, 1) for x in os.getloadavg()],
    }
    mem = a.items * (a.value_size + 200) // 2**20 + 256
    with (
        tempfile.TemporaryDirectory(prefix="cwhot-") as tmp,
        MemcachedServer(memory_mb=mem, threads=4, binary=a.memcached) as src,
    ):
        work = Path(tmp)
        result["memcached_version"] = src.stats()["version"]
        load(src, a.items, a.value_size)
        time.sleep(2.0)  # memcached's clock ticks once a second: the reads come after every store
        t0 = time.monotonic()
        touch(src, a.items, a.touch)
        result["touch_s"] = round(time.monotonic() - t0, 1)
        time.sleep(1.1)
        warms: list[dict[str, Any]] = []
        for i in range(a.runs):
            for order in ("crawl", "recency") if i % 2 == 0 else ("recency", "crawl"):
                warms.append(one_warm(order, src, a, work))
                brief = {k: warms[-1][k] for k in ("order", "warm_s", "t90_s", "at")}
                print(json.dumps(brief), file=sys.stderr)
    result["warms"] = warms
    summary: dict[str, Any] = {}
    for order in ("crawl", "recency"):
        rs = [w for w in warms if w["order"] == order]
        summary[order] = {
            "warm_s": statistics.median(w["warm_s"] for w in rs),
            **{p: statistics.median(w["at"][p] or 0.0 for w in rs) for p in rs[0]["at"]},
            "t90_s": median_or_none([w["t90_s"] for w in rs]),
        }
    c25, r25 = summary["crawl"]["25%"], summary["recency"]["25%"]
    summary["recency_over_crawl_at_25%"] = round(r25 / c25, 2) if c25 else None
    result["summary_medians"] = summary
    result["target_2x_at_25pct"] = bool((c25 == 0 and r25 > 0) or (c25 and r25 / c25 >= 2.0))
    c90, r90 = summary["crawl"]["t90_s"], summary["recency"]["t90_s"]
    summary["recency_over_crawl_t90"] = round(r90 / c90, 2) if c90 and r90 is not None else None
    summary["recency_over_crawl_warm_s"] = round(summary["recency"]["warm_s"] / summary["crawl"]["warm_s"], 3)
    result["target_t90_half_of_crawl"] = bool(c90 and r90 is not None and r90 <= 0.5 * c90)
    result["target_warm_within_10pct_of_crawl"] = summary["recency_over_crawl_warm_s"] <= 1.1
    result["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    survive_closed_outputs()  # `... | head`: the run still finishes and stops what it started
    main()
