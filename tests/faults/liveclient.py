"""A replicated cache client as a separate process (python tests/faults/liveclient.py PLAN LOG): it
sends every write to BOTH replicas, the source and the destination of a warm, as EVCache and
mcrouter's AllSync routes do — deletes, touches, increments and sets, on a timetable — and logs what
each server answered and when.

PLAN (JSON): {"servers": {"src": "host:port", "dst": "host:port"}, "events": [...]}, each event
{"at": seconds after the start, "key": str, "op": "delete" | "touch" | "incr" | "set",
"arg": TTL (touch) | str value (set) | null, "first": "src" | "dst", "gap": seconds}: the op reaches
`first` at `at` and the other replica `gap` seconds later. LOG: one JSON line per server reply
{"event": index, "role": "src" | "dst", "sent": unix time, "reply": first line}.

Standard library only, one thread: the warm's timing is not shared with a test's interpreter. It
prints `ready` once connected to both, sends the events whose `at` is negative (before the dump), then
waits for a line `go` on stdin (the dumper has started) and starts its clock; it waits for each reply
before the next request (a reply line orders the op on that server)."""

from __future__ import annotations

import heapq
import json
import socket
import sys
import time

SET_FLAGS = 7


def command(op: str, key: str, arg: object) -> bytes:
    k = key.encode()
    if op == "delete":
        return b"delete %s\r\n" % k
    if op == "touch":
        return b"touch %s %d\r\n" % (k, int(arg))  # type: ignore[call-overload]
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


def main(plan_path: str, log_path: str) -> int:
    with open(plan_path) as f:
        plan = json.load(f)
    conns = {role: Conn(addr) for role, addr in plan["servers"].items()}
    # (due, seq, event index, role): each event's two halves, the second `gap` after the first.
    due: list[tuple[float, int, int, str]] = []
    for i, ev in enumerate(plan["events"]):
        other = "dst" if ev["first"] == "src" else "src"
        heapq.heappush(due, (ev["at"], 2 * i, i, ev["first"]))
        heapq.heappush(due, (ev["at"] + ev["gap"], 2 * i + 1, i, other))
    print("ready", flush=True)
    log = []
    # Events before the dump (at < 0, a second before `go` at the latest) count from now.
    start, lead = None, time.monotonic() + 1.0
    while due:
        at, _, i, role = heapq.heappop(due)
        if at >= 0 and start is None:
            if sys.stdin.readline().strip() != "go":
                raise SystemExit("liveclient: stdin closed before `go`")
            start = time.monotonic()
        wait = (lead if start is None else start) + at - time.monotonic()
        if wait > 0:
            time.sleep(wait)
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
