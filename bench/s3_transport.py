"""S3 as the transport (issue 25) against the volume path, on one machine. Prints JSON.

1. **Warm time**: the same warm (one source memcached, one destination, flushed by a fresh server each
   run) through `cachewarm warm` (files in a local directory: the volume path's data flow without the
   volume) and through `cachewarm warm --via-s3` against moto's S3 server on 127.0.0.1 (dump, verified
   multipart upload, range GETs, populate). Sets: 1,000,000 x 1 KB and 100,000 x 10 KB (BENCH_SETS
   overrides, e.g. `20000x1000,5000x10000` for a smoke run); runs alternate, BENCH_RUNS each; medians.
   Each run's S3 requests (the warm summary's `s3` counts) give **requests per GB** each way.
2. **Memory of the uploader and the downloader**: the node agents as processes — `agent dump --to-s3`
   (the uploader; the dumper is its child and not counted) and `agent populate --from-s3` (the
   downloader, 4 range GETs in flight, and the populator loop's main process; its worker processes
   are not counted) — peak RSS sampled every 20 ms, for the first set at its size and at a quarter of
   it: fixed memory means the two peaks are about equal.

moto's server is a single Python process on the same 2 cores: the S3 times are an upper bound of the
transport's own cost, not S3's throughput. Compare within one run only.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import boto3
import psutil
from cachewarm.stdio import survive_closed_outputs
from cachewarm.testing.memcached import MemcachedServer, memcached_binary

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import completeness, load, settle  # bench/peers.py's loader and checks

REPO = Path(__file__).resolve().parent.parent
DUMPER = Path(os.environ.get("CACHEWARM_DUMP", REPO / "build" / "release" / "cachewarm-dump"))
CLI = [sys.executable, "-c", "from cachewarm.cli import main; main()"]
SETS = os.environ.get("BENCH_SETS", "1000000x1000,100000x10000")
RUNS = max(1, int(os.environ.get("BENCH_RUNS", "3")))
RELEASE = os.environ.get("BENCH_MEMCACHED", "1.6.18")
BUCKET = "cachewarm-bench"
NODE = "i-0123456789abcdef0"
GB = 1e9


def parse_sets(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        n, _, size = part.partition("x")
        out.append((int(n), int(size)))
    return out


class LocalS3:
    """moto's S3 server on a free port, its bucket, and the environment the agents need to reach it."""

    def __enter__(self) -> LocalS3:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.url = f"http://{host}:{port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | {
            "AWS_ENDPOINT_URL_S3": self.url,
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "CACHEWARM_DUMP": str(DUMPER),
            "CACHEWARM_INSTANCE_ARN": f"arn:aws:ec2:us-east-1:123456789012:instance/{NODE}",
        }
        self.client = boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
        )
        self.client.create_bucket(Bucket=BUCKET)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()


def last_json(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.strip().splitlines()):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return {}


def warm(
    mode: str, src: MemcachedServer, dst: MemcachedServer, work: Path, s3: LocalS3, run: int
) -> dict[str, Any]:
    shutil.rmtree(work, ignore_errors=True)
    argv = [*CLI, "warm", "--source", src.address, "--target", dst.address, "--workdir", str(work)]
    argv += ["--no-check", "--json"]
    if mode == "s3":
        argv += ["--via-s3", f"s3://{BUCKET}/warm-{run}-{time.monotonic_ns()}", "--s3-endpoint-url", s3.url]
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, env=s3.env)
    out: dict[str, Any] = {"seconds": round(time.monotonic() - t0, 3), "exit": p.returncode}
    if p.returncode != 0:
        out["stderr_tail"] = p.stderr.strip().splitlines()[-5:]
    s = last_json(p.stdout)
    s = s.get("warm_summary", s)
    out.update({k: s[k] for k in ("dump_s", "populate_s", "copied", "bytes") if k in s})
    if s.get("s3"):
        c = s["s3"]
        out["s3"] = c
        gb = max(1, int(c.get("uploaded_bytes", 0))) / GB
        out["upload_requests_per_gb"] = round(int(c.get("upload_requests", 0)) / gb, 1)
        out["download_requests_per_gb"] = round(int(c.get("download_requests", 0)) / gb, 1)
    shutil.rmtree(work, ignore_errors=True)
    return out


