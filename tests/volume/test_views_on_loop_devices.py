"""What a `ro,norecovery` reader of a real XFS sees of the writer's files, through a second loop
device over the same image: nothing until the writer publishes (freeze/thaw), then exactly what was
on the writer at that moment — including files the writer is still writing. Such torn views (name
visible without blocks, blocks without size, size without blocks, a stale block) only ever make the
populator retry, never write a bad item; each view is checked through a third loop device."""

from __future__ import annotations

import ctypes
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cachewarm.datapath import format as df
from cachewarm.datapath.remount import CommandRemounter
from cachewarm.node_agent.runner import SubprocessRunner
from cachewarm.node_agent.volume import Volume
from cachewarm.testing.memcached import MemcachedServer
from cachewarm.testing.populating import Background, config, fetch
from cachewarm.testing.shared_volume import TEST_READER_OPTIONS, LoopVolume

from tests.dumper.dumputil import Item, load, run_dump

BLOCK = 4096  # mkfs.xfs's default block size: the unit in which a reader sees data or not
READER_MOUNT = f"mount -t xfs -o {TEST_READER_OPTIONS} {{device}} {{mount}}"


@dataclass
class Shared:
    """A writer (`w`, read-write), the populator's reader (`r`) and an observer (`o`)."""

    vol: LoopVolume
    w: Path
    r: Path
    o: Path
    writer: Volume

    @property
    def reader_dev(self) -> str:
        return self.vol.devices[1]

    def publish(self) -> float:
        return self.writer.publish().frozen_s

    def observe(self, name: str) -> bytes | None:
        """The observer's view of dump/<name> after a fresh mount (None: not there)."""
        self.vol.remount(self.vol.devices[2], self.o)
        p = self.o / "dump" / name
        return p.read_bytes() if p.exists() else None


@pytest.fixture
def shared(shared_volume: Callable[..., LoopVolume], tmp_path: Path) -> Shared:
    vol = shared_volume(3)
    vol.format(vol.devices[0])
    w = vol.mount(vol.devices[0], tmp_path / "w", "rw,noatime")
    writer = Volume(vol.devices[0], w, SubprocessRunner())
    (w / "dump").mkdir()
    writer.publish()
    r = vol.mount_reader(vol.devices[1], tmp_path / "r")
    o = vol.mount_reader(vol.devices[2], tmp_path / "o")
    return Shared(vol, w, r, o, writer)


@dataclass(frozen=True)
class RealDump:
    path: Path
    files: list[str]
    items: dict[bytes, Item]


