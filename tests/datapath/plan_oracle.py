"""The Python twin of the populator's v2 walk (_v2plan.c, populate/plan.py's `plan`), kept only as a
test oracle: set mode and text `add` planned alike — the same pieces, counts and offsets, the same
message for a bad record. The binary ADD has one implementation, the C walk's (dumper-cpp/core)."""

from __future__ import annotations

import base64

from cachewarm.datapath import format_v2 as v2
from cachewarm.datapath.placement import Placer
from cachewarm.datapath.populate.plan import (
    _OFFSET,
    _PAIR,
    PIECE_LINE,
    PIECE_MN,
    PIECE_S,
    PROBE_STAMP,
    NodePlan,
    Plan,
    plan,
)
from cachewarm.datapath.wire import is_plain_key


def plan_with(
    use_c: bool, data: bytes | memoryview, start: int, end: int, *args: object, **kw: object
) -> Plan:
    """`plan` (C) or its twin here with the same arguments (the mode as set mode or text add)."""
    if use_c:
        return plan(data, start, end, *args, **kw)  # type: ignore[arg-type]
    now, budgets, mode, *rest = args
    return plan_py(data, start, end, now, budgets, bool(mode), *rest, **kw)  # type: ignore[arg-type]


class _Pieces:
    def __init__(self) -> None:
        self.out = bytearray()
        self.last: list[int] | None = None  # the last piece if it is a file range
        self.batch_items = 0
        self.batch_bytes = 0
        self.lines = bytearray()
        self.order = bytearray()

    def line(self, text: bytes, record: int | None) -> None:
        """A generated line; an `add`'s names its record (offset) in `order` (replies come in order)."""
        self.literal(PIECE_LINE - len(self.lines), len(text))
        self.lines += text
        if record is not None:
            self.order += _OFFSET.pack(record)

    def range(self, off: int, n: int) -> None:
        if n <= 0:
            return
        if self.last is not None and self.last[0] + self.last[1] == off:
            self.last[1] += n
            return
        self._flush_last()
        self.last = [off, n]

    def literal(self, kind: int, n: int) -> None:
        self._flush_last()
        self.out += _PAIR.pack(kind, n)

    def _flush_last(self) -> None:
        if self.last is not None:
            self.out += _PAIR.pack(*self.last)
            self.last = None

    def end_batch(self) -> None:
        if self.batch_items:
            self.literal(PIECE_MN, self.batch_items)
            self.batch_items = self.batch_bytes = 0

    def finish(self) -> bytes:
        self.end_batch()
        self._flush_last()
        return bytes(self.out)


def plan_py(
    data: bytes | memoryview,
    start: int,
    end: int,
    now: int,
    budgets: tuple[int, ...],
    set_mode: bool,
    batch_items: int,
    batch_bytes: int,
    ring: Placer | None = None,
    only: frozenset[int] | None = None,
    offsets: tuple[int, ...] | None = None,
    probes: bool = False,
    stamped: bool = False,
) -> Plan:
    """`plan` in Python for set mode (`set_mode`) and text `add` (see the module doc)."""
    nodes = [NodePlan() for _ in budgets]
    pieces = [_Pieces() for _ in budgets]
    lookups = [bytearray() for _ in budgets]
    lookup_expiry = [bytearray() for _ in budgets]
    lookup_stamps = [bytearray() for _ in budgets]
    records = 0
    for s in v2.spans(data, start, end, stamped):
        records += 1
        idx = ring.index_for(s.key) if ring is not None else 0
        if only is not None and idx not in only:
            continue
        n, p = nodes[idx], pieces[idx]
        expiry = v2.expiry_to_send(s.exptime)
        t = v2.dest_expiry(expiry, offsets[idx] if offsets is not None else 0)
        if (expiry != 0 and expiry <= now) or t < 0:
            n.expired += 1
            continue
        if len(s.key) + (s.value_end - s.value_start) + (4 if s.flags else 0) > budgets[idx]:
            n.oversize.append(s.offset)
            continue
        if s.binary or (not set_mode and not is_plain_key(s.key)):
            n.binary.append(s.offset)
            continue
        wire = s.end - s.offset
        if set_mode and (t != expiry or stamped):  # another T (or a stamp first): the line generated
            tok, b = (s.key, b"") if is_plain_key(s.key) else (base64.b64encode(s.key), b" b")
            vlen = s.value_end - s.value_start
            line = b"ms %b %d%b T%d F%d MS q O%d\r\n" % (tok, vlen, b, t, s.flags, s.offset)
            p.line(line, None)
            p.range(s.value_start, s.end - s.value_start)
            wire = len(line) + s.end - s.value_start
        elif set_mode:
            p.range(s.offset, s.mode_at - s.offset)
            p.literal(PIECE_S, 1)
            p.range(s.mode_at + 1, s.end - s.mode_at - 1)
        else:
            line = b"add %b %d %d %d\r\n" % (s.key, s.flags, t, s.value_end - s.value_start)
            p.line(line, s.offset)
            p.range(s.value_start, s.end - s.value_start)
            wire = len(line) + s.end - s.value_start
        if probes:
            plain = is_plain_key(s.key)
            lookups[idx] += b"mg %b\r\n" % s.key if plain else b"mg %b b\r\n" % base64.b64encode(s.key)
            lookup_expiry[idx] += _OFFSET.pack(expiry)
            lookup_stamps[idx] += PROBE_STAMP.pack(
                s.source_cas, s.source_exp, s.value_end - s.value_start if stamped else -1
            )
        n.items += 1
        p.batch_items += 1
        p.batch_bytes += wire
        if p.batch_items >= batch_items or p.batch_bytes >= batch_bytes:
            p.end_batch()
    for n, p, q, qx, qs in zip(nodes, pieces, lookups, lookup_expiry, lookup_stamps, strict=True):
        n.pieces = p.finish()
        n.lines, n.order = bytes(p.lines), bytes(p.order)
        n.probes, n.probe_expiry, n.probe_stamps = bytes(q), bytes(qx), bytes(qs)
    return Plan(records, nodes)
