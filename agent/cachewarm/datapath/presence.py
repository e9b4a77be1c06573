"""`warm`'s target check as a presence check: per destination, a stream of no-value lookups
(`mg <key>\\r\\n`, one `HD` or `EN` each) sent as one pipelined write while the replies are read, and
the replies counted with byte searches, not line by line.

The lookups come from the populate (files: the worker's plan, `_v2plan.c`, writes them for every
item it sent as text, already routed, with each item's T) or from the stream's key lists (one C walk,
`_speedups.probe_keys`, routes them). So the check neither re-reads, re-verifies nor re-routes a data
file in Python: its cost is the lookups themselves, which the destinations answer at their `mg` rate.

A lookup that misses is reported unless its T has passed by the time of the check (the item expired:
explained), or the source no longer holds the item the dump read (explained_at_source: deleted,
expired, evicted, rewritten or touched shorter since — the application's doing, or the re-check
deleting a copy that had gone stale; a data file of format 3 gives each lookup its source stamp, an
older one only the key's presence). Keys only the binary protocol can name (187..250 bytes) are kept
as a list and looked up with it (MetaConnection.missing).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import socket
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cachewarm.datapath import _speedups  # required (setup.py)
from cachewarm.datapath.meta import MetaConnection
from cachewarm.datapath.nodes import Node

_T = struct.Struct("<q")
# A lookup's source stamp (populate/plan.py PROBE_STAMP): source_cas, source_exp, value length (-1:
# no stamp, the key's presence at the source is all that tells); the core's cw_read, read with
# _speedups.read_stamp (CW_READ_STAMP bytes).
READ_STAMP = 24
NO_STAMP = struct.pack("<Qqq", 0, -1, -1)
_HIT, _MISS, _END = b"HD\r\n", b"EN\r\n", b"MN\r\n"
# How long a destination may stay silent while the check waits for its replies (seconds).
SILENCE_TIMEOUT = 60.0


class PresenceError(RuntimeError):
    """A destination answered a lookup with anything but HD / EN, or the connection failed."""


@dataclass(frozen=True)
class NodeProbes:
    """One destination's lookups for one data file (or key list)."""

    address: str
    probes: bytes  # `mg <key>\r\n` / `mg <base64> b\r\n` lines
    expiry: bytes  # each lookup's T, packed int64 (0 = never)
    binary: list[bytes]  # keys for the binary protocol
    # Each lookup's source stamp (READ_STAMP bytes each), or empty: none known.
    stamps: bytes = b""

    def stamp(self, i: int) -> bytes:
        at = i * READ_STAMP
        return self.stamps[at : at + READ_STAMP] if len(self.stamps) >= at + READ_STAMP else NO_STAMP

    @property
    def count(self) -> int:
        return len(self.expiry) // _T.size + len(self.binary)


def probe_key(line: bytes) -> bytes:
    """The key a lookup line names (`mg <key>` or `mg <base64> b`)."""
    parts = line.rstrip(b"\r\n").split(b" ")
    return base64.b64decode(parts[1]) if parts[2:3] == [b"b"] else parts[1]


def absent(host: str, port: int, probes: bytes, timeout: float = SILENCE_TIMEOUT) -> list[int]:
    """Indices (0-based, in order) of the lookups in `probes` the server answered EN. One write of
    all of them and a final `mn` on a second thread while this one reads: neither side waits on
    the other, so there is no batch round trip. Raises PresenceError on any other reply."""
    n = probes.count(b"\n")
    if n == 0:
        return []
    failure: list[BaseException] = []
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def send() -> None:
            try:
                sock.sendall(probes)
                sock.sendall(b"mn\r\n")
            except OSError as e:
                failure.append(e)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        chunks: list[bytes] = []
        got = 0
        want = 4 * (n + 1)  # every reply is 4 bytes when all is well
        tail = b""
        try:
            while True:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    raise PresenceError(f"{host}:{port} closed the connection during the target check")
                chunks.append(chunk)
                got += len(chunk)
                tail = (tail + chunk[-4:])[-4:]
                if got >= want and tail == _END:
                    break
        except OSError as e:
            raise PresenceError(f"{host}:{port}: the target check's lookups failed: {e}") from e
        finally:
            sender.join(timeout)
    if failure:
        raise PresenceError(f"{host}:{port}: sending the target check's lookups failed: {failure[0]}")
    replies = b"".join(chunks)
    hits, misses = replies.count(_HIT), replies.count(_MISS)
    # Disjoint 4-byte matches covering every byte: the replies are exactly n HD/EN lines and an MN.
    if len(replies) == want and hits + misses == n and replies.endswith(_END):
        if misses == 0:
            return []
        return [i for i, line in enumerate(replies.split(b"\r\n")[:n]) if line == b"EN"]
    lines = replies.split(b"\r\n")
    bad = next((x for x in lines if x not in (b"HD", b"EN", b"MN", b"")), b"a truncated reply")
    raise PresenceError(f"{host}:{port} answered {bad[:200]!r} to the target check's mg")


