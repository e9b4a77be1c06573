"""Shared-volume benchmark (issue 13 section 1). Prints JSON. Needs root, loop devices and XFS.

On AWS the dumper writes an io2 multi-attach volume and the populator reads it through a second
attachment mounted `ro,norecovery`. Here two loop devices over one image file play those two
attachments (the reader adds `nouuid`: both mounts share one kernel). In the same run:

1. **warm ratio**: the same warm (BENCH_ITEMS items of BENCH_VALUE_BYTES, default 200,000 x 1 KB,
   from one source memcached into one destination, flushed between runs) through
   - a plain directory: the dumper and `populate()` as `cachewarm warm` runs them (files stream
     through, poll 0.1 s);
   - the two loop devices: the node agent's own `run_dump` (the writer publishes with freeze/thaw)
     and `run_populate` (remount between rounds), each on its device, formatted and mounted
     beforehand (not timed).
   Same dumper settings both ways: the agent's own defaults (2 threads; the adaptive guard on, as
   the agent runs it on AWS; BENCH_DUMPER_FLAGS adds flags to both). Runs alternate, BENCH_RUNS
   (>= 3) each; medians. Target: loop / plain <= 1.3. Per run also the writer's own time (the
   dumper, or the agent's run_dump, from start to exit). BENCH_UNGUARDED_PAIR=1 adds the same pair
   without the adaptive guard (what the file system costs alone; the guard's start is slow). One
   more loop run without publishing (what the reader did before: wait until XFS covers its log)
   for information; BENCH_NO_PUBLISH_RUN=0 skips it. The image is sized for BENCH_ITEMS.
2. **publish-to-visible latency**: a paced dump (BENCH_PACED_RATE items/s, 1 MB files) through the
   loop devices; for every data file, the time from its publication on the writer (its ctime: the
   rename) to the populator first listing it after a remount. Also how long each freeze stalled the
   dumper's writes.

The machine is shared: compare within one run only.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError
from cachewarm.contract.status import StatusLocation
from cachewarm.datapath.dumper import DumperCommand, SourceProtection
from cachewarm.datapath.meta import MetaConnection
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.populate import PopulateConfig, populate
from cachewarm.datapath.warm import find_dumper
from cachewarm.node_agent.jobs import (
    AWS_PROTECTION,
    DumpJob,
    PopulateJob,
    Publication,
    run_dump,
    run_populate,
)
from cachewarm.node_agent.runner import SubprocessRunner
from cachewarm.node_agent.status import StatusPublisher
from cachewarm.node_agent.volume import Published, Volume
from cachewarm.stdio import survive_closed_outputs
from cachewarm.testing.memcached import MemcachedServer
from cachewarm.testing.shared_volume import IMAGE_BYTES, TEST_READER_OPTIONS, LoopVolume, unavailable_reason

ITEMS = int(os.environ.get("BENCH_ITEMS", "200000"))
VALUE_BYTES = int(os.environ.get("BENCH_VALUE_BYTES", "1000"))
RUNS = max(3, int(os.environ.get("BENCH_RUNS", "3")))
NO_PUBLISH_RUN = os.environ.get("BENCH_NO_PUBLISH_RUN", "1") != "0"
PACED_RATE = int(os.environ.get("BENCH_PACED_RATE", "40000"))
DUMPER_FLAGS = os.environ.get("BENCH_DUMPER_FLAGS", "").split()
UNGUARDED_PAIR = os.environ.get("BENCH_UNGUARDED_PAIR", "0") == "1"
# The volume holds one dump at a time: twice its bytes, at least the tests' image.
IMAGE_BYTES_NEEDED = max(IMAGE_BYTES, 2 * ITEMS * (VALUE_BYTES + 200))
NODE = "i-0123456789abcdef0"


class NullS3:
    """The status bucket, discarded: the agents' heartbeats are not what is measured."""

    def get_object(self, **kw: Any) -> Any:
        raise ClientError({"Error": {"Code": "NoSuchKey"}}, "GetObject")

    def put_object(self, **kw: Any) -> None:
        return None


def status(role: str) -> StatusPublisher:
    writer = f"arn:aws:ec2:us-east-1:123456789012:instance/{NODE}"
    where = StatusLocation("bench", "warms", "bench-1", role, NODE, writer)  # type: ignore[arg-type]
    return StatusPublisher(NullS3(), where, interval_s=3600, log=lambda m: None)


