"""Data format v2 (docs/data-format.md section 7): the reader's check 4 and the populator's walk — the C
walk (_v2plan.c) against its Python twin (populate/plan.py): the same plan (pieces, counts, offsets)
for random files with every kind of key, expiry, size, destination and mode, and the same message for
every record the format forbids. Without memcached."""

from __future__ import annotations

import base64
import os
import random
import re
import struct

import pytest
from cachewarm.datapath import format as df
from cachewarm.datapath import format_v2 as v2
from cachewarm.datapath import presence
from cachewarm.datapath.encode import UNLIMITED
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.placement import PlacementSpec
from cachewarm.datapath.populate import plan as planmod
from cachewarm.datapath.populate.plan import (
    PIECE_LINE,
    PIECE_MN,
    PIECE_S,
    NodePlan,
    Plan,
    pieces_of,
    plan,
)
from cachewarm.datapath.routing import evcache_ring
from cachewarm.datapath.wire import is_plain_key
from cachewarm.datapath.writer import encode_file

from tests.datapath.plan_oracle import plan_py, plan_with
from tests.ketama_oracle import KetamaRing

NOW = 1_800_000_000

if planmod._speedups is None:
    if os.environ.get("CACHEWARM_REQUIRE_SPEEDUPS"):
        pytest.fail("cachewarm.datapath._speedups is not built (pip install -e . needs a C compiler)")
    pytest.skip("cachewarm.datapath._speedups is not built", allow_module_level=True)


def _records(rng: random.Random, n: int) -> list[df.Record]:
    recs = []
    for i in range(n):
        kind = rng.randrange(6)
        if kind == 0:  # binary: base64 up to 186 bytes, a binary record from 187
            key = bytes(rng.randrange(256) for _ in range(rng.choice([1, 2, 3, 50, 186, 187, 250])))
        elif kind == 1:  # a hash delimiter in it
            key = b"user:%d:x" % rng.randrange(50)
        else:
            key = b"key:%d:" % i + b"x" * rng.randrange(0, 200)
        exptime = rng.choice([-1, NOW - 5, NOW, NOW + 1, NOW + 2, NOW + 3600, 2**31 - 1])
        value = rng.randbytes(rng.choice([0, 1, 100, 1000, 10_000]))
        recs.append(df.Record(key, rng.choice([0, 1, 2**31, 2**32 - 1]), exptime, value))
    return recs


def _file(recs: list[df.Record], version: int = df.VERSION_2) -> tuple[bytes, int, int]:
    data = encode_file("n1", 0, 0, recs, version=version)
    v = df.check_bytes(df.name_for("n1", 0, 0, data), data)
    assert v.ok and v.header is not None and v.trailer is not None, v.reason
    return (data, *df.records_bounds(v.header, v.trailer))


def _both(data: bytes, start: int, end: int, **kw: object) -> Plan:
    args = dict(now=NOW, budgets=(UNLIMITED,), set_mode=False, batch_items=1000, batch_bytes=1 << 22)
    args.update(kw)  # type: ignore[arg-type]
    c_args = {("mode" if k == "set_mode" else k): v for k, v in args.items()}
    c = plan(data, start, end, **c_args)  # type: ignore[arg-type]
    py = plan_py(data, start, end, **args)  # type: ignore[arg-type]
    assert c == py
    return c


def _wire(data: bytes, node: NodePlan) -> bytes:
    lit = {PIECE_MN: b"mn\r\n", PIECE_S: b"S"}

    def piece(o: int, n: int) -> bytes:
        if o >= 0:
            return data[o : o + n]
        if o <= PIECE_LINE:
            return node.lines[PIECE_LINE - o : PIECE_LINE - o + n]
        return lit[o]

    return b"".join(piece(o, n) for o, n in pieces_of(node.pieces))


