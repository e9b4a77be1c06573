"""The dumper against real memcached servers (whichever `memcached` is first on PATH: 1.6.18, 1.6.38,
1.6.45 are all expected to pass): every key memcached can hold, LRU crawls that see items move, a
crawler kept busy by another client, and an output too slow to keep up with the crawl."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

from cachewarm.testing.memcached import MemcachedServer

from tests.dumper.dumputil import (
    Item,
    another_clients_crawl,
    dump_cmd,
    load,
    load_binary_protocol,
    load_numbered,
    read_dump,
    run_dump,
)

SPECIAL = bytes([0x00, 0x20, 0x0D, 0x0A, 0xFF])


def binary_key(n: int, tag: int) -> bytes:
    """n bytes holding 0x00, space, CR, LF and 0xff, made unique by `tag`."""
    return (bytes([tag]) + SPECIAL * 60)[:n]


def test_every_key_length_and_byte_is_dumped(dumper_bin: Path, memcached, tmp_path: Path) -> None:
    """Binary keys of 1, 186, 187, 188 and 250 bytes: up to 186 through `mg <base64> b`, from 187 on
    (base64 longer than 250) through the binary protocol. Stored both with the meta protocol (where
    it can) and with the binary protocol (whose items memcached echoes raw under `mg ... k`)."""
    srv: MemcachedServer = memcached()
    exp = int(time.time()) + 3 * 86400  # a TTL class the binary path must carry from the listing
    by_meta = [Item(binary_key(n, 1), b"meta-%d" % n, n, 0) for n in (1, 186)]
    by_binary = [
        Item(binary_key(n, 2 + i), b"bin-%d" % n * 10, 0xFFFFFFFF - n, exp if i % 2 else 0)
        for i, n in enumerate((1, 186, 187, 188, 250))
    ]
    plain = [Item(b"p" * 250, b"plain", 3, 0), Item(b"!~" * 3, b"edges", 4, 0)]
    load(srv, by_meta + plain)
    load_binary_protocol(srv, by_binary)
    want = by_meta + by_binary + plain
    assert int(srv.stats()["curr_items"]) == len(want)
    out = tmp_path / "o"
    r = run_dump(dumper_bin, srv, out, "--threads", "2", "--batch", "3")
    assert r.returncode == 0, r.stderr
    got = read_dump(out).by_key()
    assert set(got) == {it.key for it in want}
    for it in want:
        rec = got[it.key]
        assert (rec.value, rec.flags) == (it.value, it.flags), (len(it.key), it.key[:8])
        if it.ttl == 0:
            assert rec.exptime == -1
        else:
            assert abs(rec.exptime - it.ttl) <= 1, (len(it.key), rec.exptime, it.ttl)
    done = json.loads((out / "DONE").read_text())
    assert done["complete"] is True and done["incomplete_reason"] is None
    comp = done["completeness"]
    assert comp["binary_protocol_records"] == 3  # the 187, 188 and 250-byte keys
    assert comp["undumped"] == 0 and comp["records"] == len(want) == comp["keys_listed"]
    assert not (out / "keys" / "UNDUMPED").exists()


def test_lru_crawl_under_touches_lists_every_item_once(dumper_bin: Path, memcached, tmp_path: Path) -> None:
    """`--crawl all` while other clients fetch items: fetched items move between LRUs mid-crawl and the
    LRU crawler then lists them twice (measured with the previous dumper: 348-6,259 keys dumped twice
    of 200,000, and once 22 keys missing, because the repeats made the count look complete)."""
    n = 100_000
    srv: MemcachedServer = memcached(memory_mb=512, threads=4)
    load_numbered(srv, n, value_size=100)
    stop = threading.Event()

    def toucher(seed: int) -> None:
        with socket.create_connection((srv.host, srv.port), timeout=30) as s:
            i = seed
            while not stop.is_set():
                s.sendall(
                    b"".join(b"mg k%d v\r\n" % ((i * 7919 + j * 104729) % n) for j in range(200)) + b"mn\r\n"
                )
                buf = b""
                while not buf.endswith(b"MN\r\n"):
                    buf += s.recv(1 << 20)
                i += 1

    threads = [threading.Thread(target=toucher, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.3)
        out = tmp_path / "o"
        r = run_dump(dumper_bin, srv, out, "--crawl", "all", timeout=300)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert r.returncode == 0, r.stderr
    dump = read_dump(out)
    assert set(dump.by_key()) == {b"k%d" % i for i in range(n)}  # by_key asserts no key twice
    done = json.loads((out / "DONE").read_text())
    assert done["complete"] is True
    # An LRU reconciliation pass that finds nothing new while keys are short ends with one by hash.
    assert done["crawl"]["modes"] in (["all"], ["all", "hash"]), done["crawl"]
    comp = done["completeness"]
    assert comp["keys_listed"] == comp["records"] == n
    print(f"duplicates dropped: {comp['duplicates_dropped']}, reconcile passes: {comp['reconcile_passes']}")


def test_crawler_busy_with_another_client_is_waited_for(dumper_bin: Path, memcached, tmp_path: Path) -> None:
    """Another client's `lru_crawler metadump` that it reads slowly keeps the crawler busy. A crawl
    request sent then makes its worker thread wait on the crawler's lock, and the hash table expansion
    that 100,000 items start at memcached's next clock tick (it pauses every worker while holding that
    lock) then deadlocks the server for good: seen on 1.6.18, 1.6.38 and 1.6.45, the other client's
    crawl stops and nothing answers. So the dumper asks `stats` first and sends no request while a crawl
    runs; it waits (same mode) and DONE says how long."""
    srv: MemcachedServer = memcached()
    load_numbered(srv, 100_000, value_size=10)
    out = tmp_path / "o"
    with another_clients_crawl(srv):  # ~8 MB of listing
        proc = subprocess.Popen(
            dump_cmd(dumper_bin, srv, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    done = json.loads((out / "DONE").read_text())
    crawl = done["crawl"]
    assert crawl["modes"] == ["hash"], crawl
    # BUSY answers retried, or the request answered late: the other crawl was still running.
    assert crawl["busy_retries"] >= 1 or crawl["answer_wait_s"] >= 0.3, crawl
    if crawl["busy_retries"]:
        assert "another crawl is running" in stderr and "BUSY" in stderr
    assert done["complete"] is True and len(read_dump(out).by_key()) == 100_000


def test_slow_output_never_stops_the_crawl_reader(dumper_bin: Path, memcached, tmp_path: Path) -> None:
    """Key lists fsynced on a deliberately slow output (40 ms a sync): the crawl's socket is still read
    at once, into the 1 MiB buffer and then the spill file, and the dump is complete.

    The buffer overflows only if the crawl outruns the key-list writer by 1 MiB of its ~2 MB listing:
    a relative speed, so the writer is made slow enough for any host's load. 4 KiB key lists (~430
    keys, ~30 KB of listing each) with two 40 ms syncs apiece drain ~0.35 MB/s: the crawl stays ahead
    unless it takes over ~2 s (on this 2-core host under load 17 it was ahead by the whole listing)."""
    srv: MemcachedServer = memcached()
    n = 30_000
    load_numbered(srv, n, value_size=10)
    spill = tmp_path / "spill"
    spill.mkdir()
    out = tmp_path / "o"
    r = run_dump(
        dumper_bin,
        srv,
        out,
        *("--key-file-size", "4k", "--crawl-buffer", "1M", "--spill-dir", str(spill)),
        *("--debug-sync-delay-us", "40000"),
        # Crawl order: the key lists are written (and fsynced) while the crawl runs. In recency order
        # the listing goes to unsynced tier files and the key lists follow the crawl.
        *("--order", "crawl"),
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert set(read_dump(out).by_key()) == {b"k%d" % i for i in range(n)}
    done = json.loads((out / "DONE").read_text())
    assert done["complete"] is True
    crawl = done["crawl"]
    assert crawl["reader_buffer_bytes"] == 1 << 20
    assert crawl["reader_spilled_bytes"] > 0, crawl
    assert crawl["reader_peak_buffered_bytes"] > 1 << 20, crawl
    assert os.listdir(spill) == []  # the spill file was never visible