def load(srv: MemcachedServer, n: int, size: int) -> None:
    c = MetaConnection(srv.host, srv.port)
    c.connect()
    value = b"v" * size
    step = 1000
    for s in range(0, n, step):
        buf = bytearray()
        for i in range(s, min(n, s + step)):
            buf += b"ms key:%d %d T0 F%d q\r\n" % (i, size, i & 0xFFFF) + value + b"\r\n"
        c.send_batch(buf, min(n, s + step) - s)
    t = c.flush()
    c.close()
    if t.errors:
        raise RuntimeError(t.first_error)


def flush_all(srv: MemcachedServer) -> None:
    c = MetaConnection(srv.host, srv.port)
    c.connect()
    c.send_batch(b"flush_all\r\n", 0)
    c.close()
    time.sleep(1.1)  # flush_all is per second: an item set in the same second could survive it


class InTheDark(Volume):
    """The writer before this change: never publishes (the reader waits for XFS to cover its log)."""

    def publish(self) -> Published:
        return Published(0.0)


@dataclass
class Seen:
    """Wraps the populator's remounter: the wall time each data file first shows after a remount."""

    inner: Any
    source_dir: Path
    first: dict[str, float] = field(default_factory=dict)
    quiesce: bool = True

    def refresh(self) -> None:
        self.inner.refresh()
        now = time.time()
        for name in os.listdir(self.source_dir):
            if name.endswith(".cwd") and not name.startswith("."):
                self.first.setdefault(name, now)


@dataclass
class PlainResult:
    seconds: float
    writer_s: float


def plain_warm(
    src: MemcachedServer, dst: MemcachedServer, tmp: Path, dumper: Path, protection: SourceProtection
) -> PlainResult:
    out = tmp / "plain" / "dump"
    shutil.rmtree(out.parent, ignore_errors=True)
    out.mkdir(parents=True)
    argv = DumperCommand(
        dumper,
        src.host,
        src.port,
        out,
        node_id="bench",
        threads=2,
        progress_interval=0.5,
        protection=protection,
    )
    cfg = PopulateConfig(
        source_dir=out,
        destinations=[Node(dst.host, dst.port)],
        state_file=out.parent / "state.json",
        poll_interval=0.1,
    )
    results: list[Any] = []
    ended: list[float] = []

    def dump_side() -> None:
        results.append(SubprocessRunner().stream([*argv.argv(), *DUMPER_FLAGS], lambda line: None))
        ended.append(time.monotonic())

    t0 = time.monotonic()
    dump = threading.Thread(target=dump_side)
    dump.start()
    s = populate(cfg)
    dump.join()
    dt = time.monotonic() - t0
    assert results and results[0].ok, results
    assert s.stored == s.records == ITEMS, s
    return PlainResult(dt, ended[0] - t0)


@dataclass
class LoopResult:
    seconds: float
    publication: Publication
    latencies: list[float]
    writer_s: float