def peak_rss(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run `argv`; its own process's peak RSS (children not counted), sampled every 20 ms."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    proc = psutil.Process(p.pid)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            try:
                peak = max(peak, proc.memory_info().rss)
            except psutil.Error:
                return
            stop.wait(0.02)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    _, err = p.communicate()
    stop.set()
    t.join()
    r: dict[str, Any] = {"peak_rss_mb": round(peak / 2**20, 1), "exit": p.returncode}
    if p.returncode != 0:
        r["stderr_tail"] = err.strip().splitlines()[-5:]
    return r


def agents_memory(n: int, size: int, s3: LocalS3, tmp: Path, binary: str) -> dict[str, Any]:
    prefix = f"mem-{n}-{time.monotonic_ns()}"
    to_s3 = ["--adaptive", "off", "--to-s3", f"s3://{BUCKET}/{prefix}"]
    from_s3 = ["--state-dir", str(tmp / "state"), "--from-s3", f"s3://{BUCKET}/{prefix}/{NODE}"]
    common = [
        "--warm-id",
        "bench-1",
        "--node-id",
        NODE,
        "--status-bucket",
        BUCKET,
        "--status-prefix",
        "status",
    ]
    with MemcachedServer(memory_mb=4096, threads=2, binary=binary) as src:
        load(src, n, size)
        settle(src)
        dump = peak_rss(
            [*CLI, "agent", "dump", *common, "--mount", str(tmp / "src"), "--memcached", src.address, *to_s3],
            s3.env,
        )
    with MemcachedServer(memory_mb=4096, threads=2, binary=binary) as dst:
        pop = peak_rss(
            [*CLI, "agent", "populate", *common, "--mount", str(tmp / "pop"), "--to", dst.address, *from_s3],
            s3.env,
        )
        pop["destination_items"] = int(dst.stats()["curr_items"])
    for d in ("src", "pop", "state"):
        shutil.rmtree(tmp / d, ignore_errors=True)
    return {"items": n, "value_bytes": size, "dump_bytes": n * size, "uploader": dump, "downloader": pop}


def bench_set(n: int, size: int, s3: LocalS3, tmp: Path, binary: str) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"volume-path": [], "s3": []}
    with MemcachedServer(memory_mb=4096, threads=2, binary=binary) as src:
        load(src, n, size)
        settle(src)
        for r in range(RUNS):
            for mode in ["volume-path", "s3"] if r % 2 == 0 else ["s3", "volume-path"]:
                settle(src)
                with MemcachedServer(memory_mb=4096, threads=2, binary=binary) as dst:
                    res = warm(mode, src, dst, tmp / "work", s3, r)
                    res["completeness"] = completeness(src, dst, n, size, 1000)
                runs[mode].append(res)
                print(
                    f"{n} x {size} B {mode:<12} run {r + 1}: {res['seconds']:.2f} s, exit {res['exit']}",
                    file=sys.stderr,
                    flush=True,
                )
    out: dict[str, Any] = {"items": n, "value_bytes": size, "modes": {}}
    for mode, rs in runs.items():
        med = statistics.median(x["seconds"] for x in rs)
        out["modes"][mode] = {
            "median_s": round(med, 3),
            "items_per_s": round(n / med),
            "all_complete": all(x["exit"] == 0 and x["completeness"]["complete"] for x in rs),
            "runs": rs,
        }
    s3runs = [x for x in runs["s3"] if "upload_requests_per_gb" in x]
    if s3runs:
        out["s3_requests_per_gb"] = {
            "upload": statistics.median(x["upload_requests_per_gb"] for x in s3runs),
            "download": statistics.median(x["download_requests_per_gb"] for x in s3runs),
        }
    out["s3_vs_volume_path"] = round(
        out["modes"]["s3"]["median_s"] / out["modes"]["volume-path"]["median_s"], 3
    )
    return out


def main() -> None:
    survive_closed_outputs()
    sets = parse_sets(SETS)
    binary = memcached_binary(RELEASE)
    result: dict[str, Any] = {"benchmark": "s3_transport", "memcached": RELEASE, "runs": RUNS, "sets": []}
    with LocalS3() as s3, tempfile.TemporaryDirectory(prefix="bench-s3-") as d:
        tmp = Path(d)
        for n, size in sets:
            result["sets"].append(bench_set(n, size, s3, tmp, binary))
        n, size = sets[0]
        result["memory"] = [agents_memory(m, size, s3, tmp, binary) for m in (n, max(1, n // 4))]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
