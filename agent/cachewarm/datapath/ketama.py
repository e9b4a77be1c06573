"""Ketama consistent hashing, bit-for-bit compatible with spymemcached's KetamaNodeLocator (EVCache).

Why not a library: uhashring (the maintained Python ketama ring) hashes `str(key)`, so a bytes key
hashes as "b'...'", and it has no way to set spymemcached's node-key string; its lookup is also
"first point > hash" where spymemcached's TreeMap ceiling is "first point >= hash". The algorithm is
small; the public spymemcached test vectors in tests/datapath/test_ketama.py pin it.

Ring: for each node (in the given order; a later node wins a point collision, like TreeMap.put)
and each i in 0 .. reps/4 - 1, d = md5(nodeKey + "-" + i); its four little-endian u32 words are
four ring points. A key's hash is the first little-endian u32 of md5(key); its node owns the first
point >= the hash, wrapping to the first point.
"""

from __future__ import annotations

import bisect
import hashlib
import ipaddress
import re
import socket
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cachewarm.datapath.placement import PlacementSpec, Placer

# EVCache: hostName + "/" + ip + ":11211", the port always written as 11211; {ip} is the address
# the host name resolves to (the name itself when it is an IP address).
EVCACHE_NODE_KEY = "{host}/{ip}:11211"
# spymemcached's default for a literal IP address (and its public test vectors).
SPY_NODE_KEY = "{host}:{port}"

_U32X4 = struct.Struct("<4I")
_U32 = struct.Struct("<I")


@dataclass(frozen=True)
class Node:
    host: str
    port: int
    # The address `host` resolved to (`resolve_nodes`, once per run, as the EVCache client does): the
    # node key's {ip}, and where we connect. None: not resolved (an IP address needs no resolving).
    ip: str | None = None

    @property
    def address(self) -> str:
        """HOST:PORT as the user named it."""
        return f"{self.host}:{self.port}"

    @property
    def connect_host(self) -> str:
        return self.ip or self.host


Resolver = Callable[..., list[tuple[Any, ...]]]


