"""The populator against real memcached servers, with dump directories made by the Python writer."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from cachewarm.datapath.encode import EXPIRY_MARGIN, MAX_RELATIVE_TTL, ttl_token
from cachewarm.datapath.format import Record, parse_name
from cachewarm.datapath.populate import PopulateError, PopulateIncomplete, PopulateState, populate
from cachewarm.datapath.remount import CommandRemounter
from cachewarm.datapath.writer import DirWriter, PublishedFile
from cachewarm.testing.populating import Background, config, fetch, node, records

from tests.ketama_oracle import KetamaRing

MONTH = MAX_RELATIVE_TTL
CLI = [sys.executable, "-c", "from cachewarm.cli import run; run()"]


def test_ttl_token() -> None:
    """Issue 12: the absolute expiry (less the margin) always, never a TTL computed once per file; 0
    for never; None once expired."""
    now = 1_800_000_000
    m = EXPIRY_MARGIN
    assert ttl_token(-1, now) == 0
    assert ttl_token(now, now) is None
    assert ttl_token(now - 5, now) is None
    assert ttl_token(now + m, now) is None
    assert ttl_token(now + m + 1, now) == now + 1
    assert ttl_token(now + MONTH, now) == now + MONTH - m
    assert ttl_token(now + MONTH + 1, now) == now + MONTH + 1 - m


def test_items_flags_ttls_and_binary_keys(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=64)
    now = int(time.time())
    recs = [
        Record(b"never", 0, -1, b"a"),
        Record(b"maxflags", 0xFFFFFFFF, -1, b"b"),
        Record(b"empty", 5, -1, b""),
        Record(b"short", 1, now + 60, b"c"),
        Record(b"long", 2, now + 90 * 86400, b"d"),
        Record(b"expired", 3, now - 10, b"e"),
        Record(b"bin\x00\xff key\r\n", 4, -1, b"binary"),
        Record(bytes(range(256))[1:187], 6, -1, b"186-byte binary key"),
        Record(b"v" * 250, 7, -1, b"250-byte key"),
        Record(b"tricky", 8, -1, b"VA 1 f0\r\nEN\r\nMN\r\nSERVER_ERROR x\r\n"),
    ]
    w = DirWriter(tmp_path / "dump", node="src")
    w.write(0, 0, recs[:5])
    w.write(0, 1, recs[5:])
    w.done()
    s = populate(config(tmp_path / "dump", tmp_path, [dst]))
    assert (s.records, s.stored, s.expired, s.already_present) == (10, 9, 1, 0)
    got = fetch(dst, [r.key for r in recs])
    assert b"expired" not in got
    for r in recs:
        if r.key == b"expired":
            continue
        assert got[r.key].value == r.value and got[r.key].flags == r.flags, r.key
    assert got[b"never"].ttl == -1
    assert 30 <= got[b"short"].ttl <= 60  # the populate itself takes seconds on a loaded machine
    assert 90 * 86400 - 60 <= got[b"long"].ttl <= 90 * 86400


def test_multi_mib_values(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=128, max_item_size="8m")
    big = bytes(range(256)) * (6 * 4096)  # 6 MiB
    w = DirWriter(tmp_path / "dump", node="src")
    w.write(0, 0, [Record(b"big", 1, -1, big), Record(b"small", 2, -1, b"s"), Record(b"big2", 3, -1, big)])
    w.done()
    s = populate(config(tmp_path / "dump", tmp_path, [dst]))
    assert s.stored == 3
    got = fetch(dst, [b"big", b"small", b"big2"])
    assert got[b"big"].value == big and got[b"big2"].value == big and got[b"small"].value == b"s"


def test_add_mode_keeps_fresher_values_set_mode_overwrites(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=64)
    dst.command(b"set k1 99 0 5\r\nfresh\r\n", until=b"STORED\r\n")
    w = DirWriter(tmp_path / "dump", node="src")
    w.write(0, 0, records(100))
    w.done()
    s = populate(config(tmp_path / "dump", tmp_path, [dst]))
    assert (s.stored, s.already_present) == (99, 1)
    assert fetch(dst, [b"k1"])[b"k1"].value == b"fresh"
    assert fetch(dst, [b"k2"])[b"k2"].value.startswith(b"v2-")
    s = populate(config(tmp_path / "dump", tmp_path, [dst], mode="set", state_file=tmp_path / "s2.json"))
    assert (s.stored, s.already_present) == (100, 0)
    assert fetch(dst, [b"k1"])[b"k1"].value.startswith(b"v1-")


def test_fresher_value_written_during_the_warm_survives(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=64)
    w = DirWriter(tmp_path / "dump", node="src")
    w.write(0, 0, records(50))
    bg = Background(config(tmp_path / "dump", tmp_path, [dst])).start()
    bg.wait_for(lambda: any(e.event == "file" for e in bg.events))
    # Live traffic writes k60 (not yet copied) into the new replica while the warm runs.
    dst.command(b"set k60 1 0 4\r\nlive\r\n", until=b"STORED\r\n")
    w.write(1, 0, records(50, start=50))
    w.done()
    bg.join()
    assert bg.summary is not None and bg.summary.already_present == 1
    assert fetch(dst, [b"k60"])[b"k60"].value == b"live"


def test_ketama_routing_across_destinations(memcached, tmp_path: Path) -> None:
    dsts = [memcached(memory_mb=32) for _ in range(3)]
    recs = records(3000)
    w = DirWriter(tmp_path / "dump", node="src")
    w.write(0, 0, recs)
    w.done()
    s = populate(config(tmp_path / "dump", tmp_path, dsts))
    assert s.stored == 3000
    ring = KetamaRing([node(d) for d in dsts], "{host}:{port}")
    for d in dsts:
        mine = [r.key for r in recs if ring.node_for(r.key) == node(d)]
        assert 500 < len(mine) < 1500
        assert len(fetch(d, mine)) == len(mine)
        assert int(d.stats()["curr_items"]) == len(mine)
    assert sum(s.per_node.values()) == 3000


def test_ketama_node_keys_that_collide_are_refused(memcached, tmp_path: Path) -> None:
    dsts = [memcached(memory_mb=16) for _ in range(2)]
    cfg = config(tmp_path / "d", tmp_path, dsts, node_key_format="{host}/{ip}:11211")
    (tmp_path / "d").mkdir()
    DirWriter(tmp_path / "d", node="src").write(0, 0, records(10))
    with pytest.raises(PopulateError, match="node keys collide"):
        populate(cfg)


def test_partial_files_never_applied_then_picked_up(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=64)
    out = tmp_path / "dump"
    w = DirWriter(out, node="src")
    good = w.write(0, 0, records(10, prefix=b"a"))
    name, data = w.encode(1, 0, records(10, prefix=b"b"))
    # What a ro,norecovery reader may see of one published file, in turn.
    views = [
        data[:0],  # entry visible, no blocks
        data[:100],  # truncated
        data[:-40] + b"\0" * 40,  # zero-filled tail
        data[:60] + b"\0" * 200 + data[260:],  # a hole in the middle: checksum mismatch
        b"\0" * len(data),  # all zero
    ]
    (out / name).write_bytes(views[0])
    (out / ".tmp-src-00000002-0000").write_bytes(b"garbage")
    bg = Background(config(out, tmp_path, [dst])).start()
    bg.wait_for(lambda: any(e.detail == good.path.name for e in bg.events))
    for v in views:
        (out / name).write_bytes(v)
        r = bg.rounds()
        bg.wait_for(lambda r=r: bg.rounds() >= r + 2)
        assert fetch(dst, [b"b%d" % i for i in range(10)]) == {}, "a partial file was applied"
    (out / name).write_bytes(data)
    parsed = parse_name(name)
    assert parsed is not None
    w.published.append(PublishedFile(out / name, parsed, 10, 0, len(data)))
    w.done()
    bg.join()
    assert bg.summary is not None and bg.summary.stored == 20
    assert len(fetch(dst, [b"b%d" % i for i in range(10)])) == 10


@pytest.mark.parametrize("version", [1, 2])
def test_corrupt_file_with_valid_checksum_stops(memcached, tmp_path: Path, version: int) -> None:
    import struct

    from cachewarm.datapath import format as df

    dst = memcached(memory_mb=16)
    out = tmp_path / "dump"
    w = DirWriter(out, node="src", version=version)
    _, data = w.encode(0, 0, records(3))
    bad = bytearray(data)
    if version == 1:
        struct.pack_into("<q", bad, 48 + 3 + 8, 0)  # exptime 0 in record 0
        why = "exptime"
    else:
        at = bad.index(b" T0 ")  # a relative TTL in record 0 (memcached would read it as one)
        bad[at : at + 4] = b" T9 "
        why = "bad T"
    (out / df.name_for("src", 0, 0, bytes(bad)).name).write_bytes(bad)
    with pytest.raises(PopulateError, match=rf"corrupt.*{why}"):
        populate(config(out, tmp_path, [dst]))
    assert dst.stats()["curr_items"] == "0"


def test_done_listing_a_missing_file_waits_then_fails(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=16)
    out = tmp_path / "dump"
    w = DirWriter(out, node="src")
    w.write(0, 0, records(5))
    lost = w.write(0, 1, records(5, start=5))
    w.done()
    lost.path.unlink()
    t0 = time.monotonic()
    with pytest.raises(PopulateError, match=r"DONE lists .*-00000000-0001-.* did not appear"):
        populate(config(out, tmp_path, [dst], bad_file_timeout=1.0))
    assert time.monotonic() - t0 >= 1.0


def test_published_file_not_in_done_fails(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=16)
    out = tmp_path / "dump"
    w = DirWriter(out, node="src")
    w.write(0, 0, records(5))
    w.done()
    DirWriter(out, node="src").write(7, 0, records(2))
    with pytest.raises(PopulateError, match="not listed in DONE"):
        populate(config(out, tmp_path, [dst]))


def test_file_staying_bad_fails(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=16)
    out = tmp_path / "dump"
    w = DirWriter(out, node="src")
    name, data = w.encode(0, 0, records(5))
    (out / name).write_bytes(data[:50])
    with pytest.raises(PopulateError, match="stayed unverifiable"):
        populate(config(out, tmp_path, [dst], bad_file_timeout=0.5))


def test_destination_restart_mid_run_loses_nothing(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=64)
    out = tmp_path / "dump"
    w = DirWriter(out, node="src")
    w.write(0, 0, records(1000, prefix=b"a"))
    bg = Background(config(out, tmp_path, [dst])).start()
    bg.wait_for(lambda: any(e.event == "file" for e in bg.events))
    dst.restart()  # comes back empty, same port
    w.write(1, 0, records(1000, prefix=b"b"))
    w.done()
    bg.join()
    assert bg.summary is not None and bg.summary.restarts_detected >= 1
    keys = [b"a%d" % i for i in range(1000)] + [b"b%d" % i for i in range(1000)]
    assert len(fetch(dst, keys)) == 2000


def test_destination_down_mid_file_is_retried(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=64)
    out = tmp_path / "dump"
    w = DirWriter(out, node="src")
    w.write(0, 0, records(500, prefix=b"a"))
    bg = Background(config(out, tmp_path, [dst])).start()
    bg.wait_for(lambda: any(e.event == "file" for e in bg.events))
    dst.kill()
    w.write(1, 0, records(500, prefix=b"b"))
    time.sleep(0.5)  # the populator now meets a refused connection and backs off
    dst.start()
    w.done()
    bg.join()
    assert bg.summary is not None
    keys = [b"a%d" % i for i in range(500)] + [b"b%d" % i for i in range(500)]
    assert len(fetch(dst, keys)) == 1000


def test_destination_unreachable_fails(tmp_path: Path) -> None:
    from cachewarm.testing.memcached import free_port

    out = tmp_path / "dump"
    DirWriter(out, node="src").write(0, 0, records(5))

    class Dead:
        host = "127.0.0.1"
        port = free_port()

    with pytest.raises(PopulateError, match="unavailable"):
        populate(config(out, tmp_path, [Dead()], destination_timeout=1.0))  # type: ignore[list-item]


def test_full_destination_fails_loudly_cli(memcached, tmp_path: Path) -> None:
    """With evictions off (-M, accepted: issue 12 refuses such a destination by default) a full
    destination answers SERVER_ERROR out of memory: the populate fails loudly."""
    dst = memcached(memory_mb=2, extra_args=["-M"])
    out = tmp_path / "dump"
    w = DirWriter(out, node="src")
    for c in range(4):
        w.write(c, 0, records(2000, size=2000, start=c * 2000))
    w.done()
    p = subprocess.run(
        [
            *CLI,
            "populate",
            "--from",
            str(out),
            "--to",
            dst.address,
            "--state-file",
            str(tmp_path / "st.json"),
            "--workers",
            "2",
            "--accept-no-evictions",
            "--accept-no-recheck",  # no source here: the re-check has its tests (test_recheck.py)
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode != 0
    assert "SERVER_ERROR" in p.stderr and "error:" in p.stderr
    assert '"event":"summary"' not in p.stdout


def test_resume_from_state_file(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=64)
    out = tmp_path / "dump"
    w = DirWriter(out, node="src")
    w.write(0, 0, records(100))
    w.write(1, 0, records(100, start=100))
    w.done()
    cfg = config(out, tmp_path, [dst])
    first = populate(cfg)
    state = PopulateState.load(cfg.state_file)
    assert len(state.consumed) == 2
    again = populate(cfg)  # nothing left to write, same totals
    assert (again.records, again.stored) == (first.records, first.stored) == (200, 200)
    dst.restart()  # the destination lost everything while we were not running: redo all
    third = populate(cfg)
    assert third.restarts_detected == 1 and third.stored == 200
    assert int(dst.stats()["curr_items"]) == 200


def test_remounts_between_rounds_with_fake_runner(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=16)
    out = tmp_path / "dump"
    w = DirWriter(out, node="src")
    w.write(0, 0, records(10))
    calls: list[list[str]] = []

    def runner(argv: object) -> None:
        calls.append(list(argv))  # type: ignore[call-overload]
        if len(calls) == 4:  # the writer publishes more while we are between mounts
            w.write(1, 0, records(10, start=10))
            w.done()

    rm = CommandRemounter("/dev/nvme1n1", "/mnt/cw", runner=runner)
    s = populate(config(out, tmp_path, [dst], remounter=rm))
    assert s.stored == 20
    assert calls[:2] == [["umount", "/mnt/cw"], ["mount", "-o", "ro,norecovery", "/dev/nvme1n1", "/mnt/cw"]]
    assert len(calls) == 2 * rm.refreshes >= 4


def test_progress_is_json_lines(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=16)
    out = tmp_path / "dump"
    w = DirWriter(out, node="src")
    w.write(0, 0, records(10))
    w.done()
    p = subprocess.run(
        [
            *CLI,
            "populate",
            "--from",
            str(out),
            "--to",
            dst.address,
            "--state-file",
            str(tmp_path / "st.json"),
            "--json",
            "--accept-no-recheck",  # no source here: the re-check has its tests (test_recheck.py)
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    lines = [json.loads(ln) for ln in p.stdout.splitlines()]
    assert lines[0]["event"] == "start" and lines[-1]["event"] == "summary"
    assert lines[-1]["records"] == 10 and lines[-1]["stored"] == 10


def test_rate_limit_still_completes(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=16)
    out = tmp_path / "dump"
    w = DirWriter(out, node="src")
    w.write(0, 0, records(2000))
    w.done()
    s = populate(config(out, tmp_path, [dst], max_items_per_second=10_000, batch_items=100))
    assert s.stored == 2000


def test_invalid_done_fails_at_once_half_visible_done_waits(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=16)
    out = tmp_path / "dump"
    w = DirWriter(out, node="src")
    w.write(0, 0, records(5))
    body = w.manifest()
    body["totals"]["records"] = 99
    (out / "DONE").write_text(json.dumps(body))
    with pytest.raises(PopulateError, match="DONE is invalid"):
        populate(config(out, tmp_path, [dst], bad_file_timeout=60.0))
    (out / "DONE").write_text(json.dumps(w.manifest())[:40])  # half visible
    with pytest.raises(PopulateError, match="DONE is unreadable"):
        populate(config(out, tmp_path, [dst], bad_file_timeout=0.5))


def test_a_directory_that_cannot_be_listed_is_retried_then_fatal(memcached, tmp_path: Path) -> None:
    """A torn view of the shared volume can fail the listing itself (EIO, EUCLEAN on a norecovery
    mount): the populator lists again after the next remount and fails, naming it, only if it lasts.
    Here the directory is swapped for a file between mounts (listdir: NotADirectoryError)."""
    dst = memcached(memory_mb=16)
    out, aside = tmp_path / "dump", tmp_path / "aside"
    w = DirWriter(out, node="src")
    w.write(0, 0, records(10))
    calls: list[object] = []

    def tearing(argv: object) -> None:
        calls.append(argv)
        if len(calls) == 2:  # after the first remount the directory cannot be listed...
            out.rename(aside)
            out.write_text("")
        elif len(calls) == 6:  # ...until a later one
            out.unlink()
            aside.rename(out)
            w.write(1, 0, records(10, start=10))
            w.done()

    events: list[str] = []
    cfg = config(out, tmp_path, [dst], remounter=CommandRemounter("/dev/x", "/m", runner=tearing))
    s = populate(cfg, on_progress=lambda pr: events.append(pr.event))
    assert s.stored == 20 and "list_failed" in events

    def torn(argv: object) -> None:
        if not out2.is_file():
            out2.rename(tmp_path / "aside2")
            out2.write_text("")

    out2 = tmp_path / "dump2"
    DirWriter(out2, node="src").write(0, 0, records(3))
    cfg = config(out2, tmp_path, [dst], bad_file_timeout=0.3, state_file=tmp_path / "s2.json")
    with pytest.raises(PopulateError, match=f"listing {out2} failed for 0.3s"):
        populate(replace(cfg, remounter=CommandRemounter("/dev/x", "/m", runner=torn)))


def test_remount_failures_are_retried_then_fatal(memcached, tmp_path: Path) -> None:
    from cachewarm.datapath.remount import RemountError

    dst = memcached(memory_mb=16)
    out = tmp_path / "dump"
    w = DirWriter(out, node="src")
    w.write(0, 0, records(10))
    calls: list[list[str]] = []

    def flaky(argv: object) -> None:
        calls.append(list(argv))  # type: ignore[call-overload]
        if len(calls) in (1, 2, 4):  # umount+mount fail once, then umount "not mounted" once
            raise RemountError(f"{argv} failed")
        if len(calls) == 5:
            w.write(1, 0, records(10, start=10))
            w.done()

    s = populate(config(out, tmp_path, [dst], remounter=CommandRemounter("/dev/x", "/m", runner=flaky)))
    assert s.stored == 20

    def broken(argv: object) -> None:
        raise RemountError("mount: /m: wrong fs type")

    out2 = tmp_path / "dump2"
    DirWriter(out2, node="src").write(0, 0, records(3))
    cfg = config(out2, tmp_path, [dst], bad_file_timeout=0.3, state_file=tmp_path / "s2.json")
    cfg.remounter = CommandRemounter("/dev/x", "/m", runner=broken)
    with pytest.raises(PopulateError, match=r"remounting failed.*wrong fs type"):
        populate(cfg)


def test_missing_source_dir_is_named(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=16)
    with pytest.raises(PopulateError, match="does not exist"):
        populate(config(tmp_path / "nope", tmp_path, [dst]))


@pytest.mark.parametrize("one_pass_max", [1 << 30, 1024])
def test_corrupt_file_never_partially_applied_either_strategy(
    memcached, tmp_path: Path, one_pass_max: int
) -> None:
    """Version 1 files above one_pass_max are walked first, then streamed: still nothing of a bad file
    is sent."""
    import struct

    from cachewarm.datapath import format as df

    dst = memcached(memory_mb=64)
    out = tmp_path / "dump"
    w = DirWriter(out, node="src", version=1)
    good = w.write(0, 0, records(300))
    _, data = w.encode(1, 0, records(300, prefix=b"b"))
    bad = bytearray(data)
    last = len(bad) - 40 - (20 + len(b"b299") + len(b"v299-") + 100)
    struct.pack_into("<q", bad, last + 8, -7)  # the LAST record's exptime is invalid
    (out / df.name_for("src", 1, 0, bytes(bad)).name).write_bytes(bad)
    with pytest.raises(PopulateError, match=r"corrupt.*exptime -7"):
        populate(config(out, tmp_path, [dst], one_pass_max_bytes=one_pass_max, workers=1))
    assert fetch(dst, [b"b%d" % i for i in range(300)]) == {}
    assert good.records == 300


def test_corrupt_v2_file_never_partially_applied(memcached, tmp_path: Path) -> None:
    """Version 2: the walk over every record (check 4) ends before the first byte is sent, however
    late in the file the bad record is."""
    from cachewarm.datapath import format as df

    dst = memcached(memory_mb=64)
    out = tmp_path / "dump"
    w = DirWriter(out, node="src")
    good = w.write(0, 0, records(300))
    _, data = w.encode(1, 0, records(300, prefix=b"b"))
    bad = bytearray(data)
    at = bad.rindex(b" ME q O")  # the LAST record asks for another mode: not a command we send
    bad[at : at + 4] = b" MX "
    (out / df.name_for("src", 1, 0, bytes(bad)).name).write_bytes(bad)
    with pytest.raises(PopulateError, match=r"corrupt.*record 299 .*not a meta set line"):
        populate(config(out, tmp_path, [dst], workers=1))
    assert fetch(dst, [b"b%d" % i for i in range(300)]) == {}
    assert good.records == 300


def test_large_file_streaming_strategy_applies_everything(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=64)
    out = tmp_path / "dump"
    w = DirWriter(out, node="src")
    w.write(0, 0, records(5000))
    w.done()
    s = populate(config(out, tmp_path, [dst], one_pass_max_bytes=1024, batch_items=100))
    assert s.stored == 5000 and int(dst.stats()["curr_items"]) == 5000


def test_evictions_in_a_small_destination_are_reported(memcached, tmp_path: Path) -> None:
    """Issue 12: evictions during the run make it fail (PopulateIncomplete, with the summary) unless
    accepted; then the summary still says so."""
    dst = memcached(memory_mb=2)  # no -M: memcached evicts instead of refusing
    out = tmp_path / "dump"
    w = DirWriter(out, node="src")
    for c in range(4):
        w.write(c, 0, records(2000, size=2000, start=c * 2000))
    w.done()
    events = []
    with pytest.raises(PopulateIncomplete, match=r"evicted items.*--accept-evictions") as e:
        populate(config(out, tmp_path, [dst]), events.append)
    assert e.value.summary.destination_evictions > 0 and not e.value.summary.ok
    assert any(e.event == "warning" and "evicted" in e.detail for e in events)
    s = populate(config(out, tmp_path, [dst], accept_evictions=True))
    assert s.ok and s.destination_evictions > 0 and s.accepted == s.incomplete


def test_state_file_of_other_destinations_is_refused(memcached, tmp_path: Path) -> None:
    a, b = memcached(memory_mb=16), memcached(memory_mb=16)
    out = tmp_path / "dump"
    w = DirWriter(out, node="src")
    w.write(0, 0, records(5))
    w.done()
    populate(config(out, tmp_path, [a]))
    with pytest.raises(
        PopulateError, match=r"start afresh \(populate: another --state-file; warm: an empty --workdir\)"
    ) as e:
        populate(config(out, tmp_path, [b]))
    assert e.value.exit_code == 2  # a setting: fix the flags
