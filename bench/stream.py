"""Benchmark the stream mode (`cachewarm-dump --to`) against memcached's own mcdumpload, in the same run.

    MCDUMPLOAD=/path/to/mcdumpload python3 bench/stream.py [--runs 3] [--quick] [--sizes 1000000x1000,...]

Per data set (1,000,000 x 1,000 B and 100,000 x 10,000 B; --quick: a tenth), one source memcached is
loaded once; then, alternating, each run into a fresh destination (`-m 4096 -t 2`, both servers):
  * mcdumpload `--add` (lru_crawler mgdump + pipelined mg -> ms; the peer a memcached user would pick),
  * the stream mode: cachewarm-dump --threads 2 --to <destination> (add mode, the C++ process alone),
  * `cachewarm warm --stream --no-check` (the same through the CLI: Python start-up included),
each complete or counted as failed (the destination's curr_items, the stream's summary). Prints one
JSON document: per data set the times, medians, each one's speed ratio to mcdumpload
(mcdumpload's median / its median: > 1 is faster) and completeness.

mcdumpload needs a memcached whose `lru_crawler mgdump` answers without the `OK` line (1.6.38; not
1.6.18, which has no mgdump, nor >= 1.6.43): `MEMCACHED=/path` or $CACHEWARM_MEMCACHED_DIR/1.6.38.
Without MCDUMPLOAD (or that memcached) the peer is skipped with the reason printed, and the stream is
timed alone. For bench/peers.py: `compare(items, size, runs, ...)` returns one data set's dict.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cachewarm.stdio import survive_closed_outputs
from cachewarm.testing.memcached import MemcachedNotFound, MemcachedServer, memcached_binary

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dump import load  # bench/dump.py's pipelined loader

REPO = Path(__file__).resolve().parent.parent
DUMPER = Path(os.environ.get("CACHEWARM_DUMP", REPO / "build" / "release" / "cachewarm-dump"))
CLI = [sys.executable, "-c", "from cachewarm.cli import main; main()"]
PEER_RELEASE = "1.6.38"


def peer_setup() -> tuple[str | None, str | None, str]:
    """(mcdumpload, memcached binary, why the peer is skipped or "")."""
    peer = os.environ.get("MCDUMPLOAD")
    if not peer or not Path(peer).is_file():
        return None, None, "MCDUMPLOAD is not set to an mcdumpload binary"
    mc = os.environ.get("MEMCACHED")
    if not mc:
        try:
            mc = memcached_binary(PEER_RELEASE)
        except MemcachedNotFound as e:
            return None, None, f"mcdumpload needs memcached {PEER_RELEASE} (mgdump without OK): {e}"
    return peer, mc, ""


def run_peer(peer: str, src: MemcachedServer, dst: MemcachedServer) -> tuple[float, str]:
    cmd = [
        peer,
        f"--srcip={src.host}",
        f"--srcport={src.port}",
        f"--dstip={dst.host}",
        f"--dstport={dst.port}",
        "--add",
    ]
    for _ in range(100):  # memcached's own crawler may hold the LRU crawler right after a bulk load
        t = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True)
        if "locked" not in r.stderr and "BUSY" not in r.stderr:
            return time.monotonic() - t, "" if r.returncode == 0 else r.stderr[-300:]
        time.sleep(0.2)
    return float("nan"), "the crawler stayed locked"


def run_stream(src: MemcachedServer, dst: MemcachedServer, work: Path) -> tuple[float, str]:
    out = work / "stream"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(DUMPER), "--host", src.host, "--port", str(src.port), "--out", str(out), "--to", dst.address]
    t = time.monotonic()
    r = subprocess.run([*cmd, "--progress-interval", "60"], capture_output=True, text=True)
    took = time.monotonic() - t
    ok = r.returncode == 0 and '"ok": true' in (r.stdout.strip().splitlines() or [""])[-1]
    return took, "" if ok else f"exit {r.returncode}: {r.stderr[-300:]}"


def run_warm_stream(src: MemcachedServer, dst: MemcachedServer, work: Path) -> tuple[float, str]:
    wd = work / "warm"
    shutil.rmtree(wd, ignore_errors=True)
    cmd = [*CLI, "warm", "--stream", "--no-check", "--json", "--source", src.address, "--target", dst.address]
    env = {**os.environ, "CACHEWARM_DUMP": str(DUMPER)}
    t = time.monotonic()
    r = subprocess.run([*cmd, "--workdir", str(wd)], capture_output=True, text=True, env=env)
    return time.monotonic() - t, "" if r.returncode == 0 else f"exit {r.returncode}: {r.stderr[-300:]}"


def compare(items: int, size: int, runs: int, peer: str | None, binary: str | None) -> dict[str, Any]:
    """One data set: alternating runs of each tool into fresh destinations; times, medians, ratios."""
    tools = {"stream": run_stream, "warm_stream": run_warm_stream}
    if peer:
        tools = {"mcdumpload": lambda s, d, w: run_peer(peer, s, d), **tools}
    times: dict[str, list[float]] = {k: [] for k in tools}
    failures: dict[str, list[str]] = {k: [] for k in tools}
    with tempfile.TemporaryDirectory(prefix="bench-stream-") as tmp:
        src = MemcachedServer(memory_mb=4096, threads=2, binary=binary).start()
        try:
            load(src, items, size, "key:")
            for _ in range(runs):
                for name, fn in tools.items():
                    dst = MemcachedServer(memory_mb=4096, threads=2, binary=binary).start()
                    try:
                        took, err = fn(src, dst, Path(tmp))
                        have = int(dst.stats()["curr_items"])
                    finally:
                        dst.stop()
                    if err or have != items:
                        failures[name].append(err or f"destination holds {have} of {items}")
                    else:
                        times[name].append(round(took, 3))
                    print(
                        f"{items} x {size} {name}: {took:.3f}s {err or 'complete'}",
                        file=sys.stderr,
                        flush=True,
                    )
        finally:
            src.stop()
    med = {k: round(statistics.median(v), 3) if v else None for k, v in times.items()}
    base = med.get("mcdumpload")
    return {
        "items": items,
        "value_bytes": size,
        "times_s": times,
        "median_s": med,
        "items_per_s": {k: round(items / m) if m else None for k, m in med.items()},
        "speed_vs_mcdumpload": {k: round(base / m, 2) for k, m in med.items() if base and m},
        "complete": {k: not failures[k] for k in tools},
        "failures": {k: v for k, v in failures.items() if v},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a tenth of the items")
    ap.add_argument("--sizes", default="1000000x1000,100000x10000", help="ITEMSxBYTES,...")
    args = ap.parse_args()
    peer, binary, why = peer_setup()
    if why:
        print(f"mcdumpload skipped: {why}", file=sys.stderr)
    sets = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",")]
    report = {
        "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "peer": peer,
        "peer_skipped": why or None,
        "memcached": binary or "memcached on PATH",
        "data_sets": [
            compare(n // 10 if args.quick else n, size, args.runs, peer, binary) for n, size in sets
        ],
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    survive_closed_outputs()  # `... | head`: the run still finishes and stops what it started
    main()
