"""cachewarm against the peer a memcached user would pick: memcached's own `mcdumpload` (issue 15).

    MCDUMPLOAD=/path/to/mcdumpload python3 bench/peers.py [--runs 3] [--scale 1.0]

mcdumpload is not part of this repository and nothing here fetches or builds it: build it yourself
(`git clone https://github.com/memcached/mcdumpload && make -C mcdumpload`) and name the binary in
$MCDUMPLOAD. Without it, the bench runs cachewarm's own modes and says the peer was skipped.

mcdumpload needs a memcached whose `lru_crawler mgdump` does not answer `OK` first: 1.6.38 (on both
sides here, from `make memcached-versions`; `--memcached` picks another). Per data set (1,000,000 x
1,000 B and 100,000 x 10,000 B; flags over all 32 bits, every other item with a 1-day TTL, each value
starting with its key's number), one source is loaded once; then, alternating and rotating the order,
`--runs` times each, into a fresh destination (`-m 4096 -t 2`):
  * `mcdumpload --add` (meta adds, like cachewarm's default), source and destination on loopback;
  * `cachewarm warm --no-check --json` (files: the dumper and the populator on this machine);
  * `cachewarm warm --stream --no-check --json`, when this cachewarm has `--stream`;
  * with --crawl-order-too, both again with `--order crawl` (modes `files-crawl`, `stream-crawl`): the
    default order, recency, lists every key before the first fetch.
Each run is timed from process start to exit (the CLI's start-up included: it is what a user waits;
the package's bytecode is written first, as an installed package has it).
Completeness after each run: the destination's `curr_items` against the source's, and a sample of
--sample keys read back (value, flags, TTL kind). Prints each run on stderr and one JSON document on
stdout: per mode the times, the median, the speed ratio to mcdumpload's median (its time / ours:
> 1 is faster) and the completeness of every run. The machine is shared: compare within one run.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cachewarm.datapath.meta import MetaConnection
from cachewarm.stdio import survive_closed_outputs
from cachewarm.testing.memcached import MemcachedServer, binary_version, memcached_binary

REPO = Path(__file__).resolve().parent.parent
DUMPER = Path(os.environ.get("CACHEWARM_DUMP", REPO / "build" / "release" / "cachewarm-dump"))
TTL = 86_400  # every odd item's


def value_of(i: int, size: int, filler: bytes) -> bytes:
    return b"%010d" % i + filler[: size - 10]


def flags_of(i: int) -> int:
    return (i * 2654435761) & 0xFFFFFFFF


def load(srv: MemcachedServer, n: int, size: int) -> None:
    filler = bytes(range(97, 123)) * (size // 26 + 1)
    c = MetaConnection(srv.host, srv.port)
    c.connect()
    step = max(1, min(1000, (1 << 20) // size))
    for s in range(0, n, step):
        buf = bytearray()
        for i in range(s, min(n, s + step)):
            t = TTL if i & 1 else 0
            head = b"ms key:%d %d T%d F%d q\r\n" % (i, size, t, flags_of(i))
            buf += head + value_of(i, size, filler) + b"\r\n"
        c.send_batch(buf, min(n, s + step) - s)
    t = c.flush()
    c.close()
    if t.errors:
        raise RuntimeError(f"loading the source failed: {t.first_error}")


def settle(srv: MemcachedServer, timeout: float = 120.0) -> None:
    """Wait until the source's hash table has finished growing and its own crawler is idle: right after
    a bulk load a crawl answers `ERROR locked try again later` (mcdumpload then exits 1)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = srv.stats()
        if st.get("hash_is_expanding", "0") == "0" and st.get("lru_crawler_running", "0") == "0":
            return
        time.sleep(0.2)
    raise RuntimeError(f"{srv.address}: still expanding its hash table or crawling after {timeout:g} s")


