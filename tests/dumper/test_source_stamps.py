"""Version 3's source stamps against the source's own expiries (docs/data-format.md section 8.1).

The populator's re-check deletes a copy whose source now ends before the stamp says it did at the read
(a touch the copy missed). A stamp later than the source's own end therefore costs a good copy: on a
source nobody touches, every stamp must be exactly the listing's exp, even when the source's clock moves
against the dumper's measurement of it mid-dump (memcached's timer slips and jumps; here a stall moves
its tick 0.8 s later, so its clock stands 0.8 s further below its ceiling than when measured)."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from cachewarm.datapath import format as df
from cachewarm.datapath.metadump import list_keys

from tests.dumper.dumputil import Item, dump_cmd, load
from tests.faults.test_clock_faults import _stall_to

ITEMS = 3000


def _started_until_first_file(cmd: list[str], out: Path) -> subprocess.Popen[str]:
    """The dumper, once its first data file is published (the listing done, the fetch under way)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list(out.glob("*.cwd")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return proc


def test_stamps_are_the_sources_own_expiry_when_its_clock_moves_back_mid_dump(
    memcached: Any, dumper_bin: Path, tmp_path: Path
) -> None:
    src = memcached(memory_mb=64)
    load(src, [Item(b"st:%d" % i, b"v" * 50, 0, 3600 if i % 4 else 0) for i in range(ITEMS)])
    _stall_to(src, 0.15)  # its clock near its ceiling when the dump measures it
    out = tmp_path / "dump"
    cmd = dump_cmd(dumper_bin, src, out, "--max-items-per-second", "1000", "--data-file-size", "64k")
    proc = _started_until_first_file(cmd, out)
    _stall_to(src, 0.95)  # 0.8 s back against that measurement, the rest of the dump
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-500:]
    exp = dict(list_keys(src.host, src.port))
    late, early, stamped = [], [], 0
    for f in sorted(out.glob("*.cwd")):
        v = df.check_file(f)
        assert v.ok and v.data is not None and v.header is not None, v.reason
        assert v.header.version == df.VERSION_3
        for r in df.iter_records(v.data):
            stamped += 1
            (late if r.source_exp > exp[r.key] else early if r.source_exp < exp[r.key] else []).append(r.key)
    assert stamped == ITEMS
    assert not late, f"{len(late)} stamps after the source's own end (a good copy deleted each): {late[:3]}"
    assert not early, f"{len(early)} stamps before the source's own end on a quiet source: {early[:3]}"


def test_a_key_touched_among_keys_that_never_expire_is_stamped_within_two_seconds_of_its_source(
    memcached: Any, dumper_bin: Path, tmp_path: Path
) -> None:
    """No listing the dump reads has an expiry to agree with (3,000 keys that never expire), so nothing
    but a look at the source's clock keeps the floor a touched key's `mg t` counts from fresh. A key
    touched to 60 s once the listing is complete, fetched ~8 s later (the coldest: last in recency
    order; the dump rate-limited), is stamped never after its source's end and at most 2 s before it
    (the floor's look at most ~1 s old, plus the whole seconds' rounding), not the ~8 s a floor left at
    the dump's start costs."""
    src = memcached(memory_mb=64)
    load(src, [Item(b"touched", b"t", 0, 0)])
    load(src, [Item(b"filler:%d" % i, b"v" * 50, 0, 0) for i in range(ITEMS)])
    out = tmp_path / "dump"
    cmd = dump_cmd(dumper_bin, src, out, "--max-items-per-second", "375", "--data-file-size", "16k")
    proc = _started_until_first_file(cmd, out)
    touched_at = time.monotonic()
    with socket.create_connection((src.host, src.port), timeout=10) as s:
        s.sendall(b"touch touched 60\r\n")
        assert s.recv(64) == b"TOUCHED\r\n"
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-500:]
    assert time.monotonic() - touched_at > 4, "the dump fetched the touched key too soon to test anything"
    src_exp = dict(list_keys(src.host, src.port))[b"touched"]
    stamps = {}
    for f in sorted(out.glob("*.cwd")):
        v = df.check_file(f)
        assert v.ok and v.data is not None, v.reason
        stamps.update({r.key: r.source_exp for r in df.iter_records(v.data) if r.key == b"touched"})
    assert b"touched" in stamps, "the touched key was not dumped"
    assert stamps[b"touched"] <= src_exp, f"stamped {stamps[b'touched']}, after its source's end {src_exp}"
    assert stamps[b"touched"] >= src_exp - 2, (
        f"stamped {stamps[b'touched']}, {src_exp - stamps[b'touched']} s before its source's end {src_exp}:"
        " the floor its `mg t` counted from was stale"
    )
