"""`cachewarm verify`: every (or a sample of) source key is on its target node with the same value and
flags and a TTL within tolerance. Keys are routed to target nodes exactly as `populate` routes them
(the same `Routing`, host names resolved the same way). Keys no meta command can name (binary keys of
187+ bytes) are read with the binary protocol, which does not tell a TTL: theirs is not compared."""

from __future__ import annotations

import functools
import json
import random
from dataclasses import asdict, dataclass, field

from cachewarm.datapath.ketama import Node, Routing, resolve_nodes
from cachewarm.datapath.meta import MetaConnection, list_keys
from cachewarm.datapath.pool import process_pool


@dataclass
class VerifyReport:
    source_keys: int = 0
    checked: int = 0
    gone_from_source: int = 0  # expired or evicted between listing and fetching: not comparable
    missing: int = 0
    value_mismatch: int = 0
    flags_mismatch: int = 0
    ttl_mismatch: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def differences(self) -> int:
        return self.missing + self.value_mismatch + self.flags_mismatch + self.ttl_mismatch

    @property
    def ok(self) -> bool:
        return self.differences == 0

    def to_json(self) -> str:
        return json.dumps(
            {"event": "verify", "ok": self.ok, "differences": self.differences, **asdict(self)},
            separators=(",", ":"),
        )

    def text(self) -> str:
        return (
            f"verify {'OK' if self.ok else 'FAILED'}: {self.checked:,} keys compared "
            f"(of {self.source_keys:,} in the source; {self.gone_from_source:,} gone meanwhile): "
            f"missing {self.missing:,}, value {self.value_mismatch:,}, flags {self.flags_mismatch:,}, "
            f"ttl {self.ttl_mismatch:,}"
            + ("".join(f"\n  {e}" for e in self.examples) if self.examples else "")
        )


def _note(rep: VerifyReport, what: str, key: bytes) -> None:
    if len(rep.examples) < 10:
        rep.examples.append(f"{what}: {key!r}")


def _compare(
    source: Node, targets: list[Node], keys: list[bytes], *, ttl_tolerance: int, routing: Routing
) -> VerifyReport:
    """Compare one shard of keys (runs in a pool process)."""
    rep = VerifyReport()
    ring = routing.ring(targets)
    with MetaConnection(source.connect_host, source.port) as src:
        tgts = [MetaConnection(t.connect_host, t.port).__enter__() for t in targets]
        try:
            have = src.get_many(keys)
            rep.gone_from_source += len(keys) - len(have)
            per_node: list[list[bytes]] = [[] for _ in targets]
            for k in have:
                per_node[ring.index_for(k) if ring else 0].append(k)
            for rd, ks in zip(tgts, per_node, strict=True):
                got = rd.get_many(ks)
                for k in ks:
                    rep.checked += 1
                    s, t = have[k], got.get(k)
                    if t is None:
                        rep.missing += 1
                        _note(rep, "missing", k)
                    elif t.value != s.value:
                        rep.value_mismatch += 1
                        _note(rep, "value differs", k)
                    elif t.flags != s.flags:
                        rep.flags_mismatch += 1
                        _note(rep, f"flags {s.flags} != {t.flags}", k)
                    elif s.ttl is None or t.ttl is None:
                        pass  # read with the binary protocol: no TTL to compare
                    elif (s.ttl == -1) != (t.ttl == -1) or abs(s.ttl - t.ttl) > ttl_tolerance:
                        rep.ttl_mismatch += 1
                        _note(rep, f"ttl {s.ttl} vs {t.ttl}", k)
        finally:
            for rd in tgts:
                rd.__exit__()
    return rep


def verify(
    source: Node,
    targets: list[Node],
    sample: int | None = None,
    ttl_tolerance: int = 5,
    routing: Routing | None = None,
    shard: int = 20_000,
    seed: int | None = None,
    workers: int = 2,
) -> VerifyReport:
    """Raises ValueError for a host name that does not resolve or node keys that collide."""
    routing = routing or Routing()
    source, targets = resolve_nodes([source])[0], resolve_nodes(targets)
    routing.ring(targets)  # fail here, not in a worker, on colliding node keys
    rep = VerifyReport()
    rng = random.Random(seed)
    keys: list[bytes] = []
    # Reservoir sample: memory bounded by the sample size, one pass over the crawl.
    for n, (k, _exp) in enumerate(list_keys(source.connect_host, source.port)):
        rep.source_keys += 1
        if sample is None or len(keys) < sample:
            keys.append(k)
        else:
            j = rng.randrange(n + 1)
            if j < sample:
                keys[j] = k
    shards = [keys[i : i + shard] for i in range(0, len(keys), shard)]
    # Shards are compared in parallel processes: parsing a million values is Python-bound.
    with process_pool(max(1, workers)) as pool:
        compare = functools.partial(_compare, source, targets, ttl_tolerance=ttl_tolerance, routing=routing)
        parts = pool.map(compare, shards)
        for part in parts:
            rep.checked += part.checked
            rep.gone_from_source += part.gone_from_source
            rep.missing += part.missing
            rep.value_mismatch += part.value_mismatch
            rep.flags_mismatch += part.flags_mismatch
            rep.ttl_mismatch += part.ttl_mismatch
            rep.examples.extend(part.examples[: max(0, 10 - len(rep.examples))])
    return rep
