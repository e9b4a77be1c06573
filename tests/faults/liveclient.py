"""A replicated cache client as a separate process (python tests/faults/liveclient.py PLAN LOG): it
sends every write to BOTH replicas, the source and the destination of a warm, as EVCache and
mcrouter's AllSync routes do — deletes, touches, increments and sets, on a timetable — and logs what
each server answered and when.

PLAN (JSON): {"servers": {"src": "host:port", "dst": "host:port"}, "tail_from": seconds,
"events": [...]}, each event {"at": seconds, "key": str, "op": "delete" | "touch" | "incr" | "set",
"arg": TTL (touch) | str value (set) | null, "first": "src" | "dst", "gap": seconds}: the op reaches
`first` at `at` and the other replica `gap` seconds later. LOG: one JSON line per server reply
{"event": index, "role": "src" | "dst", "sent": unix time, "reply": first line}.

The timeline, steered by lines on stdin: events with `at` < 0 go out at once (before the dump); `go`
(the dumper started) starts the clock of the events with 0 <= `at` < `tail_from`; `end` (the populate
ended) sends what is left of those at once and starts the clock of the rest (`at` - `tail_from` after
it). So the ops cover the warm however long it takes, and some come after its populate.

Standard library only, one thread: the warm's timing is not shared with a test's interpreter. It
prints `ready` once connected to both; it waits for each reply before the next request (a reply line
orders the op on that server); both halves of every op keep the plan's order."""

from __future__ import annotations

import heapq
import json
import os
import select
import socket
import sys
import time

SET_FLAGS = 7


def command(op: str, key: str, arg: int | str | None) -> bytes:
    k = key.encode()
    if op == "delete":
        return b"delete %s\r\n" % k
    if op == "touch":
        return b"touch %s %d\r\n" % (k, int(arg or 0))
    if op == "incr":
        return b"incr %s 1\r\n" % k
    if op == "set":
        v = str(arg).encode()
        return b"set %s %d 0 %d\r\n%s\r\n" % (k, SET_FLAGS, len(v), v)
    raise ValueError(f"unknown op {op!r}")


class Conn:
    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def ask(self, req: bytes) -> str:
        self.sock.sendall(req)
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("memcached closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line.decode(errors="replace")


class Steering:
    """The lines `go` and `end` on stdin, read unbuffered (select tells when one waits)."""

    def __init__(self) -> None:
        self.buf = b""
        self.closed = False
        self.seen: dict[str, float] = {}

    def _take(self, timeout: float | None) -> bool:
        """Read what stdin has within `timeout` (None: until a line); whether a line came."""
        while b"\n" not in self.buf:
            if self.closed:  # nothing more will come (the test closes stdin after `end`)
                if timeout is None:
                    raise SystemExit(f"liveclient: stdin closed after {sorted(self.seen)}")
                time.sleep(timeout)
                return False
            ready, _, _ = select.select([sys.stdin.fileno()], [], [], timeout)
            if not ready:
                return False
            chunk = os.read(sys.stdin.fileno(), 64)
            self.closed = not chunk
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        self.seen[line.decode().strip()] = time.monotonic()
        return True

    def wait_for(self, word: str) -> float:
        while word not in self.seen:
            self._take(None)
        return self.seen[word]

    def sleep(self, seconds: float) -> None:
        """Sleep, unless a line comes first."""
        if seconds > 0:
            self._take(seconds)


def main(plan_path: str, log_path: str) -> int:
    with open(plan_path) as f:
        plan = json.load(f)
    tail_from = float(plan["tail_from"])
    conns = {role: Conn(addr) for role, addr in plan["servers"].items()}
    # (at, seq, event index, role): each event's two halves, the second `gap` after the first.
    due: list[tuple[float, int, int, str]] = []
    for i, ev in enumerate(plan["events"]):
        other = "dst" if ev["first"] == "src" else "src"
        heapq.heappush(due, (ev["at"], 2 * i, i, ev["first"]))
        heapq.heappush(due, (ev["at"] + ev["gap"], 2 * i + 1, i, other))
    steer = Steering()
    print("ready", flush=True)
    lead = time.monotonic() + 1.0  # events at -1 <= at < 0 count from here
    log = []
    while due:
        at, _, i, role = heapq.heappop(due)
        while True:
            if at < 0:
                when = lead + at
            elif at < tail_from:
                go = steer.wait_for("go")
                when = go + at if "end" not in steer.seen else 0.0
            else:
                when = steer.wait_for("end") + at - tail_from
            if when <= time.monotonic():
                break
            steer.sleep(when - time.monotonic())
        ev = plan["events"][i]
        sent = time.time()
        reply = conns[role].ask(command(ev["op"], ev["key"], ev["arg"]))
        log.append({"event": i, "role": role, "sent": sent, "reply": reply})
    with open(log_path, "w") as f:
        for entry in log:
            f.write(json.dumps(entry) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
