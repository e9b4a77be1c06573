"""What a dump onto a slow output does to the source's live clients: p50/p99 of a live `mg` client
alone, then during dumps whose output fsyncs slowly, in the same run.

    python3 bench/source_latency.py [--items 1000000] [--value-size 1000] [--rate 2000] [--runs 2]

memcached before 1.6.19 holds a hash-bucket lock while it writes `lru_crawler metadump` output to a
client that does not read; a dumper whose crawl thread waits on the disk (key lists are fsynced)
therefore stalls every request for keys under that lock, and the memcached worker threads serving
them. The dumper reads the crawl socket on a thread of its own into memory (dumper-cpp/src/crawl_stream.h).

Setup: a fresh `memcached -t 4` (the first `memcached` on PATH; Debian 12's is 1.6.18), --items of
--value-size bytes. The live client is a separate process on its own connection sending `mg <key> v`
for uniformly random loaded keys at a steady --rate, open-loop: each request is sent when it is due
and its latency counts from then, so a stall delays every request due during it. Measured:
  * alone, for --alone-s seconds;
  * during each dump (from its start to its end), and during its crawl alone (the first crawl_s);
for each dumper: the one under test (CACHEWARM_DUMP, default build/release/cachewarm-dump) and, if
given, --old PATH (a build of the dumper before the change being measured; optional).
The output is deliberately slow the same way for both: every fsync/fdatasync sleeps --sync-delay-ms
first (an LD_PRELOAD shim compiled here; the new dumper's --debug-sync-delay-us does the same), the
files go to tmpfs. Both dumpers run gently (--threads 1 --batch 20 --max-items-per-second 250000):
a full-speed dump raises the live p99 by itself (bursts of 500-key batches occupy a server thread,
docs/FACTS), which is not what this measures; a gentle dump with a fast output is measured too, as
the reference. Alternating, --runs times. Prints one JSON document; ratio = p99(during) / p99(alone).
Target: the dumper under test within 2x on 1.6.18.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "agent"))

from cachewarm.stdio import survive_closed_outputs  # noqa: E402
from cachewarm.testing.memcached import MemcachedServer  # noqa: E402

DUMPER = Path(os.environ.get("CACHEWARM_DUMP", REPO / "build" / "release" / "cachewarm-dump"))
GENTLE = ["--threads", "1", "--batch", "20", "--max-items-per-second", "250000"]

SHIM_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>
static void slow(void) {
  static long us = -1;
  if (us < 0) { const char* e = getenv("CW_SLOW_SYNC_US"); us = e ? atol(e) : 0; }
  if (us > 0) usleep((useconds_t)us);
}
int fsync(int fd) {
  static int (*real)(int);
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  slow();
  return real(fd);
}
int fdatasync(int fd) {
  static int (*real)(int);
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
  slow();
  return real(fd);
}
"""


