"""What to send where, for a verified data format v2 or v3 file (docs/data-format.md sections 7.3 and
8.3): one walk over its records that is also check 4, deciding per record — its destination (ketama),
expired (not sent), too large for that destination (not sent), or what goes on the wire: in add mode
a binary-protocol ADD (its head and key generated, then the record's value bytes: a failed ADD never
unlinks the key's live value, and its answer carries the new item's CAS for the re-check), in set
mode a range of the file's bytes with `ME` sent as `MS`; batched (`mn`, or a binary NOOP).

`plan` runs the C walk (_v2plan.c; its lines and heads are dumper-cpp/core's). Its Python twin
(tests/datapath/plan_oracle.py) is a test oracle only: set mode and text `add` alike — the same pieces,
counts and offsets, the same message for a bad record (tests/datapath/test_plan_v2.py).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from cachewarm.datapath import _speedups
from cachewarm.datapath import format_v2 as v2
from cachewarm.datapath.placement import Placer

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
    offsets: tuple[int, ...] | None = None,
    probes: bool = False,
    stamped: bool = False,
) -> Plan:
    """The plan of `data[start:end]` (a verified v2 file's records; `stamped`: v3's). `mode`: PLAN_*
    (a bool: set mode or text add). `offsets`: per destination, its clock's offset from this host's in
    whole seconds (rounded down), None = all 0; each T goes out moved onto its destination's clock
    (format_v2.dest_expiry). Raises format_v2.RecordError at the first record the format forbids;
    nothing is planned then."""
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
