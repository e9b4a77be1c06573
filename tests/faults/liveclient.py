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
    # Each event's first half by the timetable (at, event index); its second half `gap` after the
    # first half actually went out (due on the monotonic clock, event index, role): a half that the
    # steering would hold back (an op straddling `tail_from` waits for `end`) must not leave the
    # replicas that far apart — the skew a replicated client has is its own, not the warm's length.
    firsts: list[tuple[float, int]] = [(ev["at"], i) for i, ev in enumerate(plan["events"])]
    heapq.heapify(firsts)
    seconds: list[tuple[float, int, str]] = []
    steer = Steering()
    print("ready", flush=True)
    lead = time.monotonic() + 1.0  # events at -1 <= at < 0 count from here
    log = []

    def when(at: float) -> float | None:
        """When an event's first half is due (monotonic), None while the steering has not said."""
        if at < 0:
            return lead + at
        if at < tail_from:
            if "go" not in steer.seen:
                return None
            return steer.seen["go"] + at if "end" not in steer.seen else 0.0
        return steer.seen["end"] + at - tail_from if "end" in steer.seen else None

    def send(i: int, role: str) -> None:
        ev = plan["events"][i]
        sent = time.time()
        reply = conns[role].ask(command(ev["op"], ev["key"], ev["arg"]))
        log.append({"event": i, "role": role, "sent": sent, "reply": reply})

    while firsts or seconds:
        first_due = when(firsts[0][0]) if firsts else None
        second_due = seconds[0][0] if seconds else None
        due = min((d for d in (first_due, second_due) if d is not None), default=None)
        now = time.monotonic()
        if due is None:
            steer.wait_for("end" if "go" in steer.seen else "go")
            continue
        if due > now:
            steer.sleep(due - now)
            continue
        if second_due is not None and second_due <= now:
            _, i, role = heapq.heappop(seconds)
            send(i, role)
            continue
        _, i = heapq.heappop(firsts)
        ev = plan["events"][i]
        # A key's ops keep their order on both replicas: a pending second half of the same key
        # (a burst when the populate ends) goes out before the key's next op.
        for j, (_, k, r) in enumerate(seconds):
            if plan["events"][k]["key"] == ev["key"]:
                seconds.pop(j)
                heapq.heapify(seconds)
                send(k, r)
                break
        send(i, ev["first"])
        other = "dst" if ev["first"] == "src" else "src"
        heapq.heappush(seconds, (time.monotonic() + ev["gap"], i, other))
    with open(log_path, "w") as f:
        for entry in log:
            f.write(json.dumps(entry) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