# ---- the live client (its own process) ------------------------------------------------------------
def client_main(host: str, port: int, items: int, rate: float, seconds: float, out: str) -> None:
    """Open-loop `mg` client: writes [(due_s, latency_s), ...] as JSON to `out`. SIGTERM ends it early
    (the requests already sent are still waited for)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    rng = random.Random(1)
    interval = 1.0 / rate
    t0 = time.perf_counter()
    due = t0
    end = t0 + seconds
    pending: list[float] = []  # due times of requests sent, in order
    head = 0
    buf = b""
    samples: list[tuple[float, float]] = []
    want = 0  # bytes of a value still to skip
    while True:
        now = time.perf_counter()
        if stop.is_set():
            end = min(end, now)
        out_b = []
        while due <= now and due < end:
            out_b.append(b"mg k%d v\r\n" % rng.randrange(items))
            pending.append(due)
            due += interval
        if out_b:
            sock.sendall(b"".join(out_b))  # small; the socket buffer takes it
        if due >= end and head == len(pending):
            break
        timeout = max(0.0, min(due, end) - time.perf_counter()) if due < end else 0.05
        for _ in sel.select(timeout):
            data = sock.recv(1 << 20)
            if not data:
                raise SystemExit("memcached closed the live client's connection")
            recv_t = time.perf_counter()
            buf += data
            while True:
                if want:
                    if len(buf) < want:
                        break
                    buf = buf[want:]
                    want = 0
                    samples.append((pending[head] - t0, recv_t - pending[head]))
                    head += 1
                    continue
                nl = buf.find(b"\r\n")
                if nl < 0:
                    break
                line, buf = buf[:nl], buf[nl + 2 :]
                if line.startswith(b"VA "):
                    want = int(line.split()[1]) + 2
                elif line == b"EN":
                    samples.append((pending[head] - t0, recv_t - pending[head]))
                    head += 1
                else:
                    raise SystemExit(f"unexpected reply {line[:80]!r}")
    with open(out, "w") as f:
        json.dump({"t0_wall": time.time() - (time.perf_counter() - t0), "samples": samples}, f)


class LiveClient:
    def __init__(self, srv: MemcachedServer, items: int, rate: float, seconds: float, work: Path) -> None:
        self.out = work / f"client-{time.monotonic_ns()}.json"
        args = [srv.host, str(srv.port), str(items), str(rate), str(seconds), str(self.out)]
        self.proc = subprocess.Popen([sys.executable, __file__, "--client", *args])

    def result(self) -> tuple[float, list[tuple[float, float]]]:
        if self.proc.wait() != 0:
            raise RuntimeError("live client failed")
        d = json.loads(self.out.read_text())
        self.out.unlink()
        return d["t0_wall"], [(a, b) for a, b in d["samples"]]


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p / 100 * len(s)))] if s else float("nan")


def summary(lat_s: list[float]) -> dict[str, float]:
    ms = [x * 1000 for x in lat_s]
    return {
        "requests": len(ms),
        "p50_ms": round(pct(ms, 50), 3),
        "p99_ms": round(pct(ms, 99), 3),
        "p999_ms": round(pct(ms, 99.9), 3),
        "max_ms": round(max(ms), 3) if ms else float("nan"),
    }


# ---- loading ----------------------------------------------------------------------------------------
def load(srv: MemcachedServer, n: int, size: int) -> None:
    def worker(lo: int, hi: int) -> None:
        with socket.create_connection((srv.host, srv.port), timeout=120) as s:
            val = b"v" * size
            for start in range(lo, hi, 2000):
                lines = [
                    b"ms k%d %d T0 F0 q\r\n%s\r\n" % (i, size, val)
                    for i in range(start, min(hi, start + 2000))
                ]
                s.sendall(b"".join(lines) + b"mn\r\n")
                reply = b""
                while not reply.endswith(b"MN\r\n"):
                    reply += s.recv(65536)
                if reply != b"MN\r\n":
                    raise RuntimeError(f"load failed: {reply[:200]!r}")

    ts = [threading.Thread(target=worker, args=(i * n // 2, (i + 1) * n // 2)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if int(srv.stats()["curr_items"]) != n:
        raise RuntimeError("not every item was stored (memcached too small?)")


def build_shim(work: Path) -> Path:
    src = work / "slow_sync.c"
    so = work / "slow_sync.so"
    src.write_text(SHIM_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(so), str(src), "-ldl"], check=True)
    return so


def one_dump(
    name: str,
    dumper: Path,
    args: list[str],
    env_extra: dict[str, str],
    srv: MemcachedServer,
    a: argparse.Namespace,
    out_root: Path,
    work: Path,
) -> dict[str, object]:
    out = out_root / "dump"
    shutil.rmtree(out, ignore_errors=True)
    # The client runs well past the dump; only the samples due while the dump ran count.
    client = LiveClient(srv, a.items, a.rate, a.max_dump_s, work)
    time.sleep(1.0)  # the client settles
    env = dict(os.environ, **env_extra)
    t_start = time.time()
    r = subprocess.run(
        [str(dumper), "--port", str(srv.port), "--out", str(out), "--progress-interval", "3600", *args],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    t_end = time.time()
    time.sleep(0.5)
    client.proc.send_signal(signal.SIGTERM)
    t0_wall, samples = client.result()
    if r.returncode != 0:
        raise RuntimeError(f"{name}: dumper failed: {r.stderr[-500:]}")
    done = json.loads((out / "DONE").read_text())
    crawl_s = float(done["timings"]["crawl_s"])
    during = [lat for due, lat in samples if t_start <= t0_wall + due <= t_end]
    in_crawl = [lat for due, lat in samples if t_start <= t0_wall + due <= t_start + crawl_s + 0.2]
    shutil.rmtree(out, ignore_errors=True)
    res: dict[str, object] = {
        "dumper": name,
        "dump_s": round(t_end - t_start, 2),
        "crawl_s": crawl_s,
        "records": done["totals"]["records"],
        "complete": done.get("complete", done["totals"]["records"] == a.items),
        "during_dump": summary(during),
        "during_crawl": summary(in_crawl),
    }
    if "crawl" in done:
        res["reader_peak_buffered_mb"] = round(done["crawl"]["reader_peak_buffered_bytes"] / 2**20, 1)
        res["reader_spilled_mb"] = round(done["crawl"]["reader_spilled_bytes"] / 2**20, 1)
    if t_end - t_start > a.max_dump_s - 1:
        res["warning"] = "the dump outlasted the client's window (--max-dump-s): late samples are missing"
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--value-size", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=2000.0, help="live client requests per second")
    ap.add_argument("--alone-s", type=float, default=10.0)
    ap.add_argument(
        "--sync-delay-ms", type=float, default=50.0, help="sleep before every fsync of the output"
    )
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--max-dump-s", type=float, default=120.0)
    ap.add_argument("--old", type=Path, default=None, help="optional: an older dumper, measured too")
    a = ap.parse_args()
    if not DUMPER.exists():
        sys.exit(f"{DUMPER} not built: run `make build`")
    result: dict[str, object] = {
        "benchmark": "source_latency",
        "cpus": os.cpu_count(),
        "note": "shared, noisy machine: compare within this run only",
        "items": a.items,
        "value_size": a.value_size,
        "live_client": {"rate_per_s": a.rate, "command": "mg <random loaded key> v", "open_loop": True},
        "slow_output": f"every fsync/fdatasync sleeps {a.sync_delay_ms} ms first; files on tmpfs",
        "dump_args": GENTLE,
        "load_average_at_start": [round(x, 1) for x in os.getloadavg()],
    }
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    with (
        tempfile.TemporaryDirectory(prefix="cwlat-") as tmp,
        tempfile.TemporaryDirectory(prefix="cwlat-", dir=shm) as tmp_mem,
        MemcachedServer(memory_mb=a.items * (a.value_size + 200) // 2**20 + 256, threads=4) as srv,
    ):
        work, out_root = Path(tmp), Path(tmp_mem)
        shim = build_shim(work)
        result["memcached_version"] = srv.stats()["version"]
        t0 = time.monotonic()
        load(srv, a.items, a.value_size)
        result["load_s"] = round(time.monotonic() - t0, 1)
        time.sleep(2.0)  # let the server's own background crawler (it runs after bulk loads) pass
        slow = {"LD_PRELOAD": str(shim), "CW_SLOW_SYNC_US": str(int(a.sync_delay_ms * 1000))}
        variants = [
            ("new, slow output", DUMPER, GENTLE, slow),
            ("new, slow output via --debug-sync-delay-us", DUMPER,
             [*GENTLE, "--debug-sync-delay-us", str(int(a.sync_delay_ms * 1000))], {}),
            ("new, fast output (reference)", DUMPER, GENTLE, {}),
        ]  # fmt: skip
        if a.old is not None and a.old.exists():
            variants.insert(1, ("old, slow output", a.old, GENTLE, slow))
        alone: list[float] = []
        runs: list[dict[str, object]] = []
        for i in range(a.runs):
            c = LiveClient(srv, a.items, a.rate, a.alone_s, work)
            _, samples = c.result()
            alone += [lat for _, lat in samples]
            for k in range(len(variants)):
                name, dumper, args, env_extra = variants[(i + k) % len(variants)]
                runs.append(one_dump(name, dumper, args, env_extra, srv, a, out_root, work))
        base = summary(alone)
        result["alone"] = base
        by_name: dict[str, list[dict[str, object]]] = {}
        for r in runs:
            by_name.setdefault(str(r["dumper"]), []).append(r)
        result["dumps"] = runs
        ratios: dict[str, object] = {}
        for name, rs in by_name.items():
            p99 = statistics.median(float(r["during_dump"]["p99_ms"]) for r in rs)  # type: ignore[index]
            p99c = statistics.median(float(r["during_crawl"]["p99_ms"]) for r in rs)  # type: ignore[index]
            ratios[name] = {
                "p99_during_dump_ms_median": round(p99, 3),
                "ratio_p99_during_over_alone": round(p99 / float(base["p99_ms"]), 2),
                "ratio_p99_during_crawl_over_alone": round(p99c / float(base["p99_ms"]), 2),
            }
        result["ratios"] = ratios
        result["target_new_slow_output_le_2x"] = all(
            float(v["ratio_p99_during_over_alone"]) <= 2.0  # type: ignore[index]
            for k, v in ratios.items()
            if k.startswith("new, slow")
        )
    result["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    survive_closed_outputs()  # `... | head`: the run still finishes and stops what it started
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        h, p, n, rate, secs, out = sys.argv[2:8]
        client_main(h, int(p), int(n), float(rate), float(secs), out)
    else:
        main()
