"""How keys are spread over several destinations: EVCache's ketama ring (the default) or another
client's placement (`--placement`). Both are hashkit descriptions (dumper-cpp/hashkit/placement.h)
that the C extension routes with, as the C++ dumper's stream mode does with the same text.

EVCache's ring is spymemcached's KetamaNodeLocator: for each node (in the given order; a later node
wins a shared point, like TreeMap.put) and each i in 0 .. reps/4 - 1, md5(nodeKey + "-" + i) gives
four little-endian u32 ring points; a key's node owns the first point >= the first little-endian u32
of md5(key), wrapping. The node key is `hostName/ip:11211` (the port always written 11211).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cachewarm.datapath.nodes import Node
from cachewarm.datapath.placement.spec import PlacementSpec, Placer, md5_ketama

# EVCache: hostName + "/" + ip + ":11211", the port always written as 11211; {ip} is the address
# the host name resolves to (the name itself when it is an IP address).
EVCACHE_NODE_KEY = "{host}/{ip}:11211"


def node_key(node_key_format: str, node: Node) -> str:
    try:
        return node_key_format.format(host=node.host, ip=node.ip or node.host, port=node.port)
    except (KeyError, IndexError) as e:
        raise ValueError(f"bad node-key format {node_key_format!r}: use {{host}}, {{ip}} and {{port}}") from e


def evcache_ring(
    nodes: Sequence[Node],
    node_key_format: str = EVCACHE_NODE_KEY,
    reps: int = 160,
    hash_delimiter: bytes | None = None,
) -> Placer:
    """EVCache's ring over `nodes` (`bucket.size` = reps; hash.on.partial.key: hash only the part of a
    key before the first `hash_delimiter`). Raises ValueError naming node keys that collide."""
    if not nodes:
        raise ValueError("ketama ring needs at least one node")
    if reps < 4 or reps % 4:
        raise ValueError(f"ketama reps {reps} must be a positive multiple of 4")
    keys = [node_key(node_key_format, n) for n in nodes]
    if len(set(keys)) != len(keys):
        raise ValueError(
            f"node keys collide with format {node_key_format!r} ({keys}); several nodes on one "
            "host need a node-key format with the port, e.g. '{host}:{port}'"
        )
    return Placer(nodes, "evcache", md5_ketama(keys, [reps] * len(keys), hash_delimiter or b""))


@dataclass(frozen=True)
class Routing:
    """How keys are spread over several destinations: the same options for populate, warm and verify."""

    node_key_format: str = EVCACHE_NODE_KEY
    reps: int = 160
    # EVCache's hash.on.partial.key: hash only the part before the first delimiter.
    hash_delimiter: bytes | None = None
    # Another client's placement (--placement; cachewarm.datapath.placement); None: EVCache's ketama.
    placement: PlacementSpec | None = None

    def ring(self, nodes: Sequence[Node]) -> Placer | None:
        """What routes keys over several nodes (None for one: every key goes there). Raises
        ValueError (a PlacementError for a scheme that does not fit the nodes, even one)."""
        if self.placement is not None:
            placer = self.placement.placer(nodes)
            return placer if len(nodes) > 1 else None
        if len(nodes) < 2:
            return None
        return evcache_ring(nodes, self.node_key_format, self.reps, self.hash_delimiter)

    def describe(self, nodes: Sequence[Node]) -> dict[str, Any]:
        """What a key's node depends on (the populator's state file records it)."""
        if self.placement is not None:
            placer = self.placement.placer(nodes)
            return {
                "destinations": [n.address for n in nodes],
                "placement": self.placement.text(),
                "description": placer.description.text(),
            }
        if self.ring(nodes) is None:
            return {"destinations": [n.address for n in nodes]}
        return {
            "destinations": [n.address for n in nodes],
            "node_keys": [node_key(self.node_key_format, n) for n in nodes],
            "ketama_reps": self.reps,
            "hash_delimiter": self.hash_delimiter.hex() if self.hash_delimiter is not None else None,
        }