def resolve(node: Node, resolver: Resolver = socket.getaddrinfo) -> Node:
    """The node with `ip` set: the host itself if it is an IP address, else its first IPv4 address
    (Java, and so the EVCache client, prefers IPv4), else its first IPv6 one. Raises ValueError
    naming a host that does not resolve."""
    try:
        ipaddress.ip_address(node.host)
        return replace(node, ip=node.host)
    except ValueError:
        pass
    try:
        infos = resolver(node.host, node.port, 0, socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:
        raise ValueError(f"cannot resolve {node.host!r}: {e}") from e
    addrs = [(fam, sa[0]) for fam, _, _, _, sa in infos]
    for want in (socket.AF_INET, socket.AF_INET6):
        for fam, ip in addrs:
            if fam == want:
                return replace(node, ip=str(ip))
    raise ValueError(f"{node.host!r} resolves to no IP address")


def resolve_nodes(nodes: Sequence[Node], resolver: Resolver = socket.getaddrinfo) -> list[Node]:
    return [resolve(n, resolver) for n in nodes]


_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*\.?$")


def valid_host(host: str) -> bool:
    """A DNS name, an IPv4 address, or an IPv6 address (given in brackets on the command line)."""
    if len(host) > 253:
        return False
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(_HOSTNAME.fullmatch(host))


DEFAULT_PORT = 11211


def parse_nodes(spec: str, what: str = "destination", default_port: int | None = None) -> list[Node]:
    """`HOST[:PORT][,HOST[:PORT]...]` -> nodes, in order. Raises ValueError naming `what` (the flag or
    role, e.g. "--source") and the bad part. A missing port is `default_port` (the command line passes
    memcached's 11211); without one, the port is required."""
    nodes = []
    for part in spec.split(","):
        part = part.strip()
        host, sep, port_s = part.rpartition(":")
        if (part.startswith("[") and part.endswith("]")) or (not sep and default_port is not None):
            host, sep, port_s = part, ":", str(default_port)
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        form = "HOST[:PORT]" if default_port is not None else "HOST:PORT"
        if not sep or not host or not port_s.isdigit():
            raise ValueError(f"bad {what} {part!r}: expected {form}")
        if not 0 < int(port_s) < 65536:
            raise ValueError(f"bad {what} {part!r}: port {port_s} is not in 1..65535")
        if not valid_host(host):
            raise ValueError(f"bad {what} {part!r}: {host!r} is not a host name or IP address")
        nodes.append(Node(host, int(port_s)))
    if len(set(nodes)) != len(nodes):
        raise ValueError(f"{what} list {spec!r} names a node twice")
    return nodes


def key_hash(key: bytes) -> int:
    return int(_U32.unpack_from(hashlib.md5(key).digest())[0])


@dataclass
class KetamaRing:
    nodes: Sequence[Node]
    node_key_format: str = EVCACHE_NODE_KEY
    reps: int = 160
    # EVCache's hash.on.partial.key: hash only the part before the first delimiter.
    hash_delimiter: bytes | None = None
    _points: list[int] = field(init=False, repr=False)
    _owners: list[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValueError("ketama ring needs at least one node")
        if self.reps < 4 or self.reps % 4:
            raise ValueError(f"ketama reps {self.reps} must be a positive multiple of 4")
        keys = [self.node_key(n) for n in self.nodes]
        if len(set(keys)) != len(keys):
            raise ValueError(
                f"node keys collide with format {self.node_key_format!r} ({keys}); several nodes on one "
                "host need a node-key format with the port, e.g. '{host}:{port}'"
            )
        ring: dict[int, int] = {}
        for idx, nk in enumerate(keys):
            for i in range(self.reps // 4):
                for point in _U32X4.unpack(hashlib.md5(f"{nk}-{i}".encode()).digest()):
                    ring[point] = idx
        self._points = sorted(ring)
        self._owners = [ring[p] for p in self._points]

    def node_key(self, node: Node) -> str:
        try:
            return self.node_key_format.format(host=node.host, ip=node.ip or node.host, port=node.port)
        except (KeyError, IndexError) as e:
            raise ValueError(
                f"bad node-key format {self.node_key_format!r}: use {{host}}, {{ip}} and {{port}}"
            ) from e

    @property
    def points(self) -> list[int]:
        """The ring's points, sorted (the populator's C walk routes with them)."""
        return self._points

    @property
    def owners(self) -> list[int]:
        """The index in `nodes` owning each point of `points`."""
        return self._owners

    def index_for(self, key: bytes) -> int:
        """The index in `nodes` of the key's node."""
        if self.hash_delimiter is not None:
            cut = key.find(self.hash_delimiter)
            if cut >= 0:
                key = key[:cut]
        i = bisect.bisect_left(self._points, key_hash(key))
        return self._owners[i if i < len(self._points) else 0]

    def node_for(self, key: bytes) -> Node:
        return self.nodes[self.index_for(key)]


@dataclass(frozen=True)
class Routing:
    """How keys are spread over several destinations: the same options for populate, warm and verify."""

    node_key_format: str = EVCACHE_NODE_KEY
    reps: int = 160
    # EVCache's hash.on.partial.key: hash only the part before the first delimiter.
    hash_delimiter: bytes | None = None
    # Another client's placement (--placement; cachewarm.datapath.placement); None: EVCache's ketama.
    placement: PlacementSpec | None = None

    def ring(self, nodes: Sequence[Node]) -> KetamaRing | Placer | None:
        """What routes keys over several nodes (None for one: every key goes there). Raises
        ValueError (a PlacementError for a scheme that does not fit the nodes, even one)."""
        if self.placement is not None:
            placer = self.placement.placer(nodes)
            return placer if len(nodes) > 1 else None
        if len(nodes) < 2:
            return None
        return KetamaRing(nodes, self.node_key_format, self.reps, self.hash_delimiter)

    def describe(self, nodes: Sequence[Node]) -> dict[str, Any]:
        """What a key's node depends on (the populator's state file records it)."""
        if self.placement is not None:
            placer = self.placement.placer(nodes)
            return {
                "destinations": [n.address for n in nodes],
                "placement": self.placement.text(),
                "description": placer.description.text(),
            }
        ring = self.ring(nodes)
        if ring is None:
            return {"destinations": [n.address for n in nodes]}
        assert isinstance(ring, KetamaRing)
        return {
            "destinations": [n.address for n in nodes],
            "node_keys": [ring.node_key(n) for n in nodes],
            "ketama_reps": self.reps,
            "hash_delimiter": self.hash_delimiter.hex() if self.hash_delimiter is not None else None,
        }
