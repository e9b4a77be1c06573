"""Live operations during a warm: what a replicated client does to both replicas (the plan the
separate client process, liveclient.py, carries out) and how the destination is judged afterwards.

The client sends every write to the source AND the destination (EVCache, mcrouter AllSync), in either
order, the second mostly at once, else up to MAX_GAP after the first, on keys the source holds before
the warm: deletes,
touches to a shorter TTL and to a longer one, `incr` on counters, `set` of fresh values (some keys
deleted and then set again). Each key gets one kind of op; its ops are spaced further apart than the
largest gap, so both replicas see them in the same order.

The judge (after the warm, the client's last op and a settle delay), per key, by the key's last op:
- delete: the destination does not hold it (else `deleted_alive`: a resurrection);
- set: the destination holds the client's latest value (else `fresher_lost`);
- incr: the destination's counter equals the source's, or is absent (else `counters_behind` /
  `counters_ahead`: an increment undone, or applied twice);
- every key the destination holds ends no later than the source's (else `outliving`), both ends on
  this host's clock with ClockWatch's slack; a key the source no longer holds may be held only if it
  ends within that slack from now (its source's end is in the past);
- a key no client op touched is on the destination with its value and flags (else `lost` / `corrupt`).
"""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cachewarm.datapath.meta import Item as MetaItem
from cachewarm.testing.memcached import MemcachedServer
from cachewarm.testing.populating import READ_SLACK, ClockWatch, clock_slack, expiries, fetch

from tests.dumper.dumputil import Item

CLIENT = Path(__file__).with_name("liveclient.py")
# The most one replica hears of an op after the other (the settle delay of the mechanism must exceed it).
MAX_GAP = 0.1
# How much later a key the client touched may end on the destination than on the source: the client
# touched each replica itself (a relative TTL counted from each server's whole-second clock: up to 1 s
# apart, plus the gap between the two touches). A copy that kept the TTL from before the touch is off
# by minutes to hours.
TOUCH_SKEW = 1.0 + MAX_GAP
# The share of ops sent before the dumper starts (within a second of the client's start), and after
# the populate ends (within a second of its end); the others are spread from the one to the other.
LEAD = 0.03
TAIL = 0.05
# A key's consecutive ops are further apart than this (both replicas see them in the same order).
SPACING = 2 * MAX_GAP + 0.05


@dataclass(frozen=True)
class Mix:
    """Keys per kind of op, and ops per key for the kinds with several."""

    delete: int = 200
    touch_short: int = 150
    touch_long: int = 60
    counter: int = 80
    set: int = 70
    delete_then_set: int = 50
    incrs: int = 3
    sets: int = 2

    @property
    def ops(self) -> int:
        return (
            self.delete
            + self.touch_short
            + self.touch_long
            + self.counter * self.incrs
            + self.set * self.sets
            + 2 * self.delete_then_set
        )


@dataclass(frozen=True)
class Event:
    at: float
    key: str
    op: str  # delete | touch | incr | set
    arg: int | str | None
    first: str  # src | dst
    gap: float


@dataclass
class Plan:
    items: list[Item]
    kinds: dict[bytes, str]  # key -> delete | touch_short | touch_long | counter | set | delete_then_set
    events: list[Event]
    tail_from: float  # events at or after this go out after the populate's end (Client.end)

    def last_op(self) -> dict[bytes, Event]:
        out: dict[bytes, Event] = {}
        for ev in sorted(self.events, key=lambda e: e.at):
            out[ev.key.encode()] = ev
        return out


