"""Issue 21: what the suite never varied. A destination that runs out of memory while live values sit
under the keys being written (memcached's `ms` unlinks the key when it cannot allocate the new item,
in add mode too; the populator and the stream send `add` / ADDQ, which leave it): every live value
survives and the run fails loudly, naming the error and a key. Files (data format v1 and v2) and the
stream, on every release of the matrix."""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cachewarm.datapath.format import Record
from cachewarm.datapath.metadump import list_keys
from cachewarm.datapath.populate import PopulateError, populate
from cachewarm.datapath.writer import DirWriter
from cachewarm.testing.memcached import MemcachedServer
from cachewarm.testing.populating import (
    READ_SLACK,
    Background,
    ClockWatch,
    clock_ahead,
    config,
    expiries,
    expiry_within,
    listed_expiries,
)

from tests.dumper.dumputil import Item, dump_cmd, load, load_binary_protocol, read_dump, run_dump
from tests.faults.harness import CLI, CuttingProxy, fetch_all, trials, wait_until

# Live values are small (one slab class); the dump's values are BIG (another class, left with no
# free chunk): every store of a dumped item fails to allocate.
BIG = 5000
LIVE = 300


def _talk(s: socket.socket, req: bytes, replies: int) -> list[bytes]:
    buf = b""
    while buf.count(b"\r\n") < replies:
        chunk = s.recv(1 << 16)
        if not chunk:
            raise ConnectionError("memcached closed the connection")
        buf += chunk
    return buf.split(b"\r\n")[:replies]


def full_destination(memcached, live: dict[bytes, bytes]) -> MemcachedServer:
    """A memcached with evictions off (-M), the live values stored, then every slab class a value of
    ours could use filled (keys fill:<n>) until it answers `SERVER_ERROR out of memory`. No slab
    automove: nothing the server does on its own frees or moves memory while the test runs."""
    dst: MemcachedServer = memcached(memory_mb=2, extra_args=["-M", "-o", "slab_automove=0"])
    with socket.create_connection((dst.host, dst.port), timeout=30) as s:
        req = b"".join(b"set %b 0 0 %d\r\n%b\r\n" % (k, len(v), v) for k, v in live.items())
        s.sendall(req)
        assert set(_talk(s, req, len(live))) == {b"STORED"}
        n = 0
        for size in (len(next(iter(live.values()))), BIG):
            while True:
                batch = b"".join(
                    b"set fill:%d 0 0 %d\r\n%b\r\n" % (n + i, size, b"f" * size) for i in range(100)
                )
                s.sendall(batch)
                n += 100
                got = _talk(s, batch, 100)
                if any(g.startswith(b"SERVER_ERROR out of memory") for g in got):
                    break
    return dst


def free_memory(dst: MemcachedServer) -> None:
    """Delete every fill:<n> key full_destination wrote: the destination has room again."""
    with socket.create_connection((dst.host, dst.port), timeout=30) as s:
        n = 0
        while True:
            req = b"".join(b"delete fill:%d\r\n" % (n + i) for i in range(500))
            s.sendall(req)
            got = _talk(s, req, 500)
            n += 500
            if all(g == b"NOT_FOUND" for g in got):
                return


def live_values() -> dict[bytes, bytes]:
    return {b"oom:%d" % i: b"live-%d" % i for i in range(LIVE)}


def dumped(version: int, path: Path) -> list[Record]:
    """A dump writing every live key (BIG values, add mode) and as many new keys."""
    far = int(time.time()) + 3600
    recs = [Record(b"oom:%d" % i, i, -1 if i % 2 else far, b"%d-" % i + b"d" * BIG) for i in range(2 * LIVE)]
    w = DirWriter(path, node="src", version=version)
    for f in range(4):
        w.write(f, 0, recs[f::4])
    w.done()
    return recs


def audit_live(dst: MemcachedServer, live: dict[bytes, bytes], tally, trial: int) -> None:
    got = fetch_all(dst, live)
    for k, v in live.items():
        it = got.get(k)
        if it is None or it.value != v:
            tally.corrupt += 1  # a live value destroyed (or replaced) by a failed store
            if tally.corrupt < 4:
                now = "gone" if it is None else f"{it.value[:12]!r}..."
                tally.note(f"trial {trial}: the live value under {k!r} is {now}")


def stream_to(dst: MemcachedServer) -> list[str]:
    """The stream's arguments for these scenarios: a part is recorded in keys/STREAMED (their trigger:
    the dump is under way, the cold keys still to fetch) once re-checked, so the settle delay is short
    enough for the trigger to come before the fetch of the last keys."""
    return ["--to", dst.address, "--settle-seconds", "0.2"]


@pytest.mark.parametrize("version", [1, 2])
def test_out_of_memory_destination_keeps_live_values_files(
    memcached, tmp_path: Path, tally, version: int
) -> None:
    t = tally(
        f"files v{version}, C path: destination out of memory, live values "
        "under the keys → all kept, loud failure"
    )
    for trial in range(trials()):
        live = live_values()
        dst = full_destination(memcached, live)
        dump = tmp_path / f"t{trial}" / "vol"
        dumped(version, dump)
        cfg = config(dump, tmp_path / f"t{trial}", [dst], workers=1, accept_no_evictions=True)
        t.trials += 1
        try:
            populate(cfg)
            t.corrupt += 1
            t.note(f"trial {trial}: the populator succeeded against a destination out of memory")
        except PopulateError as e:
            if "out of memory" not in str(e) or "oom:" not in str(e):
                t.corrupt += 1
                t.note(f"trial {trial}: the failure names neither the error nor a key: {e}")
        audit_live(dst, live, t, trial)
        dst.stop()
    t.check()


