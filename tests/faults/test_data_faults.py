"""Files seen half-written, live writes during the warm, keys expiring during the warm — all with the
real dumper's files and real memcached servers."""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cachewarm.datapath import format as df
from cachewarm.testing.memcached import MemcachedServer
from cachewarm.testing.populating import READ_SLACK, Background, ClockWatch, config

from tests.dumper.dumputil import Item, load, run_dump
from tests.faults.harness import CLI, fetch_all, tmp_leftovers, trials, wait_until

BLOCK = 512


@dataclass(frozen=True)
class RealDump:
    path: Path
    files: list[str]
    items: dict[bytes, df.Record]


@pytest.fixture(scope="module")
def real_dump(dumper_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> RealDump:
    """A dump made by the real dumper: ~3,000 items with varied sizes, flags, TTLs, in small files."""
    rng = random.Random(42)
    src = MemcachedServer(memory_mb=64).start()
    try:
        load(
            src,
            [
                Item(
                    b"hw:%d" % i,
                    rng.randbytes(rng.choice([0, 10, 300, 3000])),
                    i * 7919,
                    rng.choice([0, 3600]),
                )
                for i in range(3000)
            ],
        )
        out = tmp_path_factory.mktemp("realdump") / "o"
        r = run_dump(dumper_bin, src, out, "--data-file-size", "16k", "--key-file-size", "4k")
        assert r.returncode == 0, r.stderr
    finally:
        src.stop()
    files = sorted(p.name for p in out.iterdir() if df.parse_name(p.name))
    items: dict[bytes, df.Record] = {}
    for n in files:
        v = df.check_file(out / n)
        assert v.ok and v.data is not None
        for rec in df.iter_records(v.data):
            items[rec.key] = df.Record(rec.key, rec.flags, rec.exptime, bytes(rec.value))
    assert len(items) == 3000 and len(files) >= len(KINDS) + 2, files
    return RealDump(out, files, items)


def _keys_of(path: Path) -> list[bytes]:
    v = df.check_file(path)
    assert v.ok and v.data is not None
    return [r.key for r in df.iter_records(v.data)]


def half_written(data: bytes, kind: str, rng: random.Random) -> bytes:
    """What a ro,norecovery reader can see of a file being written: same name, wrong bytes."""
    n = len(data)
    if kind == "truncated":
        return data[: rng.randrange(0, n)]
    if kind == "zero_tail":
        cut = rng.randrange(0, n)
        return data[:cut] + bytes(n - cut)
    if kind == "hole":  # a block whose data is not visible yet reads as zeros
        b = rng.randrange(0, n // BLOCK)
        return data[: b * BLOCK] + bytes(BLOCK) + data[(b + 1) * BLOCK :]
    if kind == "bad_checksum":  # one flipped byte anywhere
        i = rng.randrange(0, n)
        return data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :]
    if kind == "reordered":  # two blocks visible in each other's place
        nb = n // BLOCK
        while True:
            a, b = sorted(rng.sample(range(nb), 2))
            blk = [data[i * BLOCK : (i + 1) * BLOCK] for i in range(nb)]
            if blk[a] != blk[b]:
                break
        blk[a], blk[b] = blk[b], blk[a]
        return b"".join(blk) + data[nb * BLOCK :]
    raise ValueError(kind)


KINDS = ["truncated", "zero_tail", "hole", "bad_checksum", "reordered"]


def test_half_written_files_never_applied_then_applied_once(
    real_dump: RealDump, memcached, tmp_path: Path, tally
) -> None:
    t = tally("half-written files (truncated/zero tail/hole/bad checksum/reordered)")
    for trial in range(trials()):
        rng = random.Random(5000 + trial)
        dst = memcached(memory_mb=64)
        vol = tmp_path / f"t{trial}" / "vol"
        vol.mkdir(parents=True)
        # One file per kind shows up half-written; the others appear whole.
        big = [n for n in real_dump.files if (real_dump.path / n).stat().st_size > 4 * BLOCK]
        bad = dict(zip(rng.sample(big, len(KINDS)), KINDS, strict=True))
        for n in real_dump.files:
            data = (real_dump.path / n).read_bytes()
            (vol / n).write_bytes(half_written(data, bad[n], rng) if n in bad else data)
        (vol / ".tmp-DONE").write_bytes(b'{"format": "cachewarm-dump", "vers')  # readers ignore .tmp-
        bg = Background(config(vol, tmp_path / f"t{trial}", [dst])).start()
        good = set(real_dump.files) - set(bad)
        bg.wait_for(lambda b=bg, g=good: {e.detail for e in b.events if e.event == "file"} >= g, timeout=60)
        r0 = bg.rounds()
        bg.wait_for(lambda b=bg, r=r0: b.rounds() >= r + 3, timeout=60)
        t.trials += 1
        # Never applied: not one key of a half-written file is in the destination.
        for n, kind in bad.items():
            leaked_in = fetch_all(dst, _keys_of(real_dump.path / n))
            if leaked_in:
                t.corrupt += len(leaked_in)
                t.note(f"trial {trial}: {len(leaked_in)} items of a {kind} file {n} were applied")
        # The files become whole (blocks made visible), then DONE appears: applied once.
        for n in bad:
            shutil.copyfile(real_dump.path / n, vol / n)
        shutil.copyfile(real_dump.path / "DONE", vol / "DONE")
        bg.join(timeout=120)
        if bg.error is not None or bg.summary is None:
            t.lost += len(real_dump.items)
            t.note(f"trial {trial}: populator failed: {bg.error}")
            continue
        if bg.summary.already_present:  # nothing else writes here: a second application of a file
            t.corrupt += bg.summary.already_present
            t.note(f"trial {trial}: {bg.summary.already_present} items applied twice")
        got = fetch_all(dst, real_dump.items)
        for k, rec in real_dump.items.items():
            it = got.get(k)
            if it is None:
                t.lost += 1
            elif it.value != rec.value or it.flags != rec.flags:
                t.corrupt += 1
        t.leaked += len(tmp_leftovers(tmp_path / f"t{trial}" / "state"))
        dst.stop()
    t.check()


# --------------------------------------------------------------------------------------------------
# Live writes into the destination during the warm


@dataclass
class LiveWriter:
    """Sets newer values on the destination while the warm runs; remembers the last value per key."""

    dst: MemcachedServer
    keys: list[bytes]
    rng: random.Random
    last: dict[bytes, bytes] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def run(self) -> None:
        try:
            with socket.create_connection((self.dst.host, self.dst.port), timeout=10) as s:
                seq = 0
                while not self.stop.is_set():
                    k = self.rng.choice(self.keys)
                    v = b"live-%d" % seq
                    seq += 1
                    # Waiting for HD orders our writes: the last one acknowledged is the fresher value.
                    s.sendall(b"ms %s %d T0 F99\r\n%s\r\n" % (k, len(v), v))
                    reply = s.recv(64)
                    if reply != b"HD\r\n":
                        raise RuntimeError(f"live write answered {reply!r}")
                    self.last[k] = v
                    time.sleep(0.0005)
        except BaseException as e:
            self.error = e


def test_live_writes_during_warm_are_never_clobbered(
    dumper_bin: Path, memcached, tmp_path: Path, tally, warm_mode: str, warm_args: list[str]
) -> None:
    t = tally(f"live writes to the destination during the warm (add mode, {warm_mode})")
    n = 6000
    for trial in range(trials()):
        rng = random.Random(6000 + trial)
        src, dst = memcached(memory_mb=64), memcached(memory_mb=64)
        load(src, [Item(b"lw:%d" % i, b"source-%d" % i, i, 0) for i in range(n)])
        keys = [b"lw:%d" % i for i in range(n)] + [b"lw:new:%d" % i for i in range(200)]
        writer = LiveWriter(dst, keys, rng)
        th = threading.Thread(target=writer.run, daemon=True)
        th.start()
        r = subprocess.run(
            [
                *CLI,
                "warm",
                *("--source", src.address, "--target", dst.address, "--workdir", str(tmp_path / f"t{trial}")),
                *("--workers", "2", "--max-items-per-second", "5000", "--data-file-size", "16k"),
                "--dumper",
                str(dumper_bin),
                *warm_args,
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        writer.stop.set()
        th.join(10)
        t.trials += 1
        if writer.error is not None:
            raise AssertionError(f"the live writer failed: {writer.error}")
        if r.returncode != 0:
            t.lost += n
            t.note(f"trial {trial}: warm exited {r.returncode}: {r.stderr.strip()[-300:]}")
            continue
        got = fetch_all(dst, keys)
        for k in keys:
            it = got.get(k)
            if k in writer.last:
                if it is None or it.value != writer.last[k]:
                    t.corrupt += 1  # clobbered: an older dumped value replaced the live write
                    if t.corrupt < 4:
                        t.note(f"trial {trial}: live write to {k!r} clobbered: {it}")
            elif not k.startswith(b"lw:new:"):
                if it is None:
                    t.lost += 1
                elif it.value != b"source-%s" % k[3:]:
                    t.corrupt += 1
        if len(writer.last) < 100:
            t.note(f"trial {trial}: only {len(writer.last)} live writes landed during the warm")
        src.stop()
        dst.stop()
    t.check()


# --------------------------------------------------------------------------------------------------
# Keys expiring during the warm


def server_time(srv: MemcachedServer) -> int:
    """memcached's own clock (unix seconds): expiry is decided by it, and it lags the wall clock."""
    return int(srv.stats()["time"])


def test_expiring_keys_are_never_resurrected(
    dumper_bin: Path, memcached, tmp_path: Path, tally, warm_mode: str
) -> None:
    t = tally(f"keys expiring during the warm (no resurrection, no longer TTL, {warm_mode})")
    n = 2000
    # Every expiry is compared as a moment of this host's wall clock, each server's whole-second clock
    # measured to a few ms (MetaConnection.measure_clock): an item may end up to EXPIRY_SLACK (1 s)
    # before its source's end, never after it (issue 21). A relative TTL counts from the source's clock
    # at its set, which `after` bounds above: `expiry` is the latest the source can end an item.
    for trial in range(trials()):
        rng = random.Random(4000 + trial)
        src, dst = memcached(memory_mb=64), memcached(memory_mb=64)
        clocks = ClockWatch(src, dst)  # (a clock that turns early during the trial: ClockWatch)
        ttls = [rng.choice([1, 2, 3, 4, 3600, 0, 40 * 86400]) for _ in range(n)]
        t0 = int(time.time())
        # > 30 days is sent as an absolute time (memcached's rule), as live clients would.
        items = [
            Item(b"ex:%d" % i, b"v%d" % i, i, t0 + ttl if ttl > 30 * 86400 else ttl)
            for i, ttl in enumerate(ttls)
        ]
        clocks.join()
        before = server_time(src)
        load(src, items)
        after = server_time(src)  # relative TTLs count from the source clock at set: bound it above
        expiry = {
            it.key: -1 if ttl == 0 else (t0 + ttl if ttl > 30 * 86400 else after + ttl)
            for it, ttl in zip(items, ttls, strict=True)
        }
        out = tmp_path / f"t{trial}" / "dump"
        if warm_mode == "stream":  # the dumper writes to the destination itself, paced on both sides
            r = run_dump(
                dumper_bin,
                src,
                out,
                *("--max-items-per-second", "3000", "--to", dst.address),
                *("--max-write-items-per-second", "2000", "--key-file-size", "4k"),
            )
            t.trials += 1
            if r.returncode != 0:
                t.lost += n
                t.note(f"trial {trial}: stream failed: {r.stderr[-300:]}")
                continue
        else:
            r = run_dump(dumper_bin, src, out, "--data-file-size", "8k", "--max-items-per-second", "3000")
            assert r.returncode == 0, r.stderr
            time.sleep(rng.uniform(0, 1.5))
            bg = Background(config(out, tmp_path / f"t{trial}", [dst], max_items_per_second=2000.0)).start()
            bg.join(timeout=120)
            t.trials += 1
            if bg.error is not None:
                t.lost += n
                t.note(f"trial {trial}: populator failed: {bg.error}")
                continue
        slack = clocks.slack(src, dst)
        src_ahead, dst_ahead = clocks.ahead(src), clocks.ahead(dst)
        end = time.time()
        got = fetch_all(dst, expiry)
        now = server_time(dst)
        for k, exp in expiry.items():
            it = got.get(k)
            src_end = exp - src_ahead  # on this host's clock
            late_ok = slack.late + READ_SLACK
            if it is None:
                if exp == -1 or src_end > end + slack.early + READ_SLACK:
                    t.lost += 1
                    t.note(f"trial {trial}: {k!r} (ends {src_end:.3f}) missing at {end:.3f} {slack.why}")
                continue
            if exp == -1:
                if it.ttl != -1:
                    t.corrupt += 1
                    t.note(f"trial {trial}: {k!r} never expires at the source, ttl {it.ttl} here")
            elif it.ttl == -1 or (dst_end := now + int(it.ttl or 0) - dst_ahead) > src_end + late_ok:
                t.corrupt += 1
                t.note(
                    f"trial {trial}: {k!r} ends at {src_end:.3f} at the source, kept until {dst_end:.3f}"
                    f" {slack.why}"
                )
        # Once every short TTL has passed, none of those keys may be readable at the destination.
        short = [k for k, exp in expiry.items() if exp != -1 and exp <= before + 5]
        wait_until(lambda d=dst, b=before: server_time(d) > b + 5 + 2, timeout=30, step=0.2)
        back = fetch_all(dst, short)
        if back:
            t.corrupt += len(back)
            t.note(f"trial {trial}: {len(back)} expired keys readable at the destination")
        src.stop()
        dst.stop()
    t.check()
