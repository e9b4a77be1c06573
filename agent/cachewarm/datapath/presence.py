"""`warm`'s target check as a presence check: per destination, a stream of no-value lookups
(`mg <key>\\r\\n`, one `HD` or `EN` each) sent as one pipelined write while the replies are read, and
the replies counted with byte searches, not line by line.

The lookups come from the populate (files: the worker's plan, `_v2plan.c`, writes them for every
item it sent as text, already routed, with each item's T) or from the stream's key lists (one C walk,
`_speedups.probe_keys`, routes them). So the check neither re-reads, re-verifies nor re-routes a data
file in Python: its cost is the lookups themselves, which the destinations answer at their `mg` rate.

A lookup that misses is reported unless its T has passed by the time of the check (the item expired:
explained). Keys only the binary protocol can name (187..250 bytes) are kept as a list and looked up
with it (MetaConnection.missing).
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

from cachewarm.datapath.ketama import Node
from cachewarm.datapath.meta import MetaConnection

_T = struct.Struct("<q")
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
    checked = probes.count
    gone: list[bytes] = []
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
    sample: list[bytes] = []
    n = len(probes.expiry) // _T.size
    if sample_rate > 0 and n:
        lines = lines or probes.probes.split(b"\n")
        k = min(n, int(n * sample_rate + random.random()))  # rounded at random: the right total on average
        absent_at = set(idx)
        sample = [probe_key(lines[i]) for i in random.sample(range(n), k) if i not in absent_at]
    if probes.binary:
        with MetaConnection(node.connect_host, node.port) as rd:
            gone += rd.missing(probes.binary)
    return checked, gone, sample


# ---- kept by the populate, per data file -------------------------------------------------------


def _paths(probe_dir: Path, name: str) -> tuple[Path, Path, Path]:
    return probe_dir / f"{name}.probes", probe_dir / f"{name}.expiry", probe_dir / f"{name}.json"


def save_probes(probe_dir: Path, name: str, per_node: dict[str, tuple[bytes, bytes, list[bytes]]]) -> None:
    """Keep one applied file's lookups (per destination address: lookups, Ts, binary keys); those
    kept before for other destinations stay (a resend to one restarted node writes only its own).
    The index (`<name>.json`) is written last, by rename: a check that finds it finds the rest whole."""
    probes, expiry, index = _paths(probe_dir, name)
    probe_dir.mkdir(parents=True, exist_ok=True)
    earlier = load_probes(probe_dir, name) or {}
    per_node = {
        **{a: (p.probes, p.expiry, p.binary) for a, p in earlier.items() if a not in per_node},
        **per_node,
    }
    spans = []
    p_at = e_at = 0
    with open(probes, "wb") as pf, open(expiry, "wb") as ef:
        for address, (lines, ts, binary) in per_node.items():
            pf.write(lines)
            ef.write(ts)
            spans.append(
                {
                    "address": address,
                    "probes": [p_at, len(lines)],
                    "expiry": [e_at, len(ts)],
                    "binary": [base64.b64encode(k).decode() for k in binary],
                }
            )
            p_at += len(lines)
            e_at += len(ts)
    tmp = index.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"nodes": spans}))
    os.replace(tmp, index)


def load_probes(probe_dir: Path, name: str) -> dict[str, NodeProbes] | None:
    """One file's kept lookups by destination address, or None when the populate kept none."""
    probes, expiry, index = _paths(probe_dir, name)
    try:
        spans = json.loads(index.read_text())["nodes"]
        p, e = probes.read_bytes(), expiry.read_bytes()
    except (OSError, ValueError, KeyError):
        return None
    out = {}
    for s in spans:
        (pa, pn), (ea, en) = s["probes"], s["expiry"]
        out[s["address"]] = NodeProbes(
            s["address"], p[pa : pa + pn], e[ea : ea + en], [base64.b64decode(k) for k in s["binary"]]
        )
    return out


def check_kept(
    probe_dir: Path, name: str, targets: list[Node], sample_rate: float = 0.0
) -> tuple[int, list[bytes], list[bytes]] | None:
    """(keys checked, keys missing, a sample of the keys present) of one data file from its kept
    lookups, or None when there are none for every target (an older populate, a version 1 file):
    the caller walks the file then."""
    kept = load_probes(probe_dir, name)
    if kept is None or any(t.address not in kept for t in targets):
        return None
    now = int(time.time()) + 1
    checked, gone, sample = 0, [], []
    for t in targets:
        n, g, s = missing(t, kept[t.address], now, sample_rate)
        checked += n
        gone += g
        sample += s
    return checked, gone, sample


def forget(probe_dir: Path) -> None:
    """Remove the kept lookups (after the check: they are as large as the dump's keys)."""
    with contextlib.suppress(OSError):
        for p in probe_dir.iterdir():
            p.unlink()
        probe_dir.rmdir()