def make_plan(rng: random.Random, items: int, duration: float, mix: Mix = Mix()) -> Plan:
    """`items` source items (`lo:<i>`, 100..300-byte values, no TTL or 1 h), a random `mix` of them
    given to the client, its ops spread uniformly over `duration` seconds from the dumper's start
    (Client.go; those still due when the populate ends go out then: Client.end), LEAD of them before
    it and TAIL after the populate."""
    keys = [b"lo:%d" % i for i in range(items)]
    chosen = rng.sample(keys, mix.delete + mix.touch_short + mix.touch_long + mix.counter + mix.set)
    chosen += rng.sample([k for k in keys if k not in set(chosen)], mix.delete_then_set)
    kinds: dict[bytes, str] = {}
    at = 0
    for kind, n in (
        ("delete", mix.delete),
        ("touch_short", mix.touch_short),
        ("touch_long", mix.touch_long),
        ("counter", mix.counter),
        ("set", mix.set),
        ("delete_then_set", mix.delete_then_set),
    ):
        kinds.update((k, kind) for k in chosen[at : at + n])
        at += n
    loaded = []
    for i, k in enumerate(keys):
        kind = kinds.get(k)
        ttl = rng.choice([0, 3600])
        value = rng.randbytes(rng.randint(100, 300))
        if kind == "counter":
            value = b"1000"
        elif kind == "touch_long":
            ttl = 600  # touched to 2 h: a copy from before the touch ends sooner (legal)
        loaded.append(Item(k, value, i & 0xFFFF, ttl))
    events: list[Event] = []

    def at() -> float:
        r = rng.random()
        return (
            rng.uniform(-1.0, 0.0)
            if r < LEAD
            else duration + rng.random()
            if r > 1 - TAIL
            else rng.uniform(0, duration)
        )

    def times(n: int) -> list[float]:
        while True:
            ts = sorted(at() for _ in range(n))
            if all(b - a > SPACING for a, b in itertools.pairwise(ts)):
                return ts

    def event(at: float, key: bytes, op: str, arg: int | str | None) -> Event:
        r = rng.random()
        gap = 0.0 if r < 0.6 else rng.uniform(0, 0.02) if r < 0.9 else rng.uniform(0.02, MAX_GAP)
        return Event(at, key.decode(), op, arg, rng.choice(["src", "dst"]), gap)

    for k, kind in kinds.items():
        if kind == "delete":
            events.append(event(times(1)[0], k, "delete", None))
        elif kind == "touch_short":  # from no TTL or 1 h to a few seconds: some end before the judge
            events.append(event(times(1)[0], k, "touch", rng.randint(3, 12)))
        elif kind == "touch_long":
            events.append(event(times(1)[0], k, "touch", 7200))
        elif kind == "counter":
            events += [event(t, k, "incr", None) for t in times(mix.incrs)]
        elif kind == "set":
            events += [event(t, k, "set", f"fresh:{k.decode()}:{j}") for j, t in enumerate(times(mix.sets))]
        else:
            t1, t2 = times(2)
            events += [event(t1, k, "delete", None), event(t2, k, "set", f"again:{k.decode()}")]
    events.sort(key=lambda e: e.at)
    return Plan(loaded, kinds, events, duration)


