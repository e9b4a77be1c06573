"""`cachewarm demo` (what `make demo` runs): two local memcacheds, a mixed load, warm, verify, summary."""

from __future__ import annotations

import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from cachewarm.datapath import _speedups
from cachewarm.datapath.meta import MetaConnection
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.verify import verify
from cachewarm.datapath.warm import find_dumper, run_warm
from cachewarm.datapath.warm_config import WarmConfig
from cachewarm.datapath.wire import wire_key
from cachewarm.testing.memcached import MemcachedServer


@dataclass(frozen=True)
class LoadStats:
    items: int
    bytes: int
    seconds: float


def _size(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.70:
        return rng.randint(50, 300)
    if r < 0.95:
        return rng.randint(300, 2000)
    if r < 0.999:
        return rng.randint(2000, 20000)
    return rng.randint(20000, 200000)


def load_items(target: Node, n: int, seed: int = 1, key_prefix: bytes = b"demo:") -> LoadStats:
    """Set `n` items of mixed sizes, flags and TTLs (never, hours, > 30 days, minutes; a few binary
    keys) with pipelined quiet meta sets. Replies are checked: any error fails the load."""
    rng = random.Random(seed)
    pool = rng.randbytes(1 << 18)
    now = int(time.time())
    conn = MetaConnection(target.host, target.port)
    conn.connect()
    start = time.monotonic()
    total = 0
    buf = bytearray()
    count = 0
    try:
        for i in range(n):
            key = key_prefix + b"%d" % i if i % 1000 else b"bin\x00\xff:%d" % i
            size = _size(rng)
            off = rng.randrange(0, len(pool) - size)
            r = rng.random()
            if r < 0.40:
                ttl = 0
            elif r < 0.80:
                ttl = rng.randint(3600, 86400)
            elif r < 0.95:
                ttl = now + rng.randint(40, 90) * 86400  # > 30 days: absolute
            else:
                ttl = rng.randint(300, 3600)
            flags = 0 if i % 3 == 0 else (0xFFFFFFFF if i % 3 == 1 else rng.getrandbits(32))
            tok, b = wire_key(key)
            buf += _speedups.core_ms_line(tok, bool(b), size, ttl, flags, False, False, 0)
            buf += pool[off : off + size]
            buf += b"\r\n"
            total += size
            count += 1
            if count == 1000:
                conn.send_batch(buf, count)
                buf, count = bytearray(), 0
        if count:
            conn.send_batch(buf, count)
        t = conn.flush()
    finally:
        conn.close()
    if t.errors or t.not_stored:
        raise RuntimeError(f"loading the source failed: {t.errors} errors, first {t.first_error!r}")
    return LoadStats(n, total, time.monotonic() - start)


def run_demo(items: int, stream: IO[str] = sys.stdout, sample: int | None = None) -> bool:
    def say(s: str) -> None:
        stream.write(s + "\n")
        stream.flush()

    dumper = find_dumper()
    with (
        MemcachedServer(memory_mb=2048, threads=2) as source,
        MemcachedServer(memory_mb=2048, threads=2) as target,
        tempfile.TemporaryDirectory(prefix="cachewarm-demo-") as work,
    ):
        say(f"source memcached {source.address}, target memcached {target.address} (started for the demo)")
        ld = load_items(Node(source.host, source.port), items)
        say(
            f"loaded {ld.items:,} items ({ld.bytes / 1e6:.0f} MB of values; sizes 50 B..200 KB, flags, "
            f"TTLs never/hours/>30 days/minutes, some binary keys) in {ld.seconds:.1f}s"
        )
        # The demo's source has no clients and shares this machine's cores with the dump, which the
        # adaptive guard would read as harm and back off from (several times slower): not guarded.
        say(
            f"running: cachewarm warm --source {source.address} --target {target.address} --workdir {work} "
            "--adaptive off"
        )
        summary = run_warm(
            WarmConfig(
                source=Node(source.host, source.port),
                targets=[Node(target.host, target.port)],
                workdir=Path(work),
                dumper=dumper,
            ),
            stream=sys.stderr,
        )
        say(summary.text())
        say(f"running: cachewarm verify --source {source.address} --target {target.address}")
        t0 = time.monotonic()
        rep = verify(Node(source.host, source.port), [Node(target.host, target.port)], sample=sample, seed=1)
        say(rep.text() + f"  [{time.monotonic() - t0:.1f}s]")
        src_items = source.stats()["curr_items"]
        tgt_items = target.stats()["curr_items"]
        say(f"curr_items: source {int(src_items):,}, target {int(tgt_items):,}")
        ok = summary.ok and rep.ok
        say("demo OK" if ok else "demo FAILED")
        return ok