def loop_warm(
    src: MemcachedServer,
    dst: MemcachedServer,
    tmp: Path,
    dumper: Path,
    volume: type[Volume] = Volume,
    rate: int | None = None,
    flags: list[str] = DUMPER_FLAGS,
    protection: SourceProtection = AWS_PROTECTION,
) -> LoopResult:
    run = tmp / "loop"
    shutil.rmtree(run, ignore_errors=True)
    with LoopVolume.create(run / "volume.img", size=IMAGE_BYTES_NEEDED) as vol:
        writer_dev, reader_dev = vol.devices
        vol.format(writer_dev)
        w = vol.mount(writer_dev, run / "w", "rw,noatime")
        r = vol.mount_reader(reader_dev, run / "r")
        runner = SubprocessRunner()
        dump = DumpJob("bench-1", NODE, volume(writer_dev, w, runner), src.host, src.port, str(dumper))
        dump.threads, dump.max_items_per_second, dump.extra_args = 2, rate, flags
        dump.protection = protection
        reader = Volume(reader_dev, r, runner, reader_options=TEST_READER_OPTIONS)
        pop = PopulateJob("bench-1", NODE, reader, dst.address, state_dir=run / "state")
        seen: list[Seen] = []

        def observed(config: Any, on_progress: Callable[[Any], None]) -> Any:
            seen.append(Seen(config.remounter, config.source_dir))
            config.remounter = seen[0]
            return populate(config, on_progress)

        done: list[Publication] = []
        errors: list[BaseException] = []
        ended: list[float] = []

        def dump_side() -> None:
            try:
                done.append(run_dump(dump, status("dump"), runner, lambda m: None))
                ended.append(time.monotonic())
            except BaseException as e:
                errors.append(e)

        t0 = time.monotonic()
        thread = threading.Thread(target=dump_side)
        thread.start()
        s = run_populate(pop, status("populate"), observed, log=lambda m: None)
        dt = time.monotonic() - t0
        thread.join()
        if errors:
            raise errors[0]
        assert s.stored == s.records == ITEMS, s
        latencies = [
            first - (dump.out_dir / name).stat().st_ctime_ns / 1e9 for name, first in seen[0].first.items()
        ]
    return LoopResult(dt, done[0], latencies, ended[0] - t0)


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    reason = unavailable_reason()
    if reason is not None:
        print(f"bench/shared_volume.py needs loop devices and XFS: {reason}", file=sys.stderr)
        sys.exit(2)
    dumper = find_dumper()
    tmp = Path(tempfile.mkdtemp(prefix="cw-shared-volume-"))
    src = MemcachedServer(memory_mb=2048, threads=2).start()
    dst = MemcachedServer(memory_mb=2048, threads=2).start()
    try:
        load(src, ITEMS, VALUE_BYTES)
        plain: list[PlainResult] = []
        loop: list[LoopResult] = []
        plain_unguarded: list[PlainResult] = []
        loop_unguarded: list[LoopResult] = []
        for _ in range(RUNS):
            flush_all(dst)
            plain.append(plain_warm(src, dst, tmp, dumper, AWS_PROTECTION))
            flush_all(dst)
            loop.append(loop_warm(src, dst, tmp, dumper))
            if UNGUARDED_PAIR:
                flush_all(dst)
                plain_unguarded.append(plain_warm(src, dst, tmp, dumper, SourceProtection()))
                flush_all(dst)
                loop_unguarded.append(loop_warm(src, dst, tmp, dumper, protection=SourceProtection()))
        in_the_dark = None
        if NO_PUBLISH_RUN:
            flush_all(dst)
            in_the_dark = round(loop_warm(src, dst, tmp, dumper, volume=InTheDark).seconds, 2)
        flush_all(dst)
        paced = loop_warm(src, dst, tmp, dumper, rate=PACED_RATE, flags=["--data-file-size", "1M"])
    finally:
        src.stop()
        dst.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    plain_med = statistics.median(r.seconds for r in plain)
    loop_med = statistics.median(r.seconds for r in loop)
    pub = paced.publication
    unguarded: dict[str, Any] | None = None
    if UNGUARDED_PAIR:
        pm = statistics.median(r.seconds for r in plain_unguarded)
        lm = statistics.median(r.seconds for r in loop_unguarded)
        unguarded = {
            "plain_dir_s": [round(r.seconds, 2) for r in plain_unguarded],
            "loop_devices_s": [round(r.seconds, 2) for r in loop_unguarded],
            "plain_writer_s": [round(r.writer_s, 2) for r in plain_unguarded],
            "loop_writer_s": [round(r.writer_s, 2) for r in loop_unguarded],
            "ratio_loop_over_plain": round(lm / pm, 3),
        }
    print(
        json.dumps(
            {
                "items": ITEMS,
                "value_bytes": VALUE_BYTES,
                "dumper_flags": DUMPER_FLAGS,
                "warm": {
                    "protection": "the agent's default (--adaptive) on both sides",
                    "plain_dir_s": [round(r.seconds, 2) for r in plain],
                    "loop_devices_s": [round(r.seconds, 2) for r in loop],
                    "plain_writer_s": [round(r.writer_s, 2) for r in plain],
                    "loop_writer_s": [round(r.writer_s, 2) for r in loop],
                    "plain_dir_median_s": round(plain_med, 2),
                    "loop_devices_median_s": round(loop_med, 2),
                    "ratio_loop_over_plain": round(loop_med / plain_med, 3),
                    "target_ratio": 1.3,
                    "publications_per_run": [r.publication.count for r in loop],
                    "freeze_total_ms": [round(r.publication.frozen_total_s * 1000, 1) for r in loop],
                    "freeze_max_ms": [round(r.publication.frozen_max_s * 1000, 1) for r in loop],
                    "loop_without_publishing_s": in_the_dark,
                },
                "warm_unguarded": unguarded,
                "publish_to_visible": {
                    "paced_items_per_s": PACED_RATE,
                    "files": len(paced.latencies),
                    "median_s": round(statistics.median(paced.latencies), 3),
                    "p90_s": round(quantile(paced.latencies, 0.9), 3),
                    "max_s": round(max(paced.latencies), 3),
                    "publications": pub.count,
                    "freeze_max_ms": round(pub.frozen_max_s * 1000, 1),
                    "freeze_mean_ms": round(pub.frozen_total_s * 1000 / max(1, pub.count), 1),
                    "dump_stalled_fraction": round(pub.frozen_total_s / paced.seconds, 4),
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    survive_closed_outputs()  # `... | head`: the run still finishes and stops what it started
    main()
