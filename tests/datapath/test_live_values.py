"""Issue 12 section 3: the populator never destroys a live value. A store memcached cannot allocate
unlinks the key's existing item, in add mode too; so an item too large for a destination is never
sent (counted, named in a report, a non-zero exit unless accepted), a destination with evictions off
is refused unless accepted, and an incomplete dump fails the run unless accepted."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cachewarm.datapath.encode import ITEM_CAS, ITEM_FLAGS_SUFFIX, ITEM_HEADER, ItemLimit
from cachewarm.datapath.format import Record
from cachewarm.datapath.meta import MetaConnection
from cachewarm.datapath.populate import PopulateError, PopulateIncomplete, populate
from cachewarm.datapath.routing import Routing
from cachewarm.datapath.wire import wire_key
from cachewarm.datapath.writer import DirWriter
from cachewarm.exitcodes import ExitCode
from cachewarm.testing.memcached import MemcachedServer
from cachewarm.testing.populating import config, fetch, node, records

CLI = [sys.executable, "-c", "from cachewarm.cli import main; main()"]
MIB = 1 << 20


def budget(item_size_max: int, cas: bool = True) -> int:
    return ItemLimit(item_size_max, cas).budget


def test_the_item_size_rule_is_memcacheds() -> None:
    # items.c: sizeof(item) 48 + key + 1 + value + 2 (+4 with flags) (+8 with CAS) <= item_size_max
    assert budget(MIB) == MIB - ITEM_HEADER - 1 - 2 - ITEM_CAS
    assert budget(MIB, cas=False) == budget(MIB) + ITEM_CAS
    assert ItemLimit(MIB).fits(1, budget(MIB) - 1, 0) and not ItemLimit(MIB).fits(1, budget(MIB), 0)
    assert not ItemLimit(MIB).fits(1, budget(MIB) - ITEM_FLAGS_SUFFIX, 7)


def _dump(path: Path, recs: list[Record]) -> None:
    w = DirWriter(path, node="src")
    w.write(0, 0, recs)
    w.done()


def _populate_cli(src: Path, to: str, state: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    # No source here: the re-check has its tests (test_recheck.py).
    args = [
        *CLI,
        "populate",
        "--from",
        str(src),
        "--to",
        to,
        "--state-file",
        str(state),
        "--json",
        "--accept-no-recheck",
        *flags,
    ]
    return subprocess.run([*args, "--workers", "1"], capture_output=True, text=True, timeout=120)


class _Writer:
    """Live traffic: one meta set at a time, each checked."""

    def __init__(self, srv: MemcachedServer) -> None:
        self.c = MetaConnection(srv.host, srv.port)

    def __enter__(self) -> _Writer:
        self.c.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.c.close()

    def set(self, key: bytes, value: bytes, flags: int = 0) -> None:
        tok, b = wire_key(key)
        self.c.send_batch(b"ms %b %d%b T0 F%d q\r\n%b\r\n" % (tok, len(value), b, flags, value), 1)
        t = self.c.flush()
        assert t.errors == 0, t.first_error


@pytest.mark.parametrize("cas", [True, False], ids=["cas", "no-cas"])
def test_oversize_items_are_never_sent_and_live_values_survive(memcached, tmp_path: Path, cas: bool) -> None:
    """A `-I 1m` destination: the items that fit exactly are written, one byte more is never sent;
    the live values under the oversize keys survive; the keys are named; exit 1, then exit 0 with
    --accept-oversize (the summary still counts them)."""
    dst = memcached(memory_mb=64, max_item_size="1m", extra_args=[] if cas else ["-C"])
    b = budget(MIB, cas)
    binkey = b"\x00 \n\r\xff" * 10
    recs = [
        Record(b"fits", 0, -1, b"x" * (b - 4)),
        Record(b"over", 0, -1, b"x" * (b - 3)),
        Record(b"fits-flags", 1, -1, b"x" * (b - 10 - ITEM_FLAGS_SUFFIX)),
        Record(b"over-flags", 1, -1, b"x" * (b - 10 - ITEM_FLAGS_SUFFIX + 1)),
        Record(b"big", 5, -1, b"y" * (2 * MIB)),
        Record(binkey, 6, -1, b"z" * (2 * MIB)),
        *records(20),
    ]
    _dump(tmp_path / "dump", recs)
    live = {b"over": b"live-1", b"big": b"live-2", binkey: b"live-3"}
    with _Writer(dst) as w:
        for k, v in live.items():
            w.set(k, v)
    state = tmp_path / "st.json"
    p = _populate_cli(tmp_path / "dump", dst.address, state)
    assert p.returncode == ExitCode.INCOMPLETE, p.stderr
    assert "never sent" in p.stderr and "--accept-oversize" in p.stderr
    summary = json.loads(p.stdout.splitlines()[-1])
    assert (summary["oversize"], summary["stored"], summary["ok"]) == (4, 22, False)
    got = fetch(dst, [r.key for r in recs])
    for k, v in live.items():
        assert got[k].value == v, f"live value of {k!r} destroyed"
    assert len(got[b"fits"].value) == b - 4 and len(got[b"fits-flags"].value) == b - 14
    assert b"over-flags" not in got
    report = [json.loads(ln) for ln in Path(summary["oversize_report"]).read_text().splitlines()]
    named = {r.get("key") or base64.b64decode(r["key_b64"]) for r in report}
    assert named == {"over", "over-flags", "big", binkey}
    assert all(r["destination"] == dst.address and r["item_size_max"] == MIB for r in report)
    again = _populate_cli(tmp_path / "dump", dst.address, state, "--accept-oversize")
    assert again.returncode == 0, again.stderr
    s2 = json.loads(again.stdout.splitlines()[-1])
    assert s2["ok"] and s2["oversize"] == 4 and s2["accepted"] == s2["incomplete"]


@pytest.mark.parametrize("one_pass_max", [64 << 20, 4096], ids=["one-pass", "streamed"])
def test_oversize_the_same_in_every_encoding_path(memcached, tmp_path: Path, one_pass_max: int) -> None:
    dst = memcached(memory_mb=64, max_item_size="1m")
    recs = [*records(30), Record(b"huge", 0, -1, b"h" * (MIB + 1)), *records(30, start=30)]
    _dump(tmp_path / "dump", recs)
    cfg = config(
        tmp_path / "dump",
        tmp_path,
        [dst],
        one_pass_max_bytes=one_pass_max,
        batch_items=7,
        accept_oversize=True,
    )
    s = populate(cfg)
    assert (s.stored, s.oversize, s.records) == (60, 1, 61)
    assert b"huge" not in fetch(dst, [b"huge"])


def test_each_destination_by_its_own_limit(memcached, tmp_path: Path) -> None:
    """`-I 1m` and `-I 4m`: a 2 MiB item is skipped only where it routes to the small destination."""
    small, large = memcached(memory_mb=64, max_item_size="1m"), memcached(memory_mb=64, max_item_size="4m")
    recs = [Record(b"big:%d" % i, 0, -1, b"b" * (2 * MIB)) for i in range(12)]
    _dump(tmp_path / "dump", recs)
    routing = Routing("{host}:{port}")
    ring = routing.ring([node(small), node(large)])
    assert ring is not None
    to_small = [r.key for r in recs if ring.node_for(r.key) == node(small)]
    assert 0 < len(to_small) < len(recs)
    with pytest.raises(PopulateIncomplete) as e:
        populate(config(tmp_path / "dump", tmp_path, [small, large]))
    s = e.value.summary  # type: ignore[attr-defined]
    assert s.oversize == len(to_small) and s.stored == len(recs) - len(to_small)
    assert s.destinations[small.address]["item_size_max"] == MIB
    assert s.destinations[large.address]["item_size_max"] == 4 * MIB
    assert fetch(small, to_small) == {}


def test_a_destination_with_evictions_off_is_refused_before_any_write(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=16, extra_args=["-M"])
    with _Writer(dst) as w:
        w.set(b"k1", b"live")
    _dump(tmp_path / "dump", records(50))
    p = _populate_cli(tmp_path / "dump", dst.address, tmp_path / "st.json")
    assert p.returncode == 1 and "evictions off" in p.stderr and "--accept-no-evictions" in p.stderr
    assert dst.stats()["curr_items"] == "1" and fetch(dst, [b"k1"])[b"k1"].value == b"live"
    p = _populate_cli(tmp_path / "dump", dst.address, tmp_path / "st.json", "--accept-no-evictions")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.splitlines()[-1])["destinations"][dst.address]["evictions"] is False


def test_an_incomplete_dump_fails_unless_accepted(memcached, tmp_path: Path) -> None:
    dst = memcached(memory_mb=16)
    w = DirWriter(tmp_path / "dump", node="src")
    w.write(0, 0, records(10))
    body = w.manifest()
    body.update(complete=False, incomplete_reason="reconciliation did not converge after 4 passes")
    body["completeness"] = {"keys_listed": 12, "records": 10, "undumped": 2}
    (tmp_path / "dump" / "DONE").write_text(json.dumps(body))
    p = _populate_cli(tmp_path / "dump", dst.address, tmp_path / "st.json")
    assert p.returncode == ExitCode.INCOMPLETE
    assert "did not converge" in p.stderr and "--accept-incomplete-dump" in p.stderr
    s = json.loads(p.stdout.splitlines()[-1])
    assert s["dump_complete"] is False and s["stored"] == 10  # every item there is still written
    p = _populate_cli(tmp_path / "dump", dst.address, tmp_path / "st.json", "--accept-incomplete-dump")
    assert p.returncode == 0, p.stderr
    # A DONE that says it is complete, and one that does not say (an older dumper), are complete.
    for complete in (True, None):
        body.update(complete=complete, incomplete_reason=None)
        if complete is None:
            del body["complete"]
        (tmp_path / "dump" / "DONE").write_text(json.dumps(body))
        s = populate(config(tmp_path / "dump", tmp_path, [dst], state_file=tmp_path / f"{complete}.json"))
        assert s.ok and s.dump_complete is complete
    body["complete"] = "yes"
    (tmp_path / "dump" / "DONE").write_text(json.dumps(body))
    with pytest.raises(PopulateError, match="'complete' must be true or false"):
        populate(config(tmp_path / "dump", tmp_path, [dst], state_file=tmp_path / "bad.json"))
