"""twemproxy (nutcracker): a pool of the user's own YAML configuration as a hashkit description.

What nutcracker 0.5.0 does (src/nc_conf.c, src/hashkit/): servers are "host:port:weight [name]";
a server's ketama name is its configured name, else `host` on port 11211, else `host:port`; ketama
gives each server floor(float32(w/Σw·160/4·N) + 1e-10)·4 points, md5 of "<name>-<i>", 4 per digest;
modula = one slot per unit of weight, hash % Σweight; default hash fnv1a_64, default distribution
ketama; `hash_tag` (two characters) hashes only the non-empty text between them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cachewarm.datapath.nodes import Node
from cachewarm.datapath.placement.description import (
    Description,
    NodeEntry,
    PlacementError,
    node_name,
    weighted_points,
)

HASHES = (
    "one_at_a_time",
    "md5",
    "crc16",
    "crc32",
    "crc32a",
    "fnv1_64",
    "fnv1a_64",
    "fnv1_32",
    "fnv1a_32",
    "hsieh",
    "murmur",
    "jenkins",
)


def load(path: Path) -> dict[str, Any]:
    import yaml

    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as e:
        raise PlacementError(f"twemproxy config {path}: {e.strerror or e}") from e
    except yaml.YAMLError as e:
        raise PlacementError(f"twemproxy config {path} is not YAML: {e}") from e
    if not isinstance(doc, dict):
        raise PlacementError(f"twemproxy config {path}: expected pools (a mapping of pool names)")
    return doc


def _server(path: Path, pool: str, text: object) -> tuple[str, int, int, str]:
    """(host, port, weight, name) of a "host:port:weight [name]" entry."""
    if not isinstance(text, str):
        raise PlacementError(
            f'{path}: pool {pool!r}: server {text!r} is not a "host:port:weight [name]" string'
        )
    addr, _, name = text.partition(" ")
    host, port_s, weight_s = addr.rsplit(":", 2) if addr.count(":") >= 2 else ("", "", "")
    if not host or not port_s.isdigit() or not weight_s.isdigit() or not 0 < int(port_s) < 65536:
        raise PlacementError(
            f'{path}: pool {pool!r}: server {text!r} is not "host:port:weight [name]" '
            "(unix sockets cannot be warmed)"
        )
    if int(weight_s) == 0:
        raise PlacementError(
            f"{path}: pool {pool!r}: server {text!r} has weight 0 (nutcracker refuses it too)"
        )
    port = int(port_s)
    return host, port, int(weight_s), name.strip() or node_name(host, port)


def description(path: Path, pool: str, nodes: Sequence[Node]) -> Description:
    doc = load(path)
    if pool not in doc:
        raise PlacementError(f"{path} has no pool {pool!r} (its pools: {', '.join(map(str, doc)) or 'none'})")
    conf = doc[pool]
    if not isinstance(conf, dict) or not isinstance(conf.get("servers"), list) or not conf["servers"]:
        raise PlacementError(f"{path}: pool {pool!r} lists no servers")
    if conf.get("redis"):
        raise PlacementError(f"{path}: pool {pool!r} is a redis pool, not memcached")
    dist = conf.get("distribution", "ketama")
    if dist not in ("ketama", "modula"):
        raise PlacementError(
            f"{path}: pool {pool!r}: distribution {dist!r} cannot be warmed "
            "(ketama or modula; random places no key)"
        )
    key_hash = conf.get("hash", "fnv1a_64")
    if key_hash not in HASHES:
        raise PlacementError(
            f"{path}: pool {pool!r}: unknown hash {key_hash!r} (nutcracker's: {', '.join(HASHES)})"
        )
    tag = conf.get("hash_tag", "")
    if not isinstance(tag, str) or len(tag.encode()) not in (0, 2):
        raise PlacementError(f"{path}: pool {pool!r}: hash_tag {tag!r} must be two characters")
    servers = [_server(path, pool, s) for s in conf["servers"]]
    dest = _match(path, pool, [(h, p) for h, p, _, _ in servers], nodes)
    total = sum(w for _, _, w, _ in servers)
    if dist == "modula":
        entries = tuple(NodeEntry(nm, w, dest[i]) for i, (_, _, w, nm) in enumerate(servers))
        return Description("modula", entries, hash=key_hash, tag=tag.encode())
    n = len(servers)
    entries = tuple(
        NodeEntry(nm, weighted_points(w, total, n), dest[i]) for i, (_, _, w, nm) in enumerate(servers)
    )
    return Description("ketama", entries, hash=key_hash, points="md5x4", tag=tag.encode())


def _match(path: Path, pool: str, servers: list[tuple[str, int]], nodes: Sequence[Node]) -> list[int]:
    """The destination index of each configured server; every destination must be one of them and
    every server a destination (else its keys would have nowhere to go)."""
    where = {(n.host, n.port): i for i, n in enumerate(nodes)}
    listed = set(servers)
    if len(listed) != len(servers):
        raise PlacementError(f"{path}: pool {pool!r} lists a server twice")
    strangers = [n.address for n in nodes if (n.host, n.port) not in listed]
    if strangers:
        raise PlacementError(
            f"{path}: pool {pool!r} does not list the destination(s) {', '.join(strangers)}: "
            "its client would never look there (give --to exactly the pool's servers)"
        )
    missing = [f"{h}:{p}" for h, p in servers if (h, p) not in where]
    if missing:
        raise PlacementError(
            f"{path}: pool {pool!r} lists {', '.join(missing)}, which --to does not name: "
            "the keys placed there would be lost (give --to every server of the pool)"
        )
    return [where[s] for s in servers]