@pytest.fixture(scope="module")
def real_dump(
    loop_devices_usable: None, dumper_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> RealDump:
    """~3,000 items by the real dumper, in files of ~64 KB (16 blocks)."""
    rng = random.Random(7)
    items = {
        b"tv:%d" % i: Item(b"tv:%d" % i, rng.randbytes(rng.choice([0, 30, 300, 2000])), rng.randrange(2**32))
        for i in range(3000)
    }
    src = MemcachedServer(memory_mb=64).start()
    try:
        load(src, items.values())
        out = tmp_path_factory.mktemp("dump") / "o"
        res = run_dump(dumper_bin, src, out, "--data-file-size", "64k")
        assert res.returncode == 0, res.stderr
    finally:
        src.stop()
    files = sorted(p.name for p in out.iterdir() if df.parse_name(p.name))
    assert len(files) >= 3
    return RealDump(out, files, items)


def allocate_beyond_eof(fd: int, length: int) -> None:
    """fallocate(FALLOC_FL_KEEP_SIZE): blocks allocated, the size unchanged (os has no flag for it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    if libc.fallocate(fd, 1, 0, length) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def write_published(d: Path, name: str, data: bytes) -> None:
    """The dumper's protocol: temporary name, fsync, rename, fsync the directory."""
    tmp = d / f".tmp-{name}"
    with open(tmp, "wb") as f:
        f.write(data)
        os.fsync(f.fileno())
    os.rename(tmp, d / name)
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_a_fsynced_file_is_invisible_until_the_writer_publishes(shared: Shared) -> None:
    data = os.urandom(3 * BLOCK + 100)
    for attempt in range(3):
        name = f"f{attempt}"
        write_published(shared.w / "dump", name, data)
        # Fsynced on the writer, yet a fresh mount does not show it: it is still in the log. (XFS
        # may cover its log in between, every ~30 s: then try again with a new file.)
        if shared.observe(name) is None:
            break
    else:
        pytest.fail("a fsynced file was visible at once three times: has XFS changed?")
    shared.publish()
    assert shared.observe(name) == data


def test_torn_views_of_a_file_being_written_only_cause_retries(
    shared: Shared, real_dump: RealDump, memcached: Any, tmp_path: Path
) -> None:
    dump = shared.w / "dump"
    victim = max(real_dump.files, key=lambda n: (real_dump.path / n).stat().st_size)
    data = (real_dump.path / victim).read_bytes()
    assert len(data) >= 8 * BLOCK, len(data)
    half = (len(data) // 2) // BLOCK * BLOCK
    k = half + BLOCK  # a block in the second half, before the trailer's block
    stale = (real_dump.path / next(n for n in real_dump.files if n != victim)).read_bytes()[:BLOCK]
    victim_keys = [r.key for r in df.iter_records(data)]

    for n in real_dump.files:
        if n != victim:
            write_published(dump, n, (real_dump.path / n).read_bytes())
    shared.publish()
    dst = memcached(memory_mb=64)
    remounter = CommandRemounter(shared.reader_dev, str(shared.r), mount_cmd=READER_MOUNT)
    cfg = config(shared.r / "dump", tmp_path, [dst], remounter=remounter, bad_file_timeout=600.0)
    bg = Background(cfg).start()
    good = set(real_dump.files) - {victim}
    bg.wait_for(lambda: {e.detail for e in bg.events if e.event == "file"} >= good, timeout=120)

    # The victim is written under its final name (no temporary name: the worst a writer can do),
    # published at each stage, so the reader sees every intermediate state.
    fd = os.open(dump / victim, os.O_RDWR | os.O_CREAT, 0o644)
    zeros = bytes(len(data))
    stages: list[tuple[str, Callable[[], None], bytes]] = [
        ("name visible, no blocks", lambda: None, b""),
        (
            "blocks visible, size not",
            lambda: (allocate_beyond_eof(fd, len(data)), os.pwrite(fd, data[:half], 0)),
            data[:half],
        ),
        ("size visible, blocks not", lambda: os.ftruncate(fd, len(data)), data[:half] + zeros[half:]),
        (
            "header and trailer visible, a block between not",
            lambda: (os.pwrite(fd, data[half:k], half), os.pwrite(fd, data[k + BLOCK :], k + BLOCK)),
            data[:k] + bytes(BLOCK) + data[k + BLOCK :],
        ),
        ("a block holds stale bytes", lambda: os.pwrite(fd, stale, k), data[:k] + stale + data[k + BLOCK :]),
    ]
    try:
        for what, write, view in stages:
            write()
            os.fsync(fd)
            shared.publish()
            assert shared.observe(victim) == view, f"{what}: the reader sees something else"
            if what.startswith("blocks visible"):  # allocated past the size the reader sees
                assert (shared.o / "dump" / victim).stat().st_blocks * 512 >= len(data)
            r0 = bg.rounds()
            bg.wait_for(lambda r=r0: bg.rounds() >= r + 3, timeout=60)  # remounted and retried
            assert victim not in {e.detail for e in bg.events if e.event == "file"}, what
            assert not fetch(dst, victim_keys), f"{what}: items of a torn file were applied"
        os.pwrite(fd, data[k : k + BLOCK], k)
        os.fsync(fd)
    finally:
        os.close(fd)
    write_published(dump, df.MANIFEST_NAME, (real_dump.path / df.MANIFEST_NAME).read_bytes())
    shared.publish()
    bg.join(timeout=120)
    assert bg.error is None, bg.error
    assert bg.summary is not None and bg.summary.stored == len(real_dump.items)
    assert bg.summary.already_present == 0  # nothing else writes the destination: none applied twice
    got = fetch(dst, list(real_dump.items))
    bad = [k for k, it in real_dump.items.items() if (g := got.get(k)) is None or g.value != it.value]
    assert not bad and all(got[k].flags == it.flags for k, it in real_dump.items.items())