def missing(
    node: Node, probes: NodeProbes, now: int, sample_rate: float = 0.0
) -> tuple[int, list[bytes], list[bytes]]:
    """(keys checked, keys missing, a sample of the keys present) of one destination's lookups; a
    miss whose T is not after `now` expired (explained): neither checked nor missing. The sample:
    each present text key with probability `sample_rate` (for the value/flags/TTL compare)."""
    checked, gone, _, sample = missing_stamped(node, probes, now, sample_rate)
    return checked, gone, sample


def missing_stamped(
    node: Node, probes: NodeProbes, now: int, sample_rate: float = 0.0
) -> tuple[int, list[bytes], list[bytes], list[bytes]]:
    """`missing`, and each missing key's source stamp (NO_STAMP for the binary-protocol keys)."""
    checked = probes.count
    gone: list[bytes] = []
    stamps: list[bytes] = []
    idx = absent(node.connect_host, node.port, probes.probes)
    lines: list[bytes] | None = None
    if idx:
        lines = probes.probes.split(b"\n")
        for i in idx:
            (t,) = _T.unpack_from(probes.expiry, i * _T.size)
            if t != 0 and t <= now:
                checked -= 1
            else:
                gone.append(probe_key(lines[i]))
                stamps.append(probes.stamp(i))
    sample: list[bytes] = []
    n = len(probes.expiry) // _T.size
    if sample_rate > 0 and n:
        lines = lines or probes.probes.split(b"\n")
        k = min(n, int(n * sample_rate + random.random()))  # rounded at random: the right total on average
        absent_at = set(idx)
        sample = [probe_key(lines[i]) for i in random.sample(range(n), k) if i not in absent_at]
    if probes.binary:
        with MetaConnection(node.connect_host, node.port) as rd:
            long = rd.missing(probes.binary)
        gone += long
        stamps += [NO_STAMP] * len(long)
    return checked, gone, stamps, sample


def explained_at_source(source: Node, keys: list[bytes], stamps: list[bytes] | None = None) -> set[bytes]:
    """Of keys a destination misses, those the source no longer holds as the dump read them (a miss
    the application made — a delete, an expiry, an eviction, a rewrite or a touch shorter since — or
    the re-check, deleting a copy that had gone stale): dumper-cpp/core's cw_source_verdict on each
    key's stamp; a key without one (an older format, the stream's key lists) only by its presence."""
    if not keys:
        return set()
    stamps = stamps or [NO_STAMP] * len(keys)
    out: set[bytes] = set()
    with socket.create_connection((source.connect_host, source.port), timeout=SILENCE_TIMEOUT) as s:
        verdicts = _speedups.source_look(
            s.fileno(),
            b"".join(bytes([len(k)]) + k for k in keys),
            b"".join(stamps),
            1000,
            SILENCE_TIMEOUT,
        )
    rest = [j for j, v in enumerate(verdicts) if v == 3]  # no meta command names it: by presence
    out = {keys[j] for j, v in enumerate(verdicts) if v not in (0, 3)}
    if rest:
        with MetaConnection(source.connect_host, source.port) as src:
            out |= set(src.missing([keys[j] for j in rest]))
    return out


