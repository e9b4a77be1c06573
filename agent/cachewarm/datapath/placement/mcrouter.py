"""mcrouter: a pool of the user's own JSON configuration as a hashkit description.

mcrouter (facebook/mcrouter, lib/Ch3HashFunc.h, lib/Crc32HashFunc.h, lib/carbon/Keys-inl.h,
lib/HashSelector.h): a pool route hashes the routing key — the key up to its first "|#|" (the
`/region/cluster/` routing prefix never reaches the server, so a stored key has none) — with the
route's salt appended: `Ch3` = furc_hash(key, N) (the default), `Crc32` = (crc32 & 0x7fffffff) % N,
`WeightedCh3` = furc retried with reversed-decimal salts until a SpookyHash V2 draw falls under the
server's weight, over the pool's servers in order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from cachewarm.datapath.nodes import Node
from cachewarm.datapath.placement.description import Description, NodeEntry, PlacementError
from cachewarm.datapath.placement.twemproxy import _match

SUPPORTED = ("Ch3", "Crc32", "WeightedCh3")


def _routes(obj: Any) -> Iterator[Any]:
    """Every route object and route string in the configuration, depth first."""
    if isinstance(obj, dict):
        yield obj
        for v in obj.values():
            yield from _routes(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _routes(v)
    elif isinstance(obj, str):
        yield obj


def _hash_of(path: Path, pool: str, doc: dict[str, Any]) -> tuple[str, str, tuple[Any, ...]]:
    """(hash_func, salt, weights) of the routes that send to `pool`; they must agree."""
    found: set[tuple[str, str, tuple[Any, ...]]] = set()
    for r in _routes({k: v for k, v in doc.items() if k != "pools"}):
        if isinstance(r, str):
            if r in (f"PoolRoute|{pool}", f"Pool|{pool}"):
                found.add(("Ch3", "", ()))
            continue
        pool_ref = r.get("pool")
        if r.get("type") not in ("PoolRoute", "HashRoute") or pool_ref not in (pool, f"Pool|{pool}"):
            continue
        h = r.get("hash", {})
        if isinstance(h, str):
            h = {"hash_func": h}
        if not isinstance(h, dict):
            raise PlacementError(f"{path}: a route to pool {pool!r} has a hash that is not an object or name")
        weights = h.get("weights", [])
        if not isinstance(weights, list):
            raise PlacementError(f"{path}: a route to pool {pool!r} has weights that are not a list")
        found.add((str(h.get("hash_func", "Ch3")), str(h.get("salt", "")), tuple(weights)))
    if not found:
        found.add(("Ch3", "", ()))  # no route names it yet: mcrouter's default pool hash
    if len(found) > 1:
        raise PlacementError(
            f"{path}: routes hash pool {pool!r} in different ways ({sorted(found)}): a key has no one home"
        )
    return found.pop()


def strip_comments(text: str) -> str:
    """mcrouter's configuration is JSON with // and /* */ comments: the comments out (not inside
    strings), the line breaks kept so that a JSON error still names the right line."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            end = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, end))
            i = end
        else:
            out.append(c)
            i += 1
    return "".join(out)


def description(path: Path, pool: str, nodes: Sequence[Node]) -> Description:
    try:
        doc = json.loads(strip_comments(path.read_text()))
    except OSError as e:
        raise PlacementError(f"mcrouter config {path}: {e.strerror or e}") from e
    except json.JSONDecodeError as e:
        raise PlacementError(f"mcrouter config {path} is not JSON: {e}") from e
    if isinstance(doc, dict) and ("macros" in doc or "named_handles" in doc):
        raise PlacementError(
            f"mcrouter config {path} uses macros or named handles, which cachewarm does not expand: "
            "give it the expanded configuration (mcrouter's --config-dump / the admin get_config)"
        )
    pools = doc.get("pools") if isinstance(doc, dict) else None
    if not isinstance(pools, dict):
        raise PlacementError(f'mcrouter config {path} has no "pools" object')
    if pool not in pools:
        raise PlacementError(
            f"{path} has no pool {pool!r} (its pools: {', '.join(map(str, pools)) or 'none'})"
        )
    servers_raw = pools[pool].get("servers") if isinstance(pools[pool], dict) else None
    if not isinstance(servers_raw, list) or not servers_raw:
        raise PlacementError(f"{path}: pool {pool!r} lists no servers")
    servers = []
    for s in servers_raw:
        # "host:port" or "host:port:protocol[:ssl...]"; names are case-sensitive
        parts = str(s).split(":")
        if len(parts) < 2 or not parts[1].isdigit():
            raise PlacementError(f"{path}: pool {pool!r}: server {s!r} is not host:port")
        servers.append((parts[0], int(parts[1])))
    func, salt, weights = _hash_of(path, pool, doc)
    if func not in SUPPORTED:
        raise PlacementError(
            f"{path}: pool {pool!r} is hashed with {func!r}; "
            f"cachewarm places keys for {', '.join(SUPPORTED)} only"
        )
    dest = _match(path, pool, servers, nodes)
    entries = tuple(NodeEntry(f"{h}:{p}", 1, dest[i]) for i, (h, p) in enumerate(servers))
    if func == "Ch3":
        return Description("furc", entries, hash_stop=True, salt=salt.encode())
    if func == "WeightedCh3":
        return Description(
            "wch3",
            entries,
            hash_stop=True,
            salt=salt.encode(),
            weights=_weights(path, pool, weights, len(servers)),
        )
    return Description("modula", entries, hash="crc32_mcrouter", hash_stop=True, salt=salt.encode())


def _weights(path: Path, pool: str, raw: tuple[Any, ...], n: int) -> tuple[float, ...]:
    """WeightedCh3's `weights`, as mcrouter reads them (WeightedChHashFuncBase::parseWeights): one
    number in [0, 1] per server; extra ones ignored, missing ones 0.5 (mcrouter logs the config as
    broken and goes on)."""
    out = []
    for w in raw[:n]:
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w <= 1:
            raise PlacementError(f"{path}: pool {pool!r}: WeightedCh3 weight {w!r} is not a number in [0, 1]")
        out.append(float(w))
    return tuple(out + [0.5] * (n - len(out)))
