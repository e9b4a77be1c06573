"""cachewarm against the peer a memcached user would pick: memcached's own `mcdumpload` (issues 15, 23).

    MCDUMPLOAD=/path/to/mcdumpload python3 bench/peers.py [--runs 3] [--scale 1.0] [--modes ...]

mcdumpload is not part of this repository and nothing here fetches or builds it: build it yourself
(`git clone https://github.com/memcached/mcdumpload && make -C mcdumpload`) and name the binary in
$MCDUMPLOAD. Without it, the bench runs cachewarm's own modes and says the peer was skipped.

mcdumpload needs a memcached whose `lru_crawler mgdump` does not answer `OK` first: 1.6.38 (on both
sides here, from `make memcached-versions`; `--memcached` picks another). Per data set (1,000,000 x
1,000 B and 100,000 x 10,000 B; flags over all 32 bits, every other item with a 1-day TTL, each value
starting with its key's number), one source is loaded once; then, alternating and rotating the order,
`--runs` times each, into a fresh destination (`-m 4096 -t 2`), the defaults first (what a user gets
without flags: files, recency order, the target check):
  * `mcdumpload --add` (meta adds, like cachewarm's default), source and destination on loopback;
  * `warm` and `warm --stream` (the defaults, the target check included);
  * `warm --no-check`, `warm --no-check --order crawl`, `warm --stream --no-check`,
    `warm --stream --no-check --order crawl` (what each safety and the order cost).
The re-check's cost on the source (the files path's look at every stored item once settled, `mg <key>
c t s` without the value): the source memcached's CPU for that look over every item, measured alone,
and one dump populated with it and without it (`populate --source` against `populate
--accept-no-recheck`: the source memcached's and the populator's CPU per million items), reported as
`recheck` per data set beside each files mode's whole source CPU per million items (the stream always
re-checks: its source and dumper CPU are set beside mcdumpload's source CPU, which has none).
Each run is timed from process start to exit (the CLI's start-up included: it is what a user waits;
the package's bytecode is written first, as an installed package has it).
Per run, beside the wall time: CPU seconds per million items of each process — the dumper
(`cachewarm-dump`, sampled from /proc every 50 ms; in the stream modes it also populates), the
populator (every other process of the run: the CLI and its pool workers, from getrusage of the reaped
children less the dumper; `cli` in the stream modes), both memcacheds
(/proc/<pid>/stat before and after), mcdumpload (getrusage) — and the target check's share of the
wall time (the summary's total_s - populate_s).
The physical limit: the two servers' CPU seconds to answer `mg <key> v f t q` for every item
(pipelined, the replies discarded) and to store every item with pipelined `ms ... q` into a fresh
destination; limit_s = their sum / the cores. Each mode's `of_limit` = limit_s / its median (1.0:
the servers' CPU is all it costs).
Completeness after each run: the destination's `curr_items` against the source's, and a sample of
--sample keys read back (value, flags, TTL kind). Prints each run and, at the end, the table (markdown)
on stderr, and one JSON document on stdout: per mode the times, the median, the speed ratio to
mcdumpload's median (its time / ours: > 1 is faster) and the completeness of every run. The machine is
shared: compare within one run.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import random
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
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


# The modes, the defaults first: name -> `cachewarm warm` flags (mcdumpload is its own).
MODES: dict[str, list[str]] = {
    "warm": [],
    "warm --stream": ["--stream"],
    "warm --no-check": ["--no-check"],
    "warm --no-check --order crawl": ["--no-check", "--order", "crawl"],
    "warm --stream --no-check": ["--stream", "--no-check"],
    "warm --stream --no-check --order crawl": ["--stream", "--no-check", "--order", "crawl"],
}
SHORT = {  # --modes names
    "default": "warm",
    "stream": "warm --stream",
    "no-check": "warm --no-check",
    "no-check-crawl": "warm --no-check --order crawl",
    "stream-no-check": "warm --stream --no-check",
    "stream-no-check-crawl": "warm --stream --no-check --order crawl",
}
CLK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float | None:
    """A process's user + system CPU seconds (/proc/<pid>/stat), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLK


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