# ---- kept by the populate, per data file -------------------------------------------------------


def _paths(probe_dir: Path, name: str) -> tuple[Path, Path, Path, Path]:
    return (
        probe_dir / f"{name}.probes",
        probe_dir / f"{name}.expiry",
        probe_dir / f"{name}.stamps",
        probe_dir / f"{name}.json",
    )


def save_probes(
    probe_dir: Path, name: str, per_node: dict[str, tuple[bytes, bytes, list[bytes], bytes]]
) -> None:
    """Keep one applied file's lookups (per destination address: lookups, Ts, binary keys, source
    stamps); those kept before for other destinations stay (a resend to one restarted node writes only
    its own). The index (`<name>.json`) is written last, by rename: a check that finds it finds the
    rest whole."""
    probes, expiry, stamps_path, index = _paths(probe_dir, name)
    probe_dir.mkdir(parents=True, exist_ok=True)
    earlier = load_probes(probe_dir, name) or {}
    per_node = {
        **{a: (p.probes, p.expiry, p.binary, p.stamps) for a, p in earlier.items() if a not in per_node},
        **per_node,
    }
    spans = []
    p_at = e_at = s_at = 0
    with open(probes, "wb") as pf, open(expiry, "wb") as ef, open(stamps_path, "wb") as sf:
        for address, (lines, ts, binary, stamps) in per_node.items():
            pf.write(lines)
            ef.write(ts)
            sf.write(stamps)
            spans.append(
                {
                    "address": address,
                    "probes": [p_at, len(lines)],
                    "expiry": [e_at, len(ts)],
                    "stamps": [s_at, len(stamps)],
                    "binary": [base64.b64encode(k).decode() for k in binary],
                }
            )
            p_at += len(lines)
            e_at += len(ts)
            s_at += len(stamps)
    tmp = index.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"nodes": spans}))
    os.replace(tmp, index)


def load_probes(probe_dir: Path, name: str) -> dict[str, NodeProbes] | None:
    """One file's kept lookups by destination address, or None when the populate kept none."""
    probes, expiry, stamps, index = _paths(probe_dir, name)
    try:
        spans = json.loads(index.read_text())["nodes"]
        p, e, st = probes.read_bytes(), expiry.read_bytes(), stamps.read_bytes()
    except (OSError, ValueError, KeyError):
        return None
    out = {}
    for s in spans:
        (pa, pn), (ea, en), (sa, sn) = s["probes"], s["expiry"], s.get("stamps", [0, 0])
        out[s["address"]] = NodeProbes(
            s["address"],
            p[pa : pa + pn],
            e[ea : ea + en],
            [base64.b64decode(k) for k in s["binary"]],
            st[sa : sa + sn],
        )
    return out


def check_kept(
    probe_dir: Path, name: str, targets: list[Node], sample_rate: float = 0.0, source: Node | None = None
) -> tuple[int, list[bytes], list[bytes]] | None:
    """(keys checked, keys missing, a sample of the keys present) of one data file from its kept
    lookups, or None when there are none for every target (an older populate, a version 1 file):
    the caller walks the file then. With `source`, a key missing at its destination that the source
    no longer holds as read is explained (explained_at_source), not missing."""
    kept = load_probes(probe_dir, name)
    if kept is None or any(t.address not in kept for t in targets):
        return None
    now = int(time.time()) + 1
    checked, gone, stamps, sample = 0, [], [], []
    for t in targets:
        n, g, st, s = missing_stamped(t, kept[t.address], now, sample_rate)
        checked += n
        gone += g
        stamps += st
        sample += s
    if source is not None and gone:
        explained = explained_at_source(source, gone, stamps)
        checked -= len(explained)
        gone = [k for k in gone if k not in explained]
    return checked, gone, sample


def forget(probe_dir: Path) -> None:
    """Remove the kept lookups (after the check: they are as large as the dump's keys)."""
    with contextlib.suppress(OSError):
        for p in probe_dir.iterdir():
            p.unlink()
        probe_dir.rmdir()
