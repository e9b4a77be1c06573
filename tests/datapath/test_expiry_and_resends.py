"""Issue 12 section 3: a destination's expiry is the source's (within [source - 2 s, source]) however
long an item waited before it was sent; and an NS caused by the populator's own earlier attempt is
not counted as a live write."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from pathlib import Path

from cachewarm.datapath.encode import MAX_RELATIVE_TTL
from cachewarm.datapath.format import Record
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.populate import populate
from cachewarm.datapath.writer import DirWriter
from cachewarm.testing.memcached import MemcachedServer, free_port
from cachewarm.testing.populating import (
    READ_SLACK,
    ClockWatch,
    config,
    expiries,
    expiry_within,
    fetch,
    records,
)

MONTH = MAX_RELATIVE_TTL


def test_expiry_is_the_sources_however_long_items_wait(memcached, tmp_path: Path) -> None:
    """One file of 1,500 items sent at 1,000/s: its last items wait 1.5 s after the file was encoded
    (a TTL computed once per file would let them outlive the source by that much). Short TTLs seconds
    from expiry, around the 30-day boundary, far away, and never."""
    dst = memcached(memory_mb=64)
    clocks = ClockWatch(dst).join()  # first: the short TTLs below count from after it
    now = int(time.time())
    classes = [
        now + 5,
        now + 6,
        now + 3600,
        now + MONTH - 1,
        now + MONTH,
        now + MONTH + 1,
        now + 90 * 86400,
        -1,
    ]
    recs = [Record(b"t%d" % i, i, classes[i % len(classes)], b"v%d" % i) for i in range(1500)]
    recs.append(Record(b"gone", 0, now - 1, b"expired at the source"))
    w = DirWriter(tmp_path / "dump", node="src")
    w.write(0, 0, recs)
    w.done()
    cfg = config(
        tmp_path / "dump",
        tmp_path,
        [dst],
        max_items_per_second=1000.0,
        batch_items=50,
    )
    cfg.workers = 1
    s = populate(cfg)
    assert s.expired >= 1 and s.stored + s.expired == len(recs)
    slack = clocks.slack(None, dst)
    got = expiries(dst, [r.key for r in recs], clocks.ahead(dst))
    read_at = time.time()
    assert b"gone" not in got
    for r in recs[:-1]:
        exp = got.get(r.key)
        if exp is None:  # only a short TTL may have run out meanwhile: its copy may end slack.early
            # before its source (on this host's clock, not the destination's lagging `stats time`)
            assert r.exptime != -1 and r.exptime - slack.early - READ_SLACK <= read_at, (r, read_at, slack)
        elif r.exptime == -1:
            assert exp == -1, r
        else:
            assert expiry_within(r.exptime, exp, slack), (r.key, r.exptime - now, exp - r.exptime, slack)


class CuttingProxy:
    """A TCP proxy to a memcached that cuts the first connection carrying more than `cut_after`
    bytes to the server, once: to the populator, the destination went away mid-file and came back
    with everything it had received."""

    def __init__(self, upstream: MemcachedServer, cut_after: int) -> None:
        self.upstream = upstream
        self.cut_after = cut_after
        self.cuts = 0
        self.port = free_port()
        self.listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection((self.upstream.host, self.upstream.port))
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, to_server: bool) -> None:
        sent = 0
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                sent += len(data)
                if to_server and self.cuts == 0 and sent > self.cut_after:
                    self.cuts += 1
                    time.sleep(0.2)  # let memcached take what it was sent, then cut both ways
                    break
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.listener.close()


def test_a_resend_after_a_cut_connection_is_not_a_live_write(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=64)
    dst.command(b"set k7 0 0 4\r\nlive\r\n", until=b"STORED\r\n")  # live traffic, before the warm
    w = DirWriter(tmp_path / "dump", node="src")
    w.write(0, 0, records(5000))
    w.done()
    proxy = CuttingProxy(dst, cut_after=200_000)
    try:
        cfg = config(tmp_path / "dump", tmp_path, [dst], batch_items=100)
        cfg.destinations = [Node("127.0.0.1", proxy.port)]
        cfg.workers = 1
        s = populate(cfg)
    finally:
        proxy.close()
    assert proxy.cuts == 1
    assert s.resent_own > 0, "the resend found nothing the first attempt had stored"
    assert s.already_present == 1  # k7, and only k7: the rest was ours
    assert s.stored + s.resent_own + s.already_present == 5000
    assert fetch(dst, [b"k7"])[b"k7"].value == b"live"


def test_a_file_reapplied_after_a_crash_counts_its_own_writes_apart(memcached, tmp_path: Path) -> None:
    """The populator stored a file, then died before it recorded it as consumed; meanwhile live traffic
    wrote one of its keys. The re-run sends the file again: one live write, the rest its own."""
    dst = memcached(memory_mb=64)
    w = DirWriter(tmp_path / "dump", node="src")
    w.write(0, 0, records(300))
    w.write(1, 0, records(300, start=300))
    w.done()
    cfg = config(tmp_path / "dump", tmp_path, [dst])
    first = populate(cfg)
    assert (first.stored, first.already_present, first.resent_own) == (600, 0, 0)
    dst.command(b"set k5 0 0 4\r\nlive\r\n", until=b"STORED\r\n")
    state = json.loads(cfg.state_file.read_text())
    lost = sorted(state["consumed"])[0]  # the crash: sent, never recorded
    del state["consumed"][lost]
    cfg.state_file.write_text(json.dumps(state))
    again = populate(cfg)
    assert (again.stored, again.already_present, again.resent_own) == (300, 1, 299)
    assert fetch(dst, [b"k5"])[b"k5"].value == b"live"