class DumperCpu:
    """Samples the CPU of every `cachewarm-dump` under a process every 50 ms (its last sample before
    it exits is what counts: up to 50 ms of it may be missed)."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[int, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.05):
            todo = [self.root]
            while todo:
                pid = todo.pop()
                todo += _children(pid)
                try:
                    with open(f"/proc/{pid}/comm") as f:
                        comm = f.read().strip()
                except OSError:
                    continue
                if comm == "cachewarm-dump" and (c := cpu_s(pid)) is not None:
                    self.seen[pid] = c

    def total(self) -> float:
        self.stop.set()
        self.thread.join()
        return sum(self.seen.values())


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


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
    mode: str, src: MemcachedServer, dst: MemcachedServer, work: Path, peer: str | None, n: int
) -> dict[str, Any]:
    env = {**os.environ, "CACHEWARM_DUMP": str(DUMPER)}
    if mode == "mcdumpload":
        assert peer is not None
        argv = [peer, f"--srcip={src.host}", f"--srcport={src.port}"]
        argv += [f"--dstip={dst.host}", f"--dstport={dst.port}", "--add"]
    else:
        shutil.rmtree(work, ignore_errors=True)
        argv = [*cachewarm_argv(), "warm", "--source", src.address, "--target", dst.address]
        argv += ["--workdir", str(work), "--json", *MODES[mode]]
    assert src.proc is not None and dst.proc is not None
    servers0 = (cpu_s(src.proc.pid) or 0.0, cpu_s(dst.proc.pid) or 0.0)
    children0 = children_cpu()
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    dumper = DumperCpu(p.pid)
    stdout, stderr = p.communicate()
    dt = time.monotonic() - t0
    dumper_s = dumper.total()
    all_s = children_cpu() - children0
    servers1 = (cpu_s(src.proc.pid) or 0.0, cpu_s(dst.proc.pid) or 0.0)
    per_m = 1e6 / n
    cpu = {
        "source_memcached": round((servers1[0] - servers0[0]) * per_m, 2),
        "destination_memcached": round((servers1[1] - servers0[1]) * per_m, 2),
    }
    if mode == "mcdumpload":
        cpu["mcdumpload"] = round(all_s * per_m, 2)
    else:
        cpu["dumper"] = round(dumper_s * per_m, 2)
        # Files: the CLI and its pool workers populate. Stream: the dumper populates; the CLI only
        # starts it and runs the target check.
        python = "cli" if "--stream" in MODES[mode] else "populator"
        cpu[python] = round(max(0.0, all_s - dumper_s) * per_m, 2)
    out: dict[str, Any] = {"seconds": round(dt, 3), "exit": p.returncode, "cpu_s_per_million": cpu}
    if p.returncode != 0:
        out["stderr_tail"] = stderr.strip().splitlines()[-5:]
    if mode == "mcdumpload":
        errs = stderr.count("SERVER_ERROR")
        if errs:
            out["server_errors"] = errs
    else:
        for line in reversed(stdout.strip().splitlines()):
            try:
                s = json.loads(line)
            except ValueError:
                continue
            out.update({k: s[k] for k in ("dump_s", "populate_s", "total_s", "copied") if k in s})
            if "total_s" in s and "populate_s" in s:
                out["check_s"] = round(s["total_s"] - s["populate_s"], 3)
                out["check_share"] = round(out["check_s"] / dt, 3)
                out["checked_in_target"] = s.get("checked_in_target", 0)
            break
    shutil.rmtree(work, ignore_errors=True)
    return out


def _read_all(srv: MemcachedServer, n: int, flags: bytes = b"v f t") -> None:
    """Every item read back (`mg <key> v f t q`), pipelined: one writer thread, replies discarded."""
    with socket.create_connection((srv.host, srv.port)) as sock:

        def send() -> None:
            for s in range(0, n, 10_000):
                sock.sendall(
                    b"".join(b"mg key:%d %b q\r\n" % (i, flags) for i in range(s, min(n, s + 10_000)))
                )
            sock.sendall(b"mn\r\n")

        writer = threading.Thread(target=send, daemon=True)
        writer.start()
        tail = b""
        while tail != b"MN\r\n":
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise RuntimeError(f"{srv.address} closed the connection")
            tail = (tail + chunk[-4:])[-4:]
        writer.join()


def physical_limit(src: MemcachedServer, n: int, size: int, binary: str) -> dict[str, Any]:
    """The two servers' CPU for the work itself: every item read from the source and stored into a
    fresh destination, pipelined (the client's own CPU not counted)."""
    assert src.proc is not None
    before = cpu_s(src.proc.pid) or 0.0
    _read_all(src, n)
    read_s = (cpu_s(src.proc.pid) or 0.0) - before
    # The re-check's look at every item (`mg <key> c t s`: no value), alone.
    before = cpu_s(src.proc.pid) or 0.0
    _read_all(src, n, b"c t s")
    look_s = (cpu_s(src.proc.pid) or 0.0) - before
    with MemcachedServer(memory_mb=4096, threads=2, binary=binary) as dst:
        assert dst.proc is not None
        before = cpu_s(dst.proc.pid) or 0.0
        load(dst, n, size)
        write_s = (cpu_s(dst.proc.pid) or 0.0) - before
    cores = os.cpu_count() or 1
    return {
        "source_mg_cpu_s_per_million": round(read_s * 1e6 / n, 2),
        "source_recheck_look_cpu_s_per_million": round(look_s * 1e6 / n, 2),
        "destination_ms_cpu_s_per_million": round(write_s * 1e6 / n, 2),
        "cores": cores,
        "limit_s": round((read_s + write_s) / cores, 3),
    }


def _median_of(rs: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rs if key in r]
    return round(statistics.median(vals), 3) if vals else None


def bench_set(
    n: int, size: int, modes: list[str], runs: int, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    binary = memcached_binary(args.memcached)
    runs_by_mode: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    with MemcachedServer(memory_mb=4096, threads=2, binary=binary) as src:
        load(src, n, size)
        settle(src)
        limit = physical_limit(src, n, size, binary)
        for t in range(runs):
            order = modes[t % len(modes) :] + modes[: t % len(modes)]
            for mode in order:
                settle(src)
                with MemcachedServer(memory_mb=4096, threads=2, binary=binary) as dst:
                    r = run_mode(mode, src, dst, tmp / "work", args.mcdumpload, n)
                    r["completeness"] = completeness(src, dst, n, size, args.sample)
                runs_by_mode[mode].append(r)
                print(
                    f"{n} x {size} B  {mode:<40} run {t + 1}: {r['seconds']:.2f} s, exit {r['exit']}, "
                    f"complete {r['completeness']['complete']}, cpu/M {r['cpu_s_per_million']}",
                    file=sys.stderr,
                    flush=True,
                )
        populate = populate_pair(src, binary, n, tmp)
    result: dict[str, Any] = {"items": n, "value_bytes": size, "physical_limit": limit, "modes": {}}
    base = None
    if "mcdumpload" in modes:
        base = statistics.median(r["seconds"] for r in runs_by_mode["mcdumpload"])
    for mode, rs in runs_by_mode.items():
        med = statistics.median(r["seconds"] for r in rs)
        cpu_names = sorted({k for r in rs for k in r["cpu_s_per_million"]})
        entry: dict[str, Any] = {
            "median_s": round(med, 3),
            "items_per_s": round(n / med),
            "times_s": [r["seconds"] for r in rs],
            "all_complete": all(r["completeness"]["complete"] and r["exit"] == 0 for r in rs),
            "cpu_s_per_million": {
                k: round(statistics.median(r["cpu_s_per_million"][k] for r in rs), 2) for k in cpu_names
            },
            "of_limit": round(limit["limit_s"] / med, 3),
        }
        if base is not None:
            entry["speed_vs_mcdumpload"] = round(base / med, 3)
        if (share := _median_of(rs, "check_share")) is not None and mode in ("warm", "warm --stream"):
            entry["check_s"] = _median_of(rs, "check_s")
            entry["check_share"] = share
        entry["runs"] = rs
        result["modes"][mode] = entry
    result["recheck"] = recheck_cost(limit, result["modes"], populate)
    return result


def populate_cpu(
    src: MemcachedServer, dump: Path, binary: str, state: Path, n: int, with_source: bool
) -> dict[str, Any]:
    """`cachewarm populate` of one dump into a fresh destination, with the re-check (`--source`) or
    without it (no source: `--accept-no-recheck`); the source memcached's and the populator's CPU per
    million items (the source serves nothing else meanwhile: without the re-check, ~0)."""
    assert src.proc is not None
    state.unlink(missing_ok=True)
    with MemcachedServer(memory_mb=4096, threads=2, binary=binary) as dst:
        argv = [*cachewarm_argv(), "populate", "--from", str(dump), "--to", dst.address]
        argv += ["--state-file", str(state), "--json"]
        argv += ["--source", src.address] if with_source else ["--accept-no-recheck"]
        before, children0, t0 = cpu_s(src.proc.pid) or 0.0, children_cpu(), time.monotonic()
        p = subprocess.run(argv, capture_output=True, text=True)
        dt = time.monotonic() - t0
        source_s = (cpu_s(src.proc.pid) or 0.0) - before
    out: dict[str, Any] = {
        "seconds": round(dt, 3),
        "exit": p.returncode,
        "source_memcached": round(source_s * 1e6 / n, 2),
        "populator": round((children_cpu() - children0) * 1e6 / n, 2),
    }
    if p.returncode != 0:
        out["stderr_tail"] = p.stderr.strip().splitlines()[-5:]
    return out


def populate_pair(src: MemcachedServer, binary: str, n: int, tmp: Path) -> dict[str, Any]:
    """`warm` has no switch for the re-check (`--accept-no-recheck` only accepts its absence where it
    cannot run), so one dump (`warm --no-check`, its work directory kept) is populated twice into fresh
    destinations, with the re-check and without it: the source memcached's and the populator's CPU."""
    work = tmp / "recheck"
    shutil.rmtree(work, ignore_errors=True)
    with MemcachedServer(memory_mb=4096, threads=2, binary=binary) as first:
        argv = [*cachewarm_argv(), "warm", "--source", src.address, "--target", first.address]
        argv += ["--workdir", str(work), "--no-check", "--json"]
        subprocess.run(argv, capture_output=True, check=True)
    populate = {}
    for name, on in (("with_recheck", True), ("without_recheck", False)):
        settle(src)
        populate[name] = populate_cpu(src, work / "dump", binary, tmp / "recheck-state.json", n, on)
    shutil.rmtree(work, ignore_errors=True)
    on_, off = populate["with_recheck"], populate["without_recheck"]
    populate["recheck_adds"] = {k: round(on_[k] - off[k], 2) for k in ("source_memcached", "populator")}
    return populate


def recheck_cost(limit: dict[str, Any], modes: dict[str, Any], populate: dict[str, Any]) -> dict[str, Any]:
    """The re-check's cost (docs/reliability.md "Live traffic during the warm"): one dump populated with
    it and without it (populate_pair); its look at every stored item (`mg <key> c t s`, no value)
    measured alone; each files mode's whole source CPU. The stream re-checks always (in its dumper):
    its source and dumper CPU are set beside mcdumpload's source CPU (no re-check) when the peer ran."""
    out: dict[str, Any] = {
        "source_cpu_s_per_million": limit["source_recheck_look_cpu_s_per_million"],
        "populate_cpu_s_per_million": populate,
        "warm_source_cpu_s_per_million": {
            m: e["cpu_s_per_million"]["source_memcached"]
            for m, e in modes.items()
            if m != "mcdumpload" and "--stream" not in m
        },
    }
    if "warm --stream" in modes:
        c = modes["warm --stream"]["cpu_s_per_million"]
        out["stream_cpu_s_per_million"] = {"source_memcached": c["source_memcached"], "dumper": c["dumper"]}
        if "mcdumpload" in modes:
            peer = modes["mcdumpload"]["cpu_s_per_million"]["source_memcached"]
            out["stream_cpu_s_per_million"]["mcdumpload_source_memcached"] = peer
    return out


def table(result: dict[str, Any]) -> str:
    """The issue's table (markdown, on stderr): per mode and data set the median, the ratio to
    mcdumpload, whether every run was complete, the check's share and the distance to the limit."""
    sets = [k for k in result if k.startswith("set_")]
    head = "| mode | " + " | ".join(
        f"{result[k]['items']:,} x {result[k]['value_bytes']:,} B: median (ratio), complete, check, of limit"
        for k in sets
    )
    lines = [head + " |", "|---" * (len(sets) + 1) + "|"]
    for mode in result["modes"]:
        cells = []
        for k in sets:
            e = result[k]["modes"][mode]
            ratio = f" ({e['speed_vs_mcdumpload']:.2f}x)" if "speed_vs_mcdumpload" in e else ""
            check = f"{e['check_share']:.0%}" if "check_share" in e else "-"
            cells.append(
                f"{e['median_s']:.2f} s{ratio}, {'yes' if e['all_complete'] else 'NO'}, {check}, "
                f"{e['of_limit']:.2f}"
            )
        lines.append(f"| `{mode}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


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
        "--modes",
        default=",".join(SHORT),
        help=f"which cachewarm modes, comma-separated, in this order (default: all): {', '.join(SHORT)}",
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
    compile_bytecode()
    wanted = [SHORT[m] for m in args.modes.split(",") if m]
    if not has_stream():
        print("stream modes skipped: this cachewarm's `warm` has no --stream", file=sys.stderr)
        wanted = [m for m in wanted if "--stream" not in m]
    modes += wanted
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
    print(table(result), file=sys.stderr)
    for k in (k for k in result if k.startswith("set_")):
        r = result[k]["recheck"]
        print(
            f"re-check, {result[k]['items']:,} x {result[k]['value_bytes']:,} B: "
            f"{r['source_cpu_s_per_million']} source CPU s per million items (its look alone), beside the "
            f"warm's whole source CPU per million: {r['warm_source_cpu_s_per_million']}",
            file=sys.stderr,
        )
        w = r["populate_cpu_s_per_million"]
        print(
            f"  `populate` of one dump, CPU s per million items: with the re-check {w['with_recheck']}, "
            f"without {w['without_recheck']}: the re-check adds {w['recheck_adds']}",
            file=sys.stderr,
        )
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    survive_closed_outputs()  # `... | head`: the run still finishes and stops what it started
    main()
