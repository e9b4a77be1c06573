"""What to send where, for a verified data format v2 or v3 file (docs/data-format.md sections 7.3 and
8.3): one walk over its records that is also check 4, deciding per record — its destination (ketama),
expired (not sent), too large for that destination (not sent), or what goes on the wire: in add mode
a binary-protocol ADD (its head and key generated, then the record's value bytes: a failed ADD never
unlinks the key's live value, and its answer carries the new item's CAS for the re-check), in set
mode a range of the file's bytes with `ME` sent as `MS`; batched (`mn`, or a binary NOOP).

`plan` runs the C walk (_v2plan.c). `plan_py`, its twin here, plans set mode and text `add` (add mode
on a destination without the binary protocol, accepted only) alike — the same pieces, counts and
offsets, the same message for a bad record (tests/datapath/test_plan_v2.py); the binary ADD has one
implementation, the C walk's (dumper-cpp/core).
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass, field

from cachewarm.datapath import format_v2 as v2
from cachewarm.datapath.placement import Placer
from cachewarm.datapath.wire import is_plain_key

try:
    from cachewarm.datapath import _speedups
except ImportError:  # pragma: no cover - exercised where no C compiler was available
    _speedups = None  # type: ignore[assignment]

# Pieces other than file ranges (int64 pairs): the end of a batch of n items (the sender writes
# `mn`), the byte `S` (set mode, in place of a record's `E`), and (PIECE_LINE - k, n): n bytes of the
# plan's `lines` from offset k (add mode: a text `add` line).
PIECE_MN = -1
PIECE_S = -2
PIECE_LINE = -3
# What add or set mode sends (_v2plan.c; False / True still mean text add / set).
PLAN_ADD_TEXT = 0
PLAN_SET = 1
PLAN_ADD_BINARY = 2
# probe_stamps: per lookup, the record's source stamp and value length (-1: no stamp in the file).
PROBE_STAMP = struct.Struct("<Qqq")
_PAIR = struct.Struct("<qq")
_OFFSET = struct.Struct("<q")


@dataclass
class NodePlan:
    """One destination's share of a file."""

    pieces: bytes = b""  # packed little-endian int64 pairs (_PAIR), in send order
    items: int = 0
    expired: int = 0
    oversize: list[int] = field(default_factory=list)  # record offsets, never sent
    binary: list[int] = field(default_factory=list)  # record offsets, for the binary protocol
    # Add mode: the text `add` lines the pieces refer to, and the record offset of each item in send
    # order (packed int64): `add` answers every item in order, so a reply's record is found by counting.
    lines: bytes = b""
    order: bytes = b""
    # Asked for (`probes=True`): the target check's lookups of the items sent as text, `mg <key>\r\n`
    # (`mg <base64> b\r\n`) in send order, and each one's T (packed int64, 0 = never): the check sends
    # them as they are, without walking or routing the file again (datapath/presence.py).
    probes: bytes = b""
    probe_expiry: bytes = b""
    probe_stamps: bytes = b""

    def order_offsets(self) -> list[int]:
        return [o for (o,) in _OFFSET.iter_unpack(self.order)]


@dataclass
class Plan:
    records: int
    nodes: list[NodePlan]


def pieces_of(pieces: bytes) -> list[tuple[int, int]]:
    return [_PAIR.unpack_from(pieces, i) for i in range(0, len(pieces), _PAIR.size)]


def plan(
    data: bytes | memoryview,
    start: int,
    end: int,
    now: int,
    budgets: tuple[int, ...],
    mode: int,
    batch_items: int,
    batch_bytes: int,
    ring: Placer | None = None,
    only: frozenset[int] | None = None,
    use_c: bool = True,
    offsets: tuple[int, ...] | None = None,
    probes: bool = False,
    stamped: bool = False,
) -> Plan:
    """The plan of `data[start:end]` (a verified v2 file's records; `stamped`: v3's). `mode`: PLAN_*
    (a bool: set mode or text add). `offsets`: per destination, its clock's offset from this host's in
    whole seconds (rounded down), None = all 0; each T goes out moved onto its destination's clock
    (format_v2.dest_expiry). Raises format_v2.RecordError at the first record the format forbids;
    nothing is planned then."""
    if mode == PLAN_ADD_BINARY and _speedups is None:
        raise RuntimeError("add mode needs the populator's C extension (binary-protocol ADD): build it")
    if (use_c or mode == PLAN_ADD_BINARY) and _speedups is not None:
        flags = bytes(1 if only is None or i in only else 0 for i in range(len(budgets)))
        try:
            records, per_node = _speedups.plan_v2(
                data,
                start,
                end,
                now,
                tuple(budgets),
                int(mode),
                batch_items,
                batch_bytes,
                ring.c_placement if ring is not None else None,
                flags,
                offsets,
                probes,
                stamped,
            )
        except ValueError as e:
            raise v2.RecordError(str(e)) from e
        return Plan(records, [NodePlan(*t) for t in per_node])
    return plan_py(
        data,
        start,
        end,
        now,
        budgets,
        bool(mode),
        batch_items,
        batch_bytes,
        ring,
        only,
        offsets,
        probes,
        stamped,
    )


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
