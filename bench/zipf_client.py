"""The live client of bench/source_harm.py and bench/hot_first.py: an open-loop, steady-rate memcached
client over Zipf-distributed keys, in a process of its own, on connections of its own.

    python3 bench/zipf_client.py HOST:PORT --items N --rate R --seconds S --out FILE [--set-fraction F]
        [--ready]

Keys are the loaded `k<i>` (bench/source_latency.py `load`); key rank r (0 = the hottest) is `k<perm[r]>`
for a fixed random permutation (so hotness is unrelated to the key's name or the order it was
loaded in), drawn with P(r) ~ 1 / (r + 1) ** s. A request is sent when it is due (open loop: a stall
delays every request due during it, and each one's latency counts from its due time); requests go
round-robin over --conns connections. (1 - F) of them are `mg <key> v`, F are `ms <key> <size> T0`
(the same value size as the load). Writes `{"t0_wall", "due": [...], "latency_us": [...], "hit": [...]}`
(hit: 1 = the mg found the key, 2 = an ms, 0 = a miss) as JSON to --out; SIGTERM ends it early (the
requests already sent are still waited for).
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import random
import selectors
import signal
import socket
import threading
import time
from collections import deque

from cachewarm.stdio import survive_closed_outputs


class ZipfKeys:
    """Key indexes in [0, items) by Zipf rank (s = `exponent`), hotness spread by a fixed permutation."""

    def __init__(self, items: int, exponent: float = 1.0, seed: int = 7) -> None:
        self.cdf = list(itertools.accumulate(1.0 / (r + 1) ** exponent for r in range(items)))
        self.perm = list(range(items))
        random.Random(seed).shuffle(self.perm)
        self.rng = random.Random(seed + 1)

    def rank(self) -> int:
        return min(len(self.cdf) - 1, bisect.bisect_left(self.cdf, self.rng.random() * self.cdf[-1]))

    def key(self) -> int:
        return self.perm[self.rank()]

    def hottest(self, n: int) -> list[int]:
        return self.perm[:n]


def run(addr: str, items: int, rate: float, seconds: float, set_fraction: float, value_size: int, conns: int,
        exponent: float, seed: int, ready: bool = False) -> dict[str, object]:  # fmt: skip
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    host, port = addr.rsplit(":", 1)
    keys = ZipfKeys(items, exponent, seed)
    mix = random.Random(seed + 2)
    value = b"w" * value_size
    socks = []
    sel = selectors.DefaultSelector()
    for i in range(conns):
        s = socket.create_connection((host, int(port)))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
        socks.append(s)
    pending: list[deque[tuple[float, bool]]] = [deque() for _ in socks]  # (due, is_set) per connection
    bufs = [b""] * conns
    skip = [0] * conns  # bytes of a value still to skip
    due_l: list[float] = []
    lat_l: list[int] = []
    hit_l: list[int] = []
    interval = 1.0 / rate
    if ready:  # the key table is built (seconds for a million keys): the caller may start its dump
        print("ready", flush=True)
    t0 = time.perf_counter()
    due, end, n = t0, t0 + seconds, 0

    def answered(i: int, hit: int, now: float) -> None:
        d, _ = pending[i].popleft()
        due_l.append(round(d - t0, 6))
        lat_l.append(int((now - d) * 1e6))
        hit_l.append(hit)

    while True:
        now = time.perf_counter()
        if stop.is_set():
            end = min(end, now)
        out: list[list[bytes]] = [[] for _ in socks]
        while due <= now and due < end:
            i = n % conns
            n += 1
            k = keys.key()
            is_set = mix.random() < set_fraction
            if is_set:
                out[i].append(b"ms k%d %d T0\r\n%s\r\n" % (k, value_size, value))
            else:
                out[i].append(b"mg k%d v\r\n" % k)
            pending[i].append((due, is_set))
            due += interval
        for i, chunks in enumerate(out):
            if chunks:
                socks[i].sendall(b"".join(chunks))  # small; the socket buffer takes it
        if due >= end and not any(pending):
            break
        timeout = max(0.0, min(due, end) - time.perf_counter()) if due < end else 0.05
        for sk, _ in sel.select(timeout):
            i = sk.data
            data = socks[i].recv(1 << 20)
            if not data:
                raise SystemExit("memcached closed the live client's connection")
            recv_t = time.perf_counter()
            buf = bufs[i] + data
            while True:
                if skip[i]:
                    if len(buf) < skip[i]:
                        break
                    buf, skip[i] = buf[skip[i] :], 0
                    answered(i, 1, recv_t)
                    continue
                nl = buf.find(b"\r\n")
                if nl < 0:
                    break
                line, buf = buf[:nl], buf[nl + 2 :]
                if line.startswith(b"VA "):
                    skip[i] = int(line.split()[1]) + 2
                elif line == b"EN":
                    answered(i, 0, recv_t)
                elif line == b"HD":
                    answered(i, 2, recv_t)
                else:
                    raise SystemExit(f"unexpected reply {line[:80]!r}")
            bufs[i] = buf
    wall0 = time.time() - (time.perf_counter() - t0)
    return {"t0_wall": wall0, "due": due_l, "latency_us": lat_l, "hit": hit_l}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("addr")
    ap.add_argument("--items", type=int, required=True)
    ap.add_argument("--rate", type=float, required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--set-fraction", type=float, default=0.1)
    ap.add_argument("--value-size", type=int, default=1000)
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--zipf", type=float, default=1.0, help="the Zipf exponent s")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--ready", action="store_true", help='print "ready" on stdout once sending begins')
    a = ap.parse_args()
    mix = (a.set_fraction, a.value_size, a.conns, a.zipf, a.seed)
    res = run(a.addr, a.items, a.rate, a.seconds, *mix, ready=a.ready)
    with open(a.out, "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    survive_closed_outputs()  # `... | head`: the run still finishes and stops what it started
    main()