def test_out_of_memory_destination_exits_non_zero(memcached, tmp_path: Path, tally) -> None:
    """The command line: a non-zero exit whose message names the error."""
    t = tally("files, `cachewarm populate`: destination out of memory → non-zero exit naming it")
    for trial in range(trials()):
        live = live_values()
        dst = full_destination(memcached, live)
        dump = tmp_path / f"t{trial}" / "vol"
        dumped(2, dump)
        r = subprocess.run(
            [
                *CLI,
                "populate",
                *(
                    "--from",
                    str(dump),
                    "--to",
                    dst.address,
                    "--state-file",
                    str(tmp_path / f"t{trial}.state"),
                ),
                *("--workers", "1", "--poll-interval", "0.05", "--accept-no-evictions"),
                *("--destination-timeout", "20", "--bad-file-timeout", "5", "--accept-no-recheck"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        t.trials += 1
        out = r.stdout + r.stderr
        if r.returncode == 0 or "out of memory" not in out:
            t.corrupt += 1
            t.note(f"trial {trial}: rc {r.returncode}: {out[-400:]!r}")
        audit_live(dst, live, t, trial)
        dst.stop()
    t.check()


def test_out_of_memory_destination_keeps_live_values_stream(
    dumper_bin: Path, memcached, tmp_path: Path, tally
) -> None:
    t = tally("stream: destination out of memory, live values under the keys → all kept, loud failure")
    src: MemcachedServer = memcached(memory_mb=64)
    far = int(time.time()) + 3600
    load(src, [Item(b"oom:%d" % i, b"%d-" % i + b"d" * BIG, i, 0 if i % 2 else far) for i in range(2 * LIVE)])
    for trial in range(trials()):
        live = live_values()
        dst = full_destination(memcached, live)
        out = tmp_path / f"t{trial}"
        r = run_dump(dumper_bin, src, out, "--to", dst.address, "--accept-no-evictions")
        t.trials += 1
        if r.returncode == 0 or "out of memory" not in r.stderr or (out / "DONE").exists():
            t.corrupt += 1
            t.note(f"trial {trial}: rc {r.returncode}, not a loud failure: {r.stderr.strip()[-300:]!r}")
        audit_live(dst, live, t, trial)
        dst.stop()
    t.check()


def test_a_dropped_connection_never_discards_another_destinations_error(
    memcached, tmp_path: Path, tally
) -> None:
    """Two destinations: A out of memory (it answers SERVER_ERROR), B's connection reset mid-file; at
    the reset A gets its memory back, so a retry of the file would succeed. A's error must still fail
    the file (it was answered), not vanish with the retry."""
    t = tally(
        "files, C sender: a connection dropped while another destination "
        "holds an error reply → the error fails the run"
    )
    for trial in range(trials()):
        live = live_values()
        a = full_destination(memcached, live)
        b: MemcachedServer = memcached(memory_mb=64)
        proxy = CuttingProxy(b, after=100_000, on_cut=lambda a=a: free_memory(a))
        dump = tmp_path / f"t{trial}" / "vol"
        recs = dumped(2, dump)
        cfg = config(
            dump,
            tmp_path / f"t{trial}",
            [a, proxy],
            workers=1,
            accept_no_evictions=True,
            batch_items=20,
        )
        t.trials += 1
        try:
            populate(cfg)
            t.corrupt += 1  # an answered error was dropped: the run says every item is there
            t.note(f"trial {trial}: the populator succeeded; cuts {proxy.cuts}")
        except PopulateError as e:
            if "out of memory" not in str(e):
                t.corrupt += 1
                t.note(f"trial {trial}: the failure does not name A's error: {e}")
        proxy.close()
        if proxy.cuts != 1:
            t.note(f"trial {trial}: no cut happened ({proxy.cuts})")
        audit_live(a, live, t, trial)
        del recs
        a.stop()
        b.stop()
    t.check()


def test_a_dropped_connection_never_discards_another_destinations_error_stream(
    dumper_bin: Path, memcached, tmp_path: Path, tally
) -> None:
    """The stream's twin of the test above: the sink's reconnect reads the other destination's
    replies to the end first, and its error fails the stream."""
    t = tally(
        "stream: a connection dropped while another destination holds an error reply → the error fails it"
    )
    src: MemcachedServer = memcached(memory_mb=64)
    far = int(time.time()) + 3600
    load(src, [Item(b"oom:%d" % i, b"%d-" % i + b"d" * BIG, i, 0 if i % 2 else far) for i in range(2 * LIVE)])
    for trial in range(trials()):
        live = live_values()
        a = full_destination(memcached, live)
        b: MemcachedServer = memcached(memory_mb=64)
        proxy = CuttingProxy(b, after=100_000, on_cut=lambda a=a: free_memory(a))
        out = tmp_path / f"t{trial}"
        r = run_dump(
            dumper_bin,
            src,
            out,
            *("--batch", "20", "--node-key-format", "{host}:{port}", "--accept-no-evictions"),
            *("--to", f"{a.address},{proxy.address}"),
        )
        proxy.close()
        t.trials += 1
        if proxy.cuts != 1:
            t.note(f"trial {trial}: no cut happened ({proxy.cuts})")
        if r.returncode == 0 or "out of memory" not in r.stderr or (out / "DONE").exists():
            t.corrupt += 1
            t.note(f"trial {trial}: rc {r.returncode} (cuts {proxy.cuts}): {r.stderr.strip()[-300:]!r}")
        audit_live(a, live, t, trial)
        a.stop()
        b.stop()
    t.check()


# --------------------------------------------------------------------------------------------------
# Clocks: a destination memcached whose clock is behind or ahead of this host's


@pytest.mark.parametrize("shift", [-600, 600], ids=["dest-600s-behind", "dest-600s-ahead"])
def test_destination_clock_behind_or_ahead_keeps_every_ttl(
    dumper_bin: Path, memcached, memcached_binary: str, tmp_path: Path, tally, warm_mode: str, shift: int
) -> None:
    """A destination memcached started under faketime, its clock `shift` s off this host's (and the
    dumper's): every item arrives with the TTL it has on the source — it ends never later, at most
    EXPIRY_SLACK (1 s) earlier, each server's clock measured to a few ms — for relative TTLs (60 s,
    1 h) and absolute ones (40 days) alike."""
    t = tally(f"destination clock {shift:+d} s against the dumper's → exact TTLs ({warm_mode})")
    for trial in range(trials()):
        src: MemcachedServer = memcached(memory_mb=64)
        dst = MemcachedServer(
            memory_mb=64, binary=memcached_binary, launcher=faketime(f"{shift:+d}s")
        ).start()
        try:
            clocks = ClockWatch(src, dst)
            far = int(time.time()) + 40 * 86400
            ttls = [0, 60, 3600, far]
            items = [Item(b"clk:%d" % i, b"v%d" % i, i, ttls[i % 4]) for i in range(400)]
            load(src, items)
            keys = [it.key for it in items]
            clocks.join()
            flags = ["--stream"] if warm_mode == "stream" else []
            r = subprocess.run(
                [
                    *CLI,
                    "warm",
                    *(
                        "--source",
                        src.address,
                        "--target",
                        dst.address,
                        "--workdir",
                        str(tmp_path / f"t{trial}"),
                    ),
                    *("--dumper", str(dumper_bin), "--json", *flags),
                ],
                capture_output=True,
                text=True,
                timeout=300,
            )
            t.trials += 1
            if r.returncode != 0:
                t.lost += len(items)
                t.note(f"trial {trial}: warm exited {r.returncode}: {r.stderr.strip()[-300:]}")
                continue
            slack = clocks.slack(src, dst)
            src_end, dst_end = expiries(src, keys, clocks.ahead(src)), expiries(dst, keys, clocks.ahead(dst))
            for k in keys:
                if k not in dst_end:
                    t.lost += 1  # e.g. expired on arrival (a destination ahead read the T as past)
                    if t.lost < 4:
                        t.note(f"trial {trial}: {k!r} missing at the destination")
                    continue
                if not expiry_within(src_end[k], dst_end[k], slack):
                    t.corrupt += 1
                    if t.corrupt < 4:
                        t.note(
                            f"trial {trial}: {k!r} ends {dst_end[k] - src_end[k]:+.3f} s off its source's end"
                            f" (a TTL {dst_end[k] - time.time():.1f} s at the destination) {slack.why}"
                        )
        finally:
            dst.stop()
            src.stop()
    t.check()


FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


def faketime(offset: str) -> list[str]:
    """A launcher that starts memcached with its clocks `offset` off ("-600s"): libfaketime preloaded
    through `env`, which execs (the `faketime` wrapper forks: killing it would orphan the server).
    Stop such a server with stop(), not kill(): libfaketime removes its shared memory at exit."""
    if not FAKETIME_LIB.exists():
        pytest.fail(f"{FAKETIME_LIB} missing: install Debian's faketime package (make deps)")
    return ["env", f"LD_PRELOAD={FAKETIME_LIB}", f"FAKETIME={offset}"]


def jumping_clock(tmp: Path) -> tuple[list[str], Path]:
    """A launcher that starts memcached under libfaketime reading its offset from a file (re-read on
    every call), and that file: writing "+600s" to it moves the server's clocks — the monotonic one
    memcached counts on included — 600 s ahead at once, as a paused and resumed VM's can."""
    if not FAKETIME_LIB.exists():
        pytest.fail(f"{FAKETIME_LIB} missing: install Debian's faketime package (make deps)")
    stamp = tmp / "faketime-offset"
    stamp.write_text("+0s\n")
    env = ["env", f"LD_PRELOAD={FAKETIME_LIB}", f"FAKETIME_TIMESTAMP_FILE={stamp}", "FAKETIME_NO_CACHE=1"]
    return env, stamp


def test_destination_clock_jump_mid_populate_is_refused(
    memcached, memcached_binary: str, tmp_path: Path, tally
) -> None:
    """The destination's clock jumps 600 s between two files (the first half consumed, then the jump,
    then the rest published): the populator refuses, naming the node and both offsets (the items
    written before would otherwise expire 600 s off their TTL)."""
    t = tally("files: the destination's clock jumps 600 s mid-populate → refused, naming node and offsets")
    for trial in range(trials()):
        (tmp_path / f"j{trial}").mkdir()
        launcher, stamp = jumping_clock(tmp_path / f"j{trial}")
        dst = MemcachedServer(memory_mb=64, binary=memcached_binary, launcher=launcher).start()
        try:
            far = int(time.time()) + 3600
            w = DirWriter(tmp_path / f"t{trial}" / "vol", node="src")
            for f in range(10):
                w.write(f, 0, [Record(b"j:%d:%d" % (f, i), 0, far, b"v" * 50) for i in range(100)])
            bg = Background(config(tmp_path / f"t{trial}" / "vol", tmp_path / f"t{trial}", [dst], workers=1))
            bg.start()
            bg.wait_for(lambda bg=bg: any(e.files_consumed >= 10 for e in bg.events))
            stamp.write_text("+600s\n")
            for f in range(10, 20):
                w.write(f, 0, [Record(b"j:%d:%d" % (f, i), 0, far, b"v" * 50) for i in range(100)])
            w.done()
            assert bg.thread is not None
            bg.thread.join(60)
            t.trials += 1
            e = bg.error
            if not isinstance(e, PopulateError):
                t.corrupt += 1
                t.note(f"trial {trial}: the populator did not refuse across a 600 s clock jump: {e!r}")
            elif not any(f"clock moved +{n} s" in str(e) for n in (599, 600, 601)) or dst.address not in str(
                e
            ):
                t.corrupt += 1
                t.note(f"trial {trial}: the refusal names neither the jump nor the node: {e}")
        finally:
            dst.stop()
    t.check()


def test_destination_clock_jump_mid_stream_is_refused(
    dumper_bin: Path, memcached, memcached_binary: str, tmp_path: Path, tally
) -> None:
    t = tally("stream: the destination's clock jumps 600 s mid-stream → refused, naming node and offsets")
    src: MemcachedServer = memcached(memory_mb=64)
    load(src, [Item(b"j:%d" % i, b"v" * 50, 0, 3600) for i in range(3000)])
    for trial in range(trials()):
        (tmp_path / f"j{trial}").mkdir()
        launcher, stamp = jumping_clock(tmp_path / f"j{trial}")
        dst = MemcachedServer(memory_mb=64, binary=memcached_binary, launcher=launcher).start()
        try:
            out = tmp_path / f"t{trial}"
            proc = subprocess.Popen(
                dump_cmd(
                    dumper_bin,
                    src,
                    out,
                    *(
                        "--batch",
                        "20",
                        "--max-items-per-second",
                        "1000",
                        "--destination-check-interval",
                        "0.1",
                    ),
                    *("--key-file-size", "8k", "--to", dst.address),
                ),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            # The jump once the stream writes (its start measures the destination's clock, up to 1.2 s).
            streamed = out / "keys" / "STREAMED"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (streamed.exists() and streamed.stat().st_size > 0):
                time.sleep(0.01)
            stamp.write_text("+600s\n")
            _, err = proc.communicate(timeout=120)
            r = subprocess.CompletedProcess(proc.args, proc.returncode, "", err)
            t.trials += 1
            if r.returncode == 0 or "clock moved" not in r.stderr or dst.address not in r.stderr:
                t.corrupt += 1
                t.note(f"trial {trial}: rc {r.returncode}: {r.stderr.strip()[-300:]!r}")
        finally:
            dst.stop()
    t.check()


def test_an_expiry_at_the_end_of_time_on_a_lagging_source_is_clamped(
    dumper_bin: Path, memcached_binary: str, tmp_path: Path, tally, warm_mode: str
) -> None:
    """A `T2147483647` item (memcached's largest) on a source whose clock lags this host's by 3 s: its
    remaining TTL ends 3 s past 2^31-1 on this host's clock. Clamped, as memcached itself caps T,
    never fatal: the warm copies it (and every other item) with the largest T there is."""
    t = tally(f"an expiry at 2^31-1 on a source 3 s behind → clamped, copied ({warm_mode})")
    for trial in range(trials()):
        src = MemcachedServer(memory_mb=64, binary=memcached_binary, launcher=faketime("-3s")).start()
        dst = MemcachedServer(memory_mb=64, binary=memcached_binary).start()
        try:
            items = [
                Item(b"eot", b"end of time", 7, 2**31 - 1),
                *[Item(b"k%d" % i, b"v", 0, 0) for i in range(50)],
            ]
            load(src, items)
            flags = ["--stream"] if warm_mode == "stream" else []
            r = subprocess.run(
                [
                    *CLI,
                    "warm",
                    *(
                        "--source",
                        src.address,
                        "--target",
                        dst.address,
                        "--workdir",
                        str(tmp_path / f"t{trial}"),
                    ),
                    *("--dumper", str(dumper_bin), "--json", *flags),
                ],
                capture_output=True,
                text=True,
                timeout=300,
            )
            t.trials += 1
            if r.returncode != 0:
                t.lost += len(items)
                t.note(f"trial {trial}: warm exited {r.returncode}: {r.stderr.strip()[-300:]}")
                continue
            got = fetch_all(dst, [it.key for it in items])
            src_ttl = fetch_all(src, [b"eot"])[b"eot"].ttl
            it = got.get(b"eot")
            if (
                it is None
                or it.value != b"end of time"
                or it.ttl is None
                or src_ttl is None
                or it.ttl > src_ttl
            ):
                t.corrupt += 1
                t.note(f"trial {trial}: the end-of-time item arrived as {it} (source TTL {src_ttl})")
            t.lost += sum(1 for x in items if x.key not in got)
        finally:
            src.stop()
            dst.stop()
    t.check()


# --------------------------------------------------------------------------------------------------
# A binary key (187..250 bytes: its TTL comes from the listing) rewritten between listing and fetch


def test_a_binary_key_rewritten_between_listing_and_fetch_is_never_copied_wrong(
    dumper_bin: Path, memcached, tmp_path: Path, tally, warm_mode: str
) -> None:
    """A 200-byte binary key, listed with no expiry, is rewritten with a 4 s TTL while the dumper
    fetches the other keys (recency order fetches it last: it is the coldest). Its new value must not
    be copied with the listing's "never" (a resurrection): the dumper compares the fetch's CAS with
    the listing's, names the key and leaves it out. Files (the dump's records) and stream (the
    destination)."""
    t = tally(
        "a binary key rewritten between listing and fetch → named, never copied with the old TTL "
        f"({warm_mode})"
    )
    for trial in range(trials()):
        src: MemcachedServer = memcached(memory_mb=64)
        dst: MemcachedServer = memcached(memory_mb=64)
        key = bytes([0x00, 0xFF]) * 100
        load_binary_protocol(src, [Item(key, b"old", 1, 0)])
        load(src, [Item(b"k:%d" % i, b"v" * 100, 0, 0) for i in range(3000)])
        out = tmp_path / f"t{trial}"
        to = stream_to(dst) if warm_mode == "stream" else []
        proc = subprocess.Popen(
            dump_cmd(dumper_bin, src, out, "--max-items-per-second", "1500", "--data-file-size", "16k", *to),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # The listing is complete once the first part is out (recency order lists every key first).
        streamed = out / "keys" / "STREAMED"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
            any(out.glob("*.cwd")) or (streamed.exists() and streamed.stat().st_size > 0)
        ):
            time.sleep(0.01)
        load_binary_protocol(src, [Item(key, b"new, for 4 s", 2, 4)])
        _, err = proc.communicate(timeout=120)
        t.trials += 1
        if warm_mode == "stream":
            it = fetch_all(dst, [key]).get(key)
            exp = dict(list_keys(dst.host, dst.port)).get(key)
            late = exp is not None and (exp == -1 or exp > int(dst.stats()["time"]) + 5)
            got_value = None if it is None else it.value
        else:
            rec = read_dump(out, require_done=False).by_key().get(key)
            late = rec is not None and (rec.exptime == -1 or rec.exptime > time.time() + 5)
            got_value = None if rec is None else bytes(rec.value)
        if got_value is not None and (got_value != b"new, for 4 s" or late):
            t.corrupt += 1  # copied with the listing's TTL: a resurrection
            t.note(f"trial {trial}: copied as {got_value!r} with an expiry past the rewrite's")
        if got_value is None and "rewritten between the listing and the fetch" not in err:
            t.lost += 1
            t.note(f"trial {trial}: left out without being named: {err.strip()[-300:]!r}")
    t.check()


def dump_clock(workdir: Path) -> object:
    """What the warm's dump moved the expiries by (DONE's clock), for a failure's note."""
    done = workdir / "dump" / "DONE"
    return json.loads(done.read_text()).get("clock") if done.exists() else "no DONE (stream)"


@pytest.mark.parametrize("shift", [-600, 600], ids=["source-600s-behind", "source-600s-ahead"])
def test_binary_keys_ttl_from_a_skewed_sources_listing(
    dumper_bin: Path, memcached_binary: str, tmp_path: Path, tally, warm_mode: str, shift: int
) -> None:
    """A binary key of 187..250 bytes takes its TTL from the listing's exp, an absolute time on the
    source's clock: the dumper moves it onto its own (by the source's `stats time`), so a source 600 s
    ahead does not lengthen it by 600 s, nor one behind shorten it."""
    t = tally(f"binary keys' TTL from a source clock {shift:+d} s off the dumper's ({warm_mode})")
    for trial in range(trials()):
        src = MemcachedServer(
            memory_mb=64, binary=memcached_binary, launcher=faketime(f"{shift:+d}s")
        ).start()
        dst = MemcachedServer(memory_mb=64, binary=memcached_binary).start()
        try:
            clocks = ClockWatch(src, dst)
            keys = [bytes([0x00, 0xFF, i]) * 67 for i in range(4)]  # 201 bytes: no meta form
            load_binary_protocol(src, [Item(k, b"bin", 3, 3600) for k in keys])
            clocks.join()
            flags = ["--stream"] if warm_mode == "stream" else []
            r = subprocess.run(
                [
                    *CLI,
                    "warm",
                    *(
                        "--source",
                        src.address,
                        "--target",
                        dst.address,
                        "--workdir",
                        str(tmp_path / f"t{trial}"),
                    ),
                    *("--dumper", str(dumper_bin), "--json", *flags),
                ],
                capture_output=True,
                text=True,
                timeout=300,
            )
            t.trials += 1
            if r.returncode != 0:
                t.lost += len(keys)
                t.note(f"trial {trial}: warm exited {r.returncode}: {r.stderr.strip()[-300:]}")
                continue
            # metadump gives both servers' absolute exp on their own clocks: compared on this host's.
            slack = clocks.slack(src, dst)
            src_end = listed_expiries(src, clocks.ahead(src))
            dst_end = listed_expiries(dst, clocks.ahead(dst))
            for k in keys:
                if k not in dst_end:
                    t.lost += 1
                elif not expiry_within(src_end[k], dst_end[k], slack):
                    t.corrupt += 1
                    t.note(
                        f"trial {trial}: ends {dst_end[k] - src_end[k]:+.3f} s off its source's end"
                        f" {slack.why} (allowed {slack.early:.3f} s early; the dump's clock:"
                        f" {dump_clock(tmp_path / f't{trial}')})"
                    )
        finally:
            src.stop()
            dst.stop()
    t.check()


# --------------------------------------------------------------------------------------------------
# A TTL changed without a value change (touch / gat) between listing and fetch


def test_a_key_touched_between_listing_and_fetch_keeps_the_touch(
    dumper_bin: Path, memcached, tmp_path: Path, tally, warm_mode: str
) -> None:
    """A plain key listed with no expiry is touched to 10 s while the dumper fetches the other keys
    (recency order fetches it last: it is the coldest), another listed with 1 h is touched to 8 s.
    `mg t` returns the TTL at the fetch: each is copied ending never after its source (no "never" from
    the listing: a resurrection; no 1 h: an extension) and, once its source's end has passed, is gone
    at the destination too. Files (the dump's records) and stream (the destination)."""
    t = tally(
        f"a key touched between listing and fetch → copied with the touched TTL, never longer ({warm_mode})"
    )
    for trial in range(trials()):
        src: MemcachedServer = memcached(memory_mb=64)
        dst: MemcachedServer = memcached(memory_mb=64)
        load(src, [Item(b"touch:never", b"n", 1, 0), Item(b"touch:hour", b"h", 2, 3600)])
        load(src, [Item(b"k:%d" % i, b"v" * 100, 0, 0) for i in range(3000)])
        out = tmp_path / f"t{trial}"
        to = stream_to(dst) if warm_mode == "stream" else []
        proc = subprocess.Popen(
            dump_cmd(dumper_bin, src, out, "--max-items-per-second", "1500", "--data-file-size", "16k", *to),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        streamed = out / "keys" / "STREAMED"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
            any(out.glob("*.cwd")) or (streamed.exists() and streamed.stat().st_size > 0)
        ):
            time.sleep(0.01)
        with socket.create_connection((src.host, src.port), timeout=10) as s:
            req = b"touch touch:never 10\r\ntouch touch:hour 8\r\n"
            s.sendall(req)
            answers = _talk(s, req, 2)
        _, err = proc.communicate(timeout=120)
        t.trials += 1
        if answers != [b"TOUCHED", b"TOUCHED"]:
            t.note(f"trial {trial}: the touches answered {answers}")
        keys = [b"touch:never", b"touch:hour"]
        ahead = clock_ahead(src)
        src_end = expiries(src, keys, ahead)
        # Never later than the source, whatever its clock did since the dump (docs/reliability.md
        # "How a TTL is carried": the ceiling, and a touched key counted from a time the source showed).
        late_ok, moved = READ_SLACK, ""
        if warm_mode == "stream":
            dst_end = expiries(dst, keys)
        else:
            recs = read_dump(out, require_done=False).by_key()
            dst_end = {k: float(r.exptime) for k in keys if (r := recs.get(k)) is not None}
        for k in keys:
            if k not in dst_end:
                t.lost += 1
                t.note(f"trial {trial}: {k!r} not copied: {err.strip()[-200:]!r}")
            elif k not in src_end:
                t.note(f"trial {trial}: {k!r} already gone at the source")
            elif dst_end[k] == -1 or dst_end[k] > src_end[k] + late_ok:
                # (a record's exptime is whole seconds rounded down: never after the source's end)
                t.corrupt += 1
                t.note(
                    f"trial {trial}: {k!r} copied to end at {dst_end[k]}, its source ends at"
                    f" {src_end[k]:.3f}{moved}"
                )
        if warm_mode == "stream":
            wait_until(lambda s=src, ks=keys: not fetch_all(s, ks), timeout=30, step=0.1)
            back = fetch_all(dst, keys)
            if back:
                t.corrupt += len(back)
                t.note(
                    f"trial {trial}: {sorted(back)} still readable at the destination after the source's end"
                )
        src.stop()
        dst.stop()
    t.check()


def _binary_touch(srv: MemcachedServer, key: bytes, ttl: int) -> int:
    """Binary-protocol TOUCH (0x1c): the one way to touch a key no text command names; its status."""
    with socket.create_connection((srv.host, srv.port), timeout=10) as s:
        extras = struct.pack(">I", ttl)
        s.sendall(struct.pack(">BBHBBHIIQ", 0x80, 0x1C, len(key), 4, 0, 0, 4 + len(key), 0, 0) + extras + key)
        resp = b""
        while len(resp) < 24:
            chunk = s.recv(4096)
            if not chunk:
                raise ConnectionError("memcached closed the binary connection")
            resp += chunk
        return int(struct.unpack(">H", resp[6:8])[0])


def test_a_long_key_touched_between_listing_and_fetch_keeps_the_touch(
    dumper_bin: Path, memcached, tmp_path: Path, tally, warm_mode: str
) -> None:
    """Keys of 200 bytes with no base64 form (issue 21, gap 2), touched once the listing is complete
    (the dumper rate-limited; recency order fetches them last): one of ':' and letters listed with no
    expiry, touched to 10 s, one with ':' and 0xff listed with 1 h, touched to 8 s. A meta command
    carries both raw: the dumper reads their TTL with the value (`mg t`) and each is copied ending
    never after its source. A third, holding '\n' (no meta command carries it), listed with 1 h and
    touched to 8 s, can only be fetched by the binary protocol, which returns no TTL: the dumper reads
    its TTL again after the fetch (its slab class listed anew), and its copy ends never after its
    source too; DONE counts it in `ttl_reread`, none in `ttl_from_listing`."""
    t = tally(f"a long key touched between listing and fetch → the touched TTL, never longer ({warm_mode})")
    colon = b"touch:" + b"c:" * 97
    text = b"touch:" + b"\xff:" * 97
    untext = b"touch:" + b"\n:" * 97
    assert len(colon) == len(text) == len(untext) == 200
    for trial in range(trials()):
        src: MemcachedServer = memcached(memory_mb=64)
        dst: MemcachedServer = memcached(memory_mb=64)
        load(src, [Item(colon, b"colon", 1, 0)])
        load_binary_protocol(src, [Item(text, b"text", 2, 3600), Item(untext, b"untext", 3, 3600)])
        load(src, [Item(b"k:%d" % i, b"v" * 100, 0, 0) for i in range(3000)])
        out = tmp_path / f"t{trial}"
        to = stream_to(dst) if warm_mode == "stream" else []
        proc = subprocess.Popen(
            dump_cmd(dumper_bin, src, out, "--max-items-per-second", "1500", "--data-file-size", "16k", *to),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        streamed = out / "keys" / "STREAMED"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
            any(out.glob("*.cwd")) or (streamed.exists() and streamed.stat().st_size > 0)
        ):
            time.sleep(0.01)
        answers = [_binary_touch(src, colon, 10), _binary_touch(src, text, 8), _binary_touch(src, untext, 8)]
        _, err = proc.communicate(timeout=120)
        t.trials += 1
        if proc.returncode != 0:
            t.note(f"trial {trial}: the dumper exited {proc.returncode}: {err.strip()[-300:]!r}")
        if answers != [0, 0, 0]:
            t.note(f"trial {trial}: the touches answered {answers}")
        ahead = clock_ahead(src)
        src_end = listed_expiries(src, ahead)
        # Never later than the source, whatever its clock did since the dump (docs/reliability.md
        # "How a TTL is carried": the ceiling, and a touched key counted from a time the source showed).
        late_ok, moved = READ_SLACK, ""
        if warm_mode == "stream":
            dst_end = listed_expiries(dst)
            got = fetch_all(dst, [colon])
            if colon in got and got[colon].value != b"colon":
                t.corrupt += 1
        else:
            recs = read_dump(out, require_done=False).by_key()
            dst_end = {k: float(r.exptime) for k, r in recs.items()}
            for k, v in ((colon, b"colon"), (text, b"text"), (untext, b"untext")):
                if k in recs and bytes(recs[k].value) != v:
                    t.corrupt += 1
                    t.note(f"trial {trial}: {k[:12]!r}… copied as {bytes(recs[k].value)!r}")
        for k in (colon, text, untext):
            if k not in dst_end:
                t.lost += 1
                t.note(f"trial {trial}: {k[:12]!r}… not copied: {err.strip()[-200:]!r}")
            elif k not in src_end:
                t.note(f"trial {trial}: {k[:12]!r}… already gone at the source")
            elif dst_end[k] == -1 or dst_end[k] > src_end[k] + late_ok:
                t.corrupt += 1
                t.note(
                    f"trial {trial}: {k[:12]!r}… copied to end at {dst_end[k]}, source at"
                    f" {src_end[k]:.3f}{moved}"
                )
        done = out / "DONE"
        comp = json.loads(done.read_text())["completeness"] if done.exists() else {}
        if comp.get("ttl_from_listing") != 0 or comp.get("ttl_reread") != 1:
            t.lost += 1
            t.note(
                f"trial {trial}: DONE counts ttl_from_listing {comp.get('ttl_from_listing')}, ttl_reread"
                f" {comp.get('ttl_reread')} (want 0, 1)"
            )
        src.stop()
        dst.stop()
    t.check()


# --------------------------------------------------------------------------------------------------
# The populating host's clock against the dumping host's (files path)

POPULATE_UNDER_FAKETIME = """
import sys
from pathlib import Path
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.populate import PopulateConfig, PopulateError, populate
dump, state, dst, src = sys.argv[1:5]
def node(a):
    h, p = a.rsplit(":", 1)
    return Node(h, int(p))
cfg = PopulateConfig(source_dir=Path(dump), destinations=[node(dst)], state_file=Path(state), workers=1,
    poll_interval=0.05, node_key_format="{host}:{port}", source=node(src) if src else None,
    accept_no_recheck=not src)
try:
    populate(cfg)
except PopulateError as e:
    print(f"REFUSED {e}")
    sys.exit(3)
print("POPULATED")
"""


@pytest.mark.parametrize(
    ("shift", "with_source"),
    [(-600, False), (600, True), (0, True)],
    ids=["populator-600s-behind", "populator-600s-ahead-source-known", "populator-in-sync"],
)
def test_populating_host_clock_against_the_dumping_hosts(
    dumper_bin: Path, memcached, tmp_path: Path, tally, shift: int, with_source: bool
) -> None:
    """The dump is made on this host; the populate runs as if on another host whose clock is `shift`
    s off (the populator under libfaketime). Behind: every file's header says the dump began in its
    future, refused naming the node and the offset. Ahead: seen only through the source memcached,
    measured from both hosts (the header's source_clock_ms against the populator's own look), refused
    naming the source and the offset. In sync: populated, every TTL within the promise."""
    t = tally(
        f"files: populating host's clock {shift:+d} s off the dumping host's → "
        + ("exact" if not shift else "refused, named")
    )
    for trial in range(trials()):
        src: MemcachedServer = memcached(memory_mb=64)
        dst: MemcachedServer = memcached(memory_mb=64)
        clocks = ClockWatch(src, dst)
        items = [Item(b"h:%d" % i, b"v%d" % i, i, [0, 60, 3600][i % 3]) for i in range(300)]
        load(src, items)
        out = tmp_path / f"t{trial}"
        clocks.join()
        r = run_dump(dumper_bin, src, out)
        assert r.returncode == 0, r.stderr
        # (monotonic clocks shifted too: with FAKETIME_DONT_FAKE_MONOTONIC, Python's sleep fails EINVAL)
        env = {**os.environ, "LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME": f"{shift:+d}s"}
        if not FAKETIME_LIB.exists():
            pytest.fail(f"{FAKETIME_LIB} missing: install Debian's faketime package (make deps)")
        p = subprocess.run(
            [
                sys.executable,
                "-c",
                POPULATE_UNDER_FAKETIME,
                str(out),
                str(tmp_path / f"s{trial}.json"),
                dst.address,
                src.address if with_source else "",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        t.trials += 1
        said = p.stdout + p.stderr
        keys = [it.key for it in items]
        if shift == 0:
            if p.returncode != 0:
                t.lost += len(items)
                t.note(f"trial {trial}: in sync, the populate failed: {said[-300:]!r}")
                continue
            slack = clocks.slack(src, dst)
            src_end, dst_end = expiries(src, keys, clocks.ahead(src)), expiries(dst, keys, clocks.ahead(dst))
            for k in keys:
                if k not in dst_end:
                    t.lost += 1
                elif not expiry_within(src_end[k], dst_end[k], slack):
                    t.corrupt += 1
                    t.note(
                        f"trial {trial}: {k!r} ends {dst_end[k] - src_end[k]:+.3f} s off its source's end"
                        f" {slack.why}"
                    )
            continue
        named = src.address if with_source else "127.0.0.1_"
        offset = re.search(r"([+-]?\d+\.\d) s (behind|off)", said)
        if p.returncode != 3 or named not in said or not offset or abs(float(offset[1])) < 590:
            t.corrupt += 1
            t.note(f"trial {trial}: not refused naming {named}, offset (rc {p.returncode}): {said[-400:]!r}")
        stored = fetch_all(dst, keys)
        if stored:
            t.corrupt += len(stored)
            t.note(f"trial {trial}: {len(stored)} items written before the refusal")
    t.check()


# --------------------------------------------------------------------------------------------------
# The stream's --resume: the destinations' clocks kept in keys/STREAM


def test_stream_resume_after_a_destination_clock_moved_is_refused(
    dumper_bin: Path, memcached, memcached_binary: str, tmp_path: Path, tally
) -> None:
    """A stream stopped (kill -9) after some parts; the destination's clock then moves 5 s (a
    paused VM, a clock step: more than the 1 s the TTLs may be off, less than a mid-stream look's
    whole-second tolerance). `--resume` re-measures it against the clock keys/STREAM kept and refuses,
    naming the node and both offsets; without the move it resumes and finishes."""
    t = tally("stream: --resume after the destination's clock moved 5 s → refused, named; unmoved → resumed")
    src: MemcachedServer = memcached(memory_mb=64)
    load(src, [Item(b"r:%d" % i, b"v" * 50, 0, 3600) for i in range(3000)])
    for trial in range(trials()):
        for move in (True, False):
            (tmp_path / f"j{trial}{move}").mkdir()
            launcher, stamp = jumping_clock(tmp_path / f"j{trial}{move}")
            dst = MemcachedServer(memory_mb=64, binary=memcached_binary, launcher=launcher).start()
            try:
                out = tmp_path / f"t{trial}{move}"
                slow = ["--batch", "20", "--max-items-per-second", "1500", "--key-file-size", "8k"]
                proc = subprocess.Popen(
                    dump_cmd(dumper_bin, src, out, *slow, "--to", dst.address),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                streamed = out / "keys" / "STREAMED"
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and not (streamed.exists() and streamed.stat().st_size > 0):
                    time.sleep(0.01)
                proc.kill()
                proc.wait()
                if move:
                    stamp.write_text("+5s\n")
                r = run_dump(dumper_bin, src, out, "--resume", "--to", dst.address)
                t.trials += 1
                if move and (
                    r.returncode == 0 or "clock moved" not in r.stderr or dst.address not in r.stderr
                ):
                    t.corrupt += 1
                    t.note(f"trial {trial}: resumed past a 5 s move: rc {r.returncode}: {r.stderr[-300:]!r}")
                if not move and r.returncode != 0:
                    t.lost += 1
                    t.note(f"trial {trial}: an unmoved resume failed: {r.stderr[-300:]!r}")
            finally:
                dst.stop()
    t.check()