def completeness(
    src: MemcachedServer, dst: MemcachedServer, n: int, size: int, sample: int
) -> dict[str, Any]:
    """The destination's item count against the source's, and `sample` random keys read back."""
    filler = bytes(range(97, 123)) * (size // 26 + 1)
    src_items = int(src.stats()["curr_items"])
    dst_items = int(dst.stats()["curr_items"])
    rng = random.Random(n)
    idx = rng.sample(range(n), min(sample, n))
    with MetaConnection(dst.host, dst.port) as c:
        got = c.get_many([b"key:%d" % i for i in idx])
    bad = 0
    for i in idx:
        it = got.get(b"key:%d" % i)
        ttl_ok = it is not None and (0 < (it.ttl or 0) <= TTL if i & 1 else it.ttl == -1)
        if it is None or it.value != value_of(i, size, filler) or it.flags != flags_of(i) or not ttl_ok:
            bad += 1
    return {
        "source_items": src_items,
        "destination_items": dst_items,
        "sample": len(idx),
        "sample_bad": bad,
        "complete": dst_items == src_items == n and bad == 0,
    }


def cachewarm_argv() -> list[str]:
    return [sys.executable, "-m", "cachewarm"]


def compile_bytecode() -> None:
    """Write the package's bytecode before timing, as an installed package has it: a checkout run with
    PYTHONDONTWRITEBYTECODE=1 (as here) compiles every module on each start, ~0.1-0.2 s of each run."""
    import cachewarm

    compileall.compile_dir(str(Path(cachewarm.__file__).parent), quiet=1)


def has_stream() -> bool:
    """Whether this cachewarm's `warm` has a stream mode (issue 15, section 2)."""
    out = subprocess.run([*cachewarm_argv(), "warm", "--help"], capture_output=True, text=True)
    return "--stream" in out.stdout


def run_mode(
    mode: str, src: MemcachedServer, dst: MemcachedServer, work: Path, peer: str | None
) -> dict[str, Any]:
    env = {**os.environ, "CACHEWARM_DUMP": str(DUMPER)}
    if mode == "mcdumpload":
        assert peer is not None
        argv = [peer, f"--srcip={src.host}", f"--srcport={src.port}"]
        argv += [f"--dstip={dst.host}", f"--dstport={dst.port}", "--add"]
    else:
        shutil.rmtree(work, ignore_errors=True)
        argv = [*cachewarm_argv(), "warm", "--source", src.address, "--target", dst.address]
        argv += ["--workdir", str(work), "--no-check", "--json"]
        if mode.startswith("stream"):
            argv.append("--stream")
        if mode.endswith("-crawl"):  # the dump in the crawl's order, fetching while it lists
            argv += ["--order", "crawl"]
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    dt = time.monotonic() - t0
    out: dict[str, Any] = {"seconds": round(dt, 3), "exit": p.returncode}
    if p.returncode != 0:
        out["stderr_tail"] = p.stderr.strip().splitlines()[-5:]
    if mode == "mcdumpload":
        errs = p.stderr.count("SERVER_ERROR")
        if errs:
            out["server_errors"] = errs
    else:
        for line in reversed(p.stdout.strip().splitlines()):
            try:
                s = json.loads(line)
            except ValueError:
                continue
            out.update({k: s[k] for k in ("dump_s", "populate_s", "copied") if k in s})
            break
    shutil.rmtree(work, ignore_errors=True)
    return out


def bench_set(
    n: int, size: int, modes: list[str], runs: int, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    binary = memcached_binary(args.memcached)
    runs_by_mode: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    with MemcachedServer(memory_mb=4096, threads=2, binary=binary) as src:
        load(src, n, size)
        settle(src)
        for t in range(runs):
            order = modes[t % len(modes) :] + modes[: t % len(modes)]
            for mode in order:
                settle(src)
                with MemcachedServer(memory_mb=4096, threads=2, binary=binary) as dst:
                    r = run_mode(mode, src, dst, tmp / "work", args.mcdumpload)
                    r["completeness"] = completeness(src, dst, n, size, args.sample)
                runs_by_mode[mode].append(r)
                print(
                    f"{n} x {size} B  {mode:<10} run {t + 1}: {r['seconds']:.2f} s, exit {r['exit']}, "
                    f"complete {r['completeness']['complete']}",
                    file=sys.stderr,
                    flush=True,
                )
    result: dict[str, Any] = {"items": n, "value_bytes": size, "modes": {}}
    base = None
    if "mcdumpload" in modes:
        base = statistics.median(r["seconds"] for r in runs_by_mode["mcdumpload"])
    for mode, rs in runs_by_mode.items():
        med = statistics.median(r["seconds"] for r in rs)
        entry: dict[str, Any] = {
            "median_s": round(med, 3),
            "items_per_s": round(n / med),
            "times_s": [r["seconds"] for r in rs],
            "all_complete": all(r["completeness"]["complete"] and r["exit"] == 0 for r in rs),
            "runs": rs,
        }
        if base is not None:
            entry["speed_vs_mcdumpload"] = round(base / med, 3)
        result["modes"][mode] = entry
    return result


def machine(args: argparse.Namespace) -> dict[str, Any]:
    with open("/proc/meminfo") as f:
        mem_kb = next(int(ln.split()[1]) for ln in f if ln.startswith("MemTotal:"))
    return {
        "nproc": os.cpu_count(),
        "memory_gb": round(mem_kb / 1e6, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "memcached": binary_version(memcached_binary(args.memcached)),
        "loadavg_start": os.getloadavg(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=int(os.environ.get("BENCH_RUNS", "3")))
    ap.add_argument("--scale", type=float, default=float(os.environ.get("BENCH_SCALE", "1.0")))
    ap.add_argument("--sample", type=int, default=1000, help="keys read back per run")
    ap.add_argument("--memcached", default="1.6.38", help="memcached release on both sides")
    ap.add_argument("--mcdumpload", default=os.environ.get("MCDUMPLOAD") or None)
    ap.add_argument("--sets", default="1k,10k", help="which data sets: 1k, 10k or both")
    ap.add_argument(
        "--workdir-root",
        default=None,
        help="where the files mode's work directory goes (default: the system's temporary directory, "
        "a disk here; /dev/shm puts the dump on tmpfs)",
    )
    ap.add_argument(
        "--crawl-order-too",
        action="store_true",
        help="also run files and stream with --order crawl (the default order, recency, lists every key "
        "before the first fetch)",
    )
    args = ap.parse_args()
    modes = []
    peer_note = None
    if args.mcdumpload and Path(args.mcdumpload).is_file() and os.access(args.mcdumpload, os.X_OK):
        modes.append("mcdumpload")
    else:
        peer_note = (
            "mcdumpload skipped: set MCDUMPLOAD=/path/to/mcdumpload (build it yourself: git clone "
            "https://github.com/memcached/mcdumpload && make -C mcdumpload)"
        )
        print(peer_note, file=sys.stderr)
    modes.append("files")
    compile_bytecode()
    if has_stream():
        modes.append("stream")
    else:
        print("stream mode skipped: this cachewarm's `warm` has no --stream", file=sys.stderr)
    if args.crawl_order_too:
        modes += [f"{m}-crawl" for m in modes if m in ("files", "stream")]
    sets = {"1k": (1_000_000, 1000), "10k": (100_000, 10_000)}
    result: dict[str, Any] = {
        "benchmark": "peers",
        "machine": machine(args),
        "mcdumpload": args.mcdumpload if "mcdumpload" in modes else None,
        "note": peer_note or "medians of alternating runs; speed_vs_mcdumpload = its median time / ours",
        "runs": args.runs,
        "modes": modes,
    }
    result["workdir_root"] = args.workdir_root or tempfile.gettempdir()
    with tempfile.TemporaryDirectory(prefix="cachewarm-peers-", dir=args.workdir_root) as d:
        for name in args.sets.split(","):
            n, size = sets[name]
            n = max(1, int(n * args.scale))
            result[f"set_{name}"] = bench_set(n, size, modes, args.runs, args, Path(d))
    result["machine"]["loadavg_end"] = os.getloadavg()
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    survive_closed_outputs()  # `... | head`: the run still finishes and stops what it started
    main()