@dataclass
class Client:
    """The live client process running a plan (liveclient.py); `finish` waits for its last op and
    reads its log."""

    proc: subprocess.Popen[str]
    log_path: Path
    started: float
    said: set[str] = field(default_factory=set)

    @classmethod
    def start(cls, plan: Plan, src: MemcachedServer, dst: MemcachedServer, where: Path) -> Client:
        where.mkdir(parents=True, exist_ok=True)
        plan_path, log_path = where / "liveops-plan.json", where / "liveops-log.jsonl"
        plan_path.write_text(
            json.dumps(
                {
                    "servers": {"src": src.address, "dst": dst.address},
                    "tail_from": plan.tail_from,
                    "events": [ev.__dict__ for ev in plan.events],
                }
            )
        )
        proc = subprocess.Popen(
            [sys.executable, str(CLIENT), str(plan_path), str(log_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "ready":
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError(f"the live client did not start: {line!r} {err[-500:]}")
        return cls(proc, log_path, time.time())

    def _say(self, word: str) -> None:
        if word in self.said:
            return
        self.said.add(word)
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(word + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:  # the client failed: finish() says how
            pass

    def go(self) -> None:
        """The dumper started: the ops spread over the warm begin (again: nothing)."""
        self._say("go")

    def end(self) -> None:
        """The populate ended: the ops still due go out now, then the ones planned for after it."""
        self.go()
        self._say("end")

    def finish(self, timeout: float = 120) -> list[dict[str, Any]]:
        self.end()
        try:
            _, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            raise AssertionError("the live client did not finish its ops") from None
        if self.proc.returncode != 0:
            raise AssertionError(f"the live client failed (rc {self.proc.returncode}): {err[-1000:]}")
        return [json.loads(ln) for ln in self.log_path.read_text().splitlines()]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


GOOD = {"delete": "DELETED", "touch": "TOUCHED", "set": "STORED"}


def replies(plan: Plan, log: list[dict[str, Any]]) -> tuple[Counter[str], list[str]]:
    """(ops by kind, and "<op> missed on dst": ops the source applied and the destination did not hold
    the key for — they reached the destination before the warm's write: the race this is about), and
    any reply no op should get."""
    by = {(int(e["event"]), str(e["role"])): str(e["reply"]) for e in log}
    counts: Counter[str] = Counter()
    bad: list[str] = []
    for i, ev in enumerate(plan.events):
        s, d = by.get((i, "src")), by.get((i, "dst"))
        if s is None or d is None:
            bad.append(f"{ev.op} {ev.key}: no reply from {'src' if s is None else 'dst'}")
            continue
        for role, r in (("src", s), ("dst", d)):
            if r not in (GOOD.get(ev.op), "NOT_FOUND") and not (ev.op == "incr" and r.isdigit()):
                bad.append(f"{ev.op} {ev.key} on {role}: {r!r}")
        counts[ev.op] += 1
        if d == "NOT_FOUND" and s != "NOT_FOUND":
            counts[f"{ev.op} missed on dst"] += 1
    return counts, bad


@dataclass
class Verdict:
    deleted_alive: int = 0
    outliving: int = 0
    counters_behind: int = 0
    counters_ahead: int = 0
    fresher_lost: int = 0
    lost: int = 0
    corrupt: int = 0
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.notes) < 12:
            self.notes.append(text)


def judge(plan: Plan, src: MemcachedServer, dst: MemcachedServer, clocks: ClockWatch) -> Verdict:
    """The destination against the source and the client's ops (see the module's docstring)."""
    v = Verdict()
    slack = clocks.slack(src, dst)
    # A key the client touched last got its end from each replica's own clock, so the slack for it
    # widens by both clocks' moves, the source's too (slack leaves that out for copies: the dumper
    # carried their ends with the source's ceiling).
    touched = clock_slack(clocks.moved(src), clocks.moved(dst))
    keys = [it.key for it in plan.items]
    read: dict[int, tuple[dict[bytes, MetaItem], dict[bytes, float]] | BaseException] = {}

    def read_all(srv: MemcachedServer) -> None:
        # `expiries` brackets its reading between two equal `stats time`s: in slices it seldom
        # has to read again.
        try:
            ends: dict[bytes, float] = {}
            for i in range(0, len(keys), 2000):
                ends.update(expiries(srv, keys[i : i + 2000], clocks.ahead(srv)))
            read[srv.port] = (fetch(srv, keys), ends)
        except BaseException as e:
            read[srv.port] = e

    threads = [threading.Thread(target=read_all, args=(srv,)) for srv in (src, dst)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    got = []
    for srv in (src, dst):
        r = read[srv.port]
        if isinstance(r, BaseException):
            raise r
        got.append(r)
    (src_items, src_end), (dst_items, dst_end) = got
    now = time.time()
    last = plan.last_op()
    loaded = {it.key: it for it in plan.items}
    for k in keys:
        ev, s, d = last.get(k), src_items.get(k), dst_items.get(k)
        kind = plan.kinds.get(k)
        if ev is not None and ev.op == "delete":
            if d is not None:
                v.deleted_alive += 1
                v.note(f"{k!r} deleted by the client ({kind}) is alive on the destination ({d.value[:16]!r})")
            continue
        if ev is not None and ev.op == "set":
            if d is None or d.value != str(ev.arg).encode():
                v.fresher_lost += 1
                got = None if d is None else d.value[:24]
                v.note(f"{k!r}: the client's latest value {ev.arg!r} lost on the destination ({got!r})")
            continue
        if d is None:
            if ev is None:
                v.lost += 1
                if v.lost < 4:
                    v.note(f"{k!r} (no client op) missing on the destination")
            continue
        if ev is None and (d.value != loaded[k].value or d.flags != loaded[k].flags):
            v.corrupt += 1
            v.note(f"{k!r} (no client op) differs on the destination")
        if kind == "counter" and s is not None and d.value != s.value:
            behind = int(d.value) < int(s.value)
            v.counters_behind += behind
            v.counters_ahead += not behind
            v.note(f"counter {k!r}: {int(d.value)} on the destination, {int(s.value)} on the source")
        by_touch = ev is not None and ev.op == "touch"
        late = (max(slack.late, touched.late) + TOUCH_SKEW if by_touch else slack.late) + READ_SLACK
        de, se = dst_end.get(k), src_end.get(k)
        if de is None:  # ended between the two readings
            continue
        if se is None:  # the source no longer holds it: its end is in the past
            if de == -1 or de > now + late:
                v.outliving += 1
                ends = "never" if de == -1 else f"{de - now:+.1f} s from now"
                v.note(f"{k!r} ({kind or 'no client op'}) gone at the source, ends {ends} here")
        elif se != -1 and (de == -1 or de > se + late):
            v.outliving += 1
            after = "never" if de == -1 else f"{de - se:+.3f} s"
            why = touched.why if by_touch else slack.why
            v.note(f"{k!r} ({kind or 'no client op'}) ends {after} after the source's {why}")
    return v