@pytest.mark.parametrize("set_mode", [False, True])
@pytest.mark.parametrize("batch_items,batch_bytes", [(1000, 1 << 22), (1, 1), (7, 5000)])
@pytest.mark.parametrize("budget", [UNLIMITED, 1000, 1004])
def test_c_and_python_plan_alike(set_mode: bool, batch_items: int, batch_bytes: int, budget: int) -> None:
    recs = _records(random.Random(42), 1500)
    data, start, end = _file(recs)
    p = _both(
        data,
        start,
        end,
        budgets=(budget,),
        set_mode=set_mode,
        batch_items=batch_items,
        batch_bytes=batch_bytes,
    )
    n = p.nodes[0]
    assert p.records == len(recs)
    assert n.expired > 0 and n.binary and bool(n.oversize) is (budget != UNLIMITED)
    assert n.items + n.expired + len(n.oversize) + len(n.binary) == len(recs)
    wire = _wire(data, n)
    # Exactly the meta records to send, in file order: in set mode each as the file has it with `MS`;
    # in add mode (plain keys only: base64 ones go by ADDQ) a text `add` line and the record's value.
    sent = [s for s in v2.spans(data, start, end) if not s.binary and (set_mode or is_plain_key(s.key))]
    sent = [s for s in sent if s.exptime == -1 or s.exptime - 1 > NOW]
    sent = [s for s in sent if len(s.key) + s.value_end - s.value_start + (4 if s.flags else 0) <= budget]
    if set_mode:
        body = b"".join(data[s.offset : s.end] for s in sent).replace(b" ME q O", b" MS q O")
        assert n.lines == n.order == b""
    else:
        body = b"".join(
            b"add %b %d %d %d\r\n"
            % (s.key, s.flags, v2.expiry_to_send(s.exptime), s.value_end - s.value_start)
            + data[s.value_start : s.end]
            for s in sent
        )
        assert n.order_offsets() == [s.offset for s in sent]
    assert wire.replace(b"mn\r\n", b"") == body and n.items == len(sent)
    assert wire.count(b"mn\r\n") >= -(-len(sent) // batch_items)
    # Never a relative T, never one already past: an item expiring within the margin is not sent.
    assert all(
        not re.search(rb" T([1-9][0-9]*) ", data[s.offset : s.value_start]) or s.exptime - 1 > NOW
        for s in sent
    )


PLACEMENTS = ["gomemcache", "libmemcached,distribution=ketama", "pymemcache,keys=bytes"]


@pytest.mark.parametrize("scheme", [None, *PLACEMENTS])
def test_every_destination_gets_its_keys_and_only_nodes_are_kept(scheme: str | None) -> None:
    recs = _records(random.Random(7), 1200)
    data, start, end = _file(recs)
    nodes = [Node(f"10.0.0.{i}", 11211) for i in range(1, 4)]
    for delim in (None, b":") if scheme is None else (None,):
        # EVCache's ring, or another client's placement (the C walk routes with hashkit's Placement)
        ring = (
            evcache_ring(nodes, hash_delimiter=delim)
            if scheme is None
            else PlacementSpec.parse(scheme).placer(nodes)
        )
        expect = KetamaRing(nodes, hash_delimiter=delim) if scheme is None else ring  # the oracle
        p = _both(data, start, end, budgets=(UNLIMITED,) * 3, ring=ring)
        for i, n in enumerate(p.nodes):
            keys = [
                s.key
                for s in v2.spans(data, start, end)
                if not s.binary and is_plain_key(s.key) and (s.exptime == -1 or s.exptime - 1 > NOW)
            ]
            want = [k for k in keys if expect.index_for(k) == i]
            got = [df.record_at(data, at, 2).key for at in n.order_offsets()]
            assert got == want
            assert all(expect.index_for(df.record_at(data, at, 2).key) == i for at in n.binary)
        only = _both(data, start, end, budgets=(UNLIMITED,) * 3, ring=ring, only=frozenset({1}))
        assert only.nodes[1] == p.nodes[1] and only.nodes[0].items == only.nodes[2].items == 0
        assert only.records == p.records


def _meta(
    key: bytes = b"k", vlen: int = 1, t: int = 0, flags: int = 0, off: int = 58, b: bool = False
) -> bytes:
    return b"ms %b %d%b T%d F%d ME q O%d\r\n" % (key, vlen, b" b" if b else b"", t, flags, off)


# (name, a record written for offset 58 (_bad_file moves it to 75), the message naming it)
BAD = [
    ("other command", b"mg k v\r\n", "not a meta set line"),
    ("first byte", b"xs k 1 T0 F0 ME q O58\r\nv\r\n", "neither a meta set nor a binary record"),
    ("set mode in the file", b"ms k 1 T0 F0 MS q O58\r\nv\r\n", "not a meta set line"),
    ("extra flag", b"ms k 1 T0 F0 I ME q O58\r\nv\r\n", "not a meta set line"),
    ("leading zero", b"ms k 01 T0 F0 ME q O58\r\nv\r\n", "not a meta set line"),
    ("space in key", b"ms k k 1 T0 F0 ME q O58\r\nv\r\n", "not a meta set line"),
    ("relative T", _meta(t=3600) + b"v\r\n", "bad T"),
    ("T past int32", _meta(t=2**31) + b"v\r\n", "bad T"),
    ("flags past u32", _meta(flags=2**32) + b"v\r\n", "bad F"),
    ("value_len past u32", _meta(vlen=2**32) + b"v\r\n", "bad value length"),
    ("huge number", b"ms k 99999999999999999999 T0 F0 ME q O58\r\nv\r\n", "bad value length"),
    ("wrong O", _meta(off=59) + b"v\r\n", "O is not the record's offset"),
    ("value runs past", _meta(vlen=1000) + b"v\r\n", "value not followed by \\r\\n within the records"),
    ("no CRLF after value", _meta(vlen=1) + b"vvv", "value not followed by \\r\\n within the records"),
    ("plain key as base64", _meta(key=base64.b64encode(b"plain"), b=True) + b"v\r\n", "bad base64 key"),
    ("bad base64", _meta(key=b"!!!!", b=True) + b"v\r\n", "bad base64 key"),
    ("base64 pad bits", _meta(key=b"AB==", b=True) + b"v\r\n", "bad base64 key"),
    (
        "binary opcode",
        v2.BINARY_HEAD.pack(0x80, 0x11, 200, 8, 0, 0, 209, 0, 0, 0, 0) + b"\x00" * 201,
        "not an ADDQ request",
    ),
    (
        "binary opaque",
        v2.BINARY_HEAD.pack(0x80, 0x12, 200, 8, 0, 0, 209, 7, 0, 0, 0) + b"\x00" * 201,
        "not an ADDQ request",
    ),
    (
        "short binary key",
        v2.BINARY_HEAD.pack(0x80, 0x12, 186, 8, 0, 0, 195, 0, 0, 0, 0) + b"\x00" * 187,
        "bad binary key length",
    ),
    (
        "binary runs past",
        v2.BINARY_HEAD.pack(0x80, 0x12, 200, 8, 0, 0, 999, 0, 0, 0, 0) + b"\x00" * 201,
        "binary record runs past the records",
    ),
    (
        "binary expiry",
        v2.BINARY_HEAD.pack(0x80, 0x12, 200, 8, 0, 0, 209, 0, 0, 0, 60) + b"\x00" * 201,
        "bad expiration",
    ),
    (
        "printable binary key",
        v2.BINARY_HEAD.pack(0x80, 0x12, 200, 8, 0, 0, 209, 0, 0, 0, 0) + b"k" * 201,
        "a printable key in a binary record",
    ),
    ("truncated header", b"\x80\x12\x00", "binary record runs past the records"),
]


def _bad_file(record: bytes) -> tuple[bytes, int, int]:
    """A file (node "n1": a 50-byte header) holding a good record (offsets 50..75), then `record` at
    75, its checksum right: check 4 must find record 1."""
    good = encode_file("n1", 0, 0, [df.Record(b"g", 0, -1, b"")], version=df.VERSION_2)
    head_len = df.HEADER_FIXED + 2
    first = good[head_len : len(good) - df.TRAILER_LEN]
    assert head_len + len(first) == 75
    # Shift `record` (written for offset 58) to offset 75: rewrite its O token.
    record = record.replace(b" O58\r\n", b" O75\r\n").replace(b" O59\r\n", b" O76\r\n")
    data = good[:head_len] + first + record + good[len(good) - df.TRAILER_LEN :]
    return data, head_len, head_len + len(first) + len(record)


@pytest.mark.parametrize(("name", "record", "why"), BAD, ids=[b[0] for b in BAD])
def test_forbidden_records_are_rejected_alike(name: str, record: bytes, why: str) -> None:
    data, start, end = _bad_file(record)
    msgs = []
    for use_c in (True, False):
        with pytest.raises(v2.RecordError) as e:
            plan_with(use_c, data, start, end, NOW, (UNLIMITED,), False, 1000, 1 << 20)
        msgs.append(str(e.value))
    with pytest.raises(v2.RecordError) as e:
        list(v2.spans(data, start, end))
    msgs.append(str(e.value))
    assert msgs == [f"record 1 at offset 75: {why}"] * 3


def test_the_writer_refuses_what_v2_cannot_say() -> None:
    with pytest.raises(df.FormatError, match="no absolute T"):
        encode_file("n1", 0, 0, [df.Record(b"k", 0, 1, b"v")])  # T 0 would read back as "never"
    with pytest.raises(df.FormatError, match="no absolute T"):
        encode_file("n1", 0, 0, [df.Record(b"k", 0, 3600, b"v")])  # memcached: relative
    assert b" T0 " in encode_file("n1", 0, 0, [df.Record(b"k", 0, -1, b"v")])


def test_record_at_and_iter_records_give_version_1_fields() -> None:
    recs = _records(random.Random(3), 200)
    data, start, end = _file(recs)
    got = list(df.iter_records(data))
    assert [(r.key, r.flags, r.exptime, bytes(r.value)) for r in got] == [
        (r.key, r.flags, r.exptime, r.value) for r in recs
    ]
    for s, r in zip(v2.spans(data, start, end), recs, strict=True):
        at = df.record_at(data, s.offset, 2)
        assert (at.key, at.flags, at.exptime, bytes(at.value)) == (r.key, r.flags, r.exptime, r.value)


@pytest.mark.parametrize("set_mode", [False, True])
@pytest.mark.parametrize("offset", [-600, -1, 600, 2**31])
def test_each_t_goes_out_on_its_destinations_clock(set_mode: bool, offset: int) -> None:
    """A destination whose clock is `offset` s ahead gets every T moved by that much (memcached reads
    an absolute T with its own idea of the time), clamped to 2^31-1; 0 stays 0; C and Python alike."""
    recs = _records(random.Random(9), 600)
    data, start, end = _file(recs)
    p = _both(data, start, end, set_mode=set_mode, offsets=(offset,))
    n = p.nodes[0]
    wire = _wire(data, n)
    sent = [
        s
        for s in v2.spans(data, start, end)
        if not s.binary and (set_mode or is_plain_key(s.key)) and (s.exptime == -1 or s.exptime - 1 > NOW)
    ]
    assert n.items == len(sent) > 0
    want = [v2.dest_expiry(v2.expiry_to_send(s.exptime), offset) for s in sent]
    if set_mode:
        got = [int(t) for t in re.findall(rb"^ms \S+ \d+(?: b)? T(\d+) ", wire, re.M)]
    else:
        got = [int(t) for t in re.findall(rb"^add \S+ \d+ (\d+) \d+\r\n", wire, re.M)]
    assert got == want
    assert all(t == 0 or 2_592_000 < t <= 2**31 - 1 for t in got)
    if offset == 2**31:
        assert set(got) <= {0, 2**31 - 1}


@pytest.mark.parametrize("set_mode", [False, True])
def test_probes_name_exactly_the_items_sent_as_text_alike(set_mode: bool) -> None:
    """The target check's lookups (presence.py): one `mg` per item the plan sends as text, routed
    with it, in send order, with its T; nothing for the expired, oversize and binary-protocol items."""
    recs = _records(random.Random(11), 1500)
    data, start, end = _file(recs)
    nodes = [Node(f"10.0.0.{i}", 11211) for i in range(1, 4)]
    ring = evcache_ring(nodes)
    p = _both(data, start, end, budgets=(1004,) * 3, set_mode=set_mode, ring=ring, probes=True)
    for i, n in enumerate(p.nodes):
        lines = n.probes.split(b"\r\n")[:-1]
        assert len(lines) == n.items == len(n.probe_expiry) // 8 > 0
        sent = [
            s
            for s in v2.spans(data, start, end)
            if ring.index_for(s.key) == i
            and not s.binary
            and (set_mode or is_plain_key(s.key))
            and (s.exptime == -1 or s.exptime - 1 > NOW)
            and len(s.key) + s.value_end - s.value_start + (4 if s.flags else 0) <= 1004
        ]
        assert [presence.probe_key(x) for x in lines] == [s.key for s in sent]
        assert [t for (t,) in struct.iter_unpack("<q", n.probe_expiry)] == [
            v2.expiry_to_send(s.exptime) for s in sent
        ]
    # Not asked: none (the populator alone keeps no lookups).
    assert all(
        n.probes == n.probe_expiry == b""
        for n in _both(data, start, end, ring=ring, budgets=(1004,) * 3).nodes
    )


# ---- version 3 (docs/data-format.md section 8): stamped records, binary ADDs -------------------------

# A binary request header (memcached's protocol_binary.h), read here independently of the C core.
_BIN = struct.Struct(">BBHBBHIIQ")


def _stamped(recs: list[df.Record], rng: random.Random) -> list[df.Record]:
    return [
        df.Record(
            r.key, r.flags, r.exptime, r.value, rng.randrange(2**64), -1 if r.exptime == -1 else r.exptime + 2
        )
        for r in recs
    ]


@pytest.mark.parametrize("set_mode", [False, True])
def test_v3_set_mode_and_text_add_plan_alike_and_skip_the_stamps(set_mode: bool) -> None:
    rng = random.Random(11)
    recs = _stamped(_records(rng, 800), rng)
    data, start, end = _file(recs, df.VERSION_3)
    p = _both(data, start, end, set_mode=set_mode, stamped=True, probes=True)
    n = p.nodes[0]
    assert p.records == len(recs)
    wire = _wire(data, n).replace(b"mn\r\n", b"")
    # No stamp goes on the wire: every command is generated (set) or an `add` (text add).
    spans = [s for s in v2.spans(data, start, end, stamped=True)]
    assert all(data[s.offset : s.offset + 16] not in wire for s in spans if s.source_cas > 2**40)
    if set_mode:
        assert wire.count(b"ms ") == n.items and b" MS q O" in wire
    # Each lookup carries its record's stamp and value length.
    stamps = [presence_stamp for presence_stamp in struct.iter_unpack("<Qqq", n.probe_stamps)]
    sent = [s for s in spans if not s.binary and (set_mode or is_plain_key(s.key))]
    sent = [s for s in sent if s.exptime == -1 or s.exptime - 1 > NOW]
    assert stamps == [(s.source_cas, s.source_exp, s.value_end - s.value_start) for s in sent]


def test_v3_binary_add_plan_is_an_add_per_item_named_by_its_index() -> None:
    rng = random.Random(12)
    recs = _stamped(_records(rng, 600), rng)
    data, start, end = _file(recs, df.VERSION_3)
    nodes = [Node(f"10.0.0.{i}", 11211) for i in range(1, 3)]
    ring = evcache_ring(nodes)
    p = plan(
        data,
        start,
        end,
        NOW,
        (1004, UNLIMITED),
        planmod.PLAN_ADD_BINARY,
        7,
        5000,
        ring,
        probes=True,
        stamped=True,
    )
    spans = list(v2.spans(data, start, end, stamped=True))
    by_off = {s.offset: s for s in spans}
    total = 0
    for i, n in enumerate(p.nodes):
        wire = b"".join(
            data[o : o + ln]
            if o >= 0
            else n.lines[PIECE_LINE - o : PIECE_LINE - o + ln]
            if o <= PIECE_LINE
            else b"<MN>"
            for o, ln in pieces_of(n.pieces)
        )
        order = n.order_offsets()
        assert len(order) == n.items
        at, k, seen_binary = 0, 0, []
        while at < len(wire):
            if wire[at : at + 4] == b"<MN>":
                at += 4
                continue
            magic, op, klen, elen, dt, vb, body, opaque, cas = _BIN.unpack_from(wire, at)
            flags, expiration = struct.unpack_from(">II", wire, at + 24)
            key = wire[at + 32 : at + 32 + klen]
            value = wire[at + 32 + klen : at + 24 + body]
            s = by_off[order[k]]  # the answer's opaque names the item
            assert (magic, op, elen, dt, vb, cas) == (0x80, 0x02, 8, 0, 0, 0)
            assert opaque == k and key == s.key
            assert (flags, value) == (s.flags, data[s.value_start : s.value_end])
            assert expiration == v2.expiry_to_send(s.exptime)
            if s.binary:
                seen_binary.append(s.offset)
            at += 24 + body
            k += 1
        assert k == n.items and wire.count(b"<MN>") >= -(-n.items // 7)
        assert seen_binary == n.binary  # keys no meta command names go inline, and are listed
        assert n.items + n.expired + len(n.oversize) == sum(1 for s in spans if ring.index_for(s.key) == i)
        total += n.items
    assert total and p.nodes[0].oversize


def test_a_bad_stamp_is_rejected_alike() -> None:
    good = encode_file("n1", 0, 0, [df.Record(b"g", 0, -1, b"", 1, -1)], version=df.VERSION_3)
    head_len = df.HEADER_FIXED + 2
    body = bytearray(good[head_len : len(good) - df.TRAILER_LEN])
    body[8:16] = struct.pack("<q", 0)  # source_exp 0
    data = good[:head_len] + bytes(body) + good[len(good) - df.TRAILER_LEN :]
    end = head_len + len(body)
    msgs = []
    for use_c in (True, False):
        with pytest.raises(v2.RecordError) as e:
            plan_with(use_c, data, head_len, end, NOW, (UNLIMITED,), False, 1000, 1 << 20, stamped=True)
        msgs.append(str(e.value))
    with pytest.raises(v2.RecordError) as e:
        list(v2.spans(data, head_len, end, stamped=True))
    msgs.append(str(e.value))
    assert msgs == [f"record 0 at offset {head_len}: source_exp 0"] * 3
