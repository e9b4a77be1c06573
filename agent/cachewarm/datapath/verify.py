"""`cachewarm verify`: every (or a sample of) source key is on its target node with the same value and
flags and a TTL within tolerance, and every (or a sample of) key the targets hold is one the source
holds too: a key only the target holds is a value the source deleted (or that expired there) after it
was copied — a resurrection — or a write that reached only the target; it is reported, never passed
over. Keys are routed to target nodes exactly as `populate` routes them (the same `Routing`, host
names resolved the same way). Keys no meta command can name (binary keys of 187+ bytes) are read
with the binary protocol, which does not tell a TTL: theirs is not compared."""

from __future__ import annotations

import functools
import json
import random
from dataclasses import asdict, dataclass, field

from cachewarm.datapath.keytext import key_text
from cachewarm.datapath.meta import Item, MetaConnection
from cachewarm.datapath.metadump import list_keys
from cachewarm.datapath.nodes import Node, resolve_nodes
from cachewarm.datapath.pool import process_pool
from cachewarm.datapath.populate.report import event_time
from cachewarm.datapath.routing import Routing

# Examples of differences a report keeps (the counts are complete).
EXAMPLES = 10


@dataclass
class VerifyReport:
    source_keys: int = 0
    checked: int = 0
    gone_from_source: int = 0  # expired or evicted between listing and fetching: not comparable
    missing: int = 0
    # Per property: a key whose value and flags both differ counts in both.
    value_mismatch: int = 0
    flags_mismatch: int = 0
    ttl_mismatch: int = 0
    # Keys present in the target that differ in anything (each key once).
    keys_different: int = 0
    # The targets' keys looked at (all, or `sample` per target), and those the source does not hold:
    # deleted or expired at the source after they were copied (a resurrection), or written to a target
    # only.
    target_keys: int = 0
    target_keys_checked: int = 0
    not_in_source: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def differences(self) -> int:
        """Keys missing, different or only in a target (each key once)."""
        return self.missing + self.keys_different + self.not_in_source

    @property
    def ok(self) -> bool:
        return self.differences == 0

    def to_json(self) -> str:
        return json.dumps(
            {
                "event": "verify",
                "time": event_time(),
                "ok": self.ok,
                "differences": self.differences,
                **asdict(self),
            },
            separators=(",", ":"),
        )

    def text(self) -> str:
        head = (
            f"verify {'OK' if self.ok else 'FAILED'}: {self.checked:,} keys compared "
            f"(of {self.source_keys:,} in the source; {self.gone_from_source:,} gone meanwhile): "
            f"missing {self.missing:,}, different {self.keys_different:,} (value {self.value_mismatch:,}, "
            f"flags {self.flags_mismatch:,}, ttl {self.ttl_mismatch:,}); in the target but not the source "
            f"{self.not_in_source:,} (of {self.target_keys_checked:,} target keys looked up)"
        )
        if not self.examples:
            return head
        n = len(self.examples)
        shown = f"{n} example{'s' if n != 1 else ''} of {self.differences:,}"
        return head + f"\n{shown}:" + "".join(f"\n  {e}" for e in self.examples)


def _note(rep: VerifyReport, what: str, key: bytes) -> None:
    if len(rep.examples) < EXAMPLES:
        rep.examples.append(f"{key_text(key)}: {what}")


def _differences(s: Item, t: Item, ttl_tolerance: int) -> list[str]:
    """What differs between the source's item and the target's (empty: the same)."""
    found = []
    if t.value != s.value:
        found.append(f"value ({len(s.value)} bytes vs {len(t.value)})")
    if t.flags != s.flags:
        found.append(f"flags ({s.flags} vs {t.flags})")
    # Read with the binary protocol (ttl None): no TTL to compare.
    if (
        s.ttl is not None
        and t.ttl is not None
        and ((s.ttl == -1) != (t.ttl == -1) or abs(s.ttl - t.ttl) > ttl_tolerance)
    ):
        found.append(f"ttl ({s.ttl} vs {t.ttl})")
    return found


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
                        continue
                    diff = _differences(s, t, ttl_tolerance)
                    if diff:
                        rep.keys_different += 1
                        rep.value_mismatch += any(d.startswith("value") for d in diff)
                        rep.flags_mismatch += any(d.startswith("flags") for d in diff)
                        rep.ttl_mismatch += any(d.startswith("ttl") for d in diff)
                        _note(rep, " and ".join(diff) + (" differ" if len(diff) > 1 else " differs"), k)
        finally:
            for rd in tgts:
                rd.__exit__()
    return rep


def _sample_keys(host: str, port: int, sample: int | None, rng: random.Random) -> tuple[int, list[bytes]]:
    """(keys listed, all of them or a reservoir sample of `sample`) of one server's crawl."""
    keys: list[bytes] = []
    n = 0
    for n, (k, _exp) in enumerate(list_keys(host, port), 1):
        if sample is None or len(keys) < sample:
            keys.append(k)
        else:
            j = rng.randrange(n)
            if j < sample:
                keys[j] = k
    return n, keys


def _not_in_source(
    source: Node, targets: list[Node], sample: int | None, rng: random.Random, rep: VerifyReport
) -> None:
    """The targets' keys (or a sample of each target's) the source does not hold."""
    for t in targets:
        listed, keys = _sample_keys(t.connect_host, t.port, sample, rng)
        rep.target_keys += listed
        rep.target_keys_checked += len(keys)
        with MetaConnection(source.connect_host, source.port) as src:
            extra = src.missing(keys)
        rep.not_in_source += len(extra)
        for k in extra:
            _note(rep, f"held by {t.address}, not by the source (deleted there after it was copied?)", k)


def verify(
    source: Node,
    targets: list[Node],
    sample: int | None = None,
    ttl_tolerance: int = 5,
    routing: Routing | None = None,
    shard: int = 20_000,
    seed: int | None = None,
    workers: int = 2,
    target_keys: bool = True,
) -> VerifyReport:
    """Raises ValueError for a host name that does not resolve or node keys that collide.
    `target_keys`: also look up the targets' keys at the source (not_in_source) — only meaningful when
    the targets were warmed from this one source (the node agent verifies one source node of many:
    its targets hold the other nodes' keys too)."""
    routing = routing or Routing()
    source, targets = resolve_nodes([source])[0], resolve_nodes(targets)
    routing.ring(targets)  # fail here, not in a worker, on colliding node keys
    rep = VerifyReport()
    rng = random.Random(seed)
    # Reservoir sample: memory bounded by the sample size, one pass over the crawl.
    rep.source_keys, keys = _sample_keys(source.connect_host, source.port, sample, rng)
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
            rep.keys_different += part.keys_different
            rep.examples.extend(part.examples[: max(0, EXAMPLES - len(rep.examples))])
    if target_keys:
        _not_in_source(source, targets, sample, rng, rep)
    return rep
