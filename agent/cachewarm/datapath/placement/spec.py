"""`--placement SCHEME[,KEY=VALUE...]`: which client's key -> node mapping a warm reproduces.

A scheme resolves, for the destination nodes, to a hashkit description (hashkit/placement.h): the
distribution, the key hash, the node names and point counts, the key transforms. The C extension
parses it (the C++ dumper parses the same text), so the placement is written once, in C.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cachewarm.datapath.nodes import Node, resolve
from cachewarm.datapath.placement import mcrouter, twemproxy
from cachewarm.datapath.placement.description import (
    Description,
    NodeEntry,
    PlacementError,
    Placer,
    node_name,
    weighted_points,
)

# scheme -> (allowed options, what the user must give)
SCHEMES: dict[str, tuple[frozenset[str], str]] = {
    "twemproxy": (frozenset({"config", "pool"}), "config=NUTCRACKER.yml,pool=NAME"),
    "mcrouter": (frozenset({"config", "pool"}), "config=MCROUTER.json,pool=NAME"),
    "libmemcached": (
        frozenset({"distribution", "hash", "namespace", "weights"}),
        "[distribution=modula|ketama|ketama-weighted|ketama-spy][,hash=NAME][,namespace=PREFIX]"
        "[,weights=W1:W2:...]",
    ),
    "pymemcache": (frozenset({"keys", "prefix"}), "[keys=str|bytes][,prefix=KEY_PREFIX]"),
    "gomemcache": (frozenset(), ""),
    "spymemcached": (
        frozenset({"format", "reps", "weighted", "weights"}),
        "[format=spymemcached|libmemcached][,reps=N][,weighted=true][,weights=W1:W2:...]",
    ),
}
_REQUIRED = {"twemproxy": ("config", "pool"), "mcrouter": ("config", "pool")}

# libmemcached's hash names (memcached_behavior_set MEMCACHED_BEHAVIOR_HASH) -> hashkit's.
LIBMEMCACHED_HASHES = {
    "default": "one_at_a_time",
    "one_at_a_time": "one_at_a_time",
    "md5": "md5",
    "crc": "crc32",
    "fnv1_64": "fnv1_64",
    "fnv1a_64": "fnv1a_64",
    "fnv1_32": "fnv1_32",
    "fnv1a_32": "fnv1a_32",
    "hsieh": "hsieh",
    "murmur": "murmur",
    "jenkins": "jenkins",
}


@dataclass(frozen=True)
class PlacementSpec:
    """`SCHEME[,KEY=VALUE...]` as the user gave it (validated by `parse`)."""

    scheme: str
    options: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, text: str) -> PlacementSpec:
        scheme, *parts = [p.strip() for p in text.split(",")]
        if scheme not in SCHEMES:
            raise PlacementError(
                f"unknown placement scheme {scheme!r}: use evcache (the default) or one of "
                + ", ".join(sorted(SCHEMES))
            )
        allowed, usage = SCHEMES[scheme]
        opts: dict[str, str] = {}
        for part in parts:
            k, sep, v = part.partition("=")
            if not sep or not v:
                raise PlacementError(
                    f"--placement {text!r}: {part!r} is not KEY=VALUE (usage: {scheme},{usage})"
                )
            if k not in allowed:
                raise PlacementError(
                    f"--placement {text!r}: {scheme} takes no option {k!r} "
                    f"(usage: {scheme}{',' if usage else ''}{usage})"
                )
            if k in opts:
                raise PlacementError(f"--placement {text!r}: {k!r} given twice")
            opts[k] = v
        for k in _REQUIRED.get(scheme, ()):
            if k not in opts:
                raise PlacementError(f"--placement {text!r}: {scheme} needs {k}= (usage: {scheme},{usage})")
        spec = cls(scheme, tuple(sorted(opts.items())))
        spec._check_values()
        return spec

    def option(self, key: str, default: str | None = None) -> str | None:
        return dict(self.options).get(key, default)

    def text(self) -> str:
        return ",".join([self.scheme, *(f"{k}={v}" for k, v in self.options)])

    def _check_values(self) -> None:
        if self.scheme == "libmemcached":
            dist = self.option("distribution", "modula")
            if dist not in ("modula", "ketama", "ketama-weighted", "ketama-spy"):
                raise PlacementError(
                    f"libmemcached distribution {dist!r}: use modula, ketama, ketama-weighted or ketama-spy"
                )
            h = self.option("hash", "default")
            if h not in LIBMEMCACHED_HASHES:
                raise PlacementError(f"libmemcached hash {h!r}: use one of {', '.join(LIBMEMCACHED_HASHES)}")
        if self.scheme == "spymemcached":
            if self.option("format", "spymemcached") not in ("spymemcached", "libmemcached"):
                raise PlacementError(
                    f"spymemcached format={self.option('format')!r}: use spymemcached or libmemcached"
                )
            reps = str(self.option("reps", "160"))
            if not reps.isdigit() or not 4 <= int(reps) <= 10000 or int(reps) % 4:
                raise PlacementError(f"spymemcached reps={reps!r}: a multiple of 4, 4..10000")
            if self.option("weighted", "false") not in ("true", "false"):
                raise PlacementError(f"spymemcached weighted={self.option('weighted')!r}: true or false")
        if self.scheme == "pymemcache" and self.option("keys", "str") not in ("str", "bytes"):
            raise PlacementError(
                f"pymemcache keys={self.option('keys')!r}: use str or bytes (how your code passes keys)"
            )

    def placer(self, nodes: Sequence[Node]) -> Placer:
        """The placement over `nodes` (the destinations, in the order given). Raises PlacementError
        naming a bad configuration or a node it does not list — before anything is sent."""
        if not nodes:
            raise PlacementError("a placement needs at least one destination")
        if self.scheme == "twemproxy":
            desc = twemproxy.description(Path(str(self.option("config"))), str(self.option("pool")), nodes)
        elif self.scheme == "mcrouter":
            desc = mcrouter.description(Path(str(self.option("config"))), str(self.option("pool")), nodes)
        elif self.scheme == "libmemcached":
            desc = _libmemcached(self, nodes)
        elif self.scheme == "spymemcached":
            desc = _spymemcached(self, nodes)
        elif self.scheme == "pymemcache":
            desc = Description(
                "rendezvous",
                tuple(NodeEntry(f"{n.host}:{n.port}", 1, i) for i, n in enumerate(nodes)),
                keyform=str(self.option("keys", "str")).replace("bytes", "repr"),
                prefix=str(self.option("prefix", "")).encode(),
            )
        else:  # gomemcache: crc32.ChecksumIEEE(key) % len(servers), servers in the order given
            desc = Description(
                "modula", tuple(NodeEntry(n.address, 1, i) for i, n in enumerate(nodes)), hash="crc32a"
            )
        return Placer(nodes, self.scheme, desc)


def _libmemcached(spec: PlacementSpec, nodes: Sequence[Node]) -> Description:
    dist = str(spec.option("distribution", "modula"))
    key_hash = LIBMEMCACHED_HASHES[str(spec.option("hash", "default"))]
    prefix = str(spec.option("namespace", "")).encode()
    n = len(nodes)
    if dist == "modula":
        entries = tuple(NodeEntry(n_.address, 1, i) for i, n_ in enumerate(nodes))
        return Description("modula", entries, hash=key_hash, prefix=prefix)
    if dist == "ketama":  # 100 points per server, each the key hash of "<name>-<i>"
        entries = tuple(NodeEntry(node_name(x.host, x.port), 100, i) for i, x in enumerate(nodes))
        return Description("ketama", entries, hash=key_hash, points="hash", prefix=prefix)
    if dist == "ketama-spy":  # "/host:port-<i>" (i from 0), 100 points, the key hash
        entries = tuple(NodeEntry(f"/{x.host}:{x.port}", 100, i) for i, x in enumerate(nodes))
        return Description("ketama", entries, hash=key_hash, points="hash", prefix=prefix)
    # ketama-weighted (its behavior sets md5 as the key hash): equal weights, the float32-scaled 160
    # points (156 for some pool sizes), md5 x 4 per "<name>-<i>"
    if spec.option("hash") is None:
        key_hash = "md5"
    ws = _weights(spec, n)
    total = sum(ws)
    entries = tuple(
        NodeEntry(node_name(x.host, x.port), weighted_points(ws[i], total, n, libmemcached=True), i)
        for i, x in enumerate(nodes)
    )
    return Description("ketama", entries, hash=key_hash, points="md5x4", prefix=prefix)


def _weights(spec: PlacementSpec, n: int) -> list[int]:
    """`weights=W1:W2:...`, one positive integer per destination in --target's order (default 1 each);
    only weighted ketama counts them, so they are refused elsewhere rather than silently ignored."""
    text = spec.option("weights")
    if text is None:
        return [1] * n
    weighted = spec.option("distribution") == "ketama-weighted" or spec.option("weighted") == "true"
    if not weighted:
        what = "distribution=ketama-weighted" if spec.scheme == "libmemcached" else "weighted=true"
        raise PlacementError(f"{spec.scheme} weights count only with {what}")
    parts = text.split(":")
    if len(parts) != n or not all(p.isdigit() and 0 < int(p) < 1 << 20 for p in parts):
        raise PlacementError(
            f"{spec.scheme} weights={text!r}: give {n} positive integers separated by ':', "
            "one per destination"
        )
    return [int(p) for p in parts]


def spymemcached_node_key(node: Node, fmt: str) -> str:
    """spymemcached's KetamaNodeKeyFormatter: SPYMEMCACHED = the socket address's text, `host/ip:port`
    (`ip:port` for an address given as an IP literal); LIBMEMCACHED = the host name, `:port` unless 11211."""
    if fmt == "libmemcached":
        return node_name(node.host, node.port)
    try:
        ipaddress.ip_address(node.host)
        return f"{node.host}:{node.port}"
    except ValueError:
        pass
    if node.ip is None:
        try:
            node = resolve(node)
        except ValueError as e:
            raise PlacementError(f"spymemcached: {e}") from e
    return f"{node.host}/{node.ip}:{node.port}"


def _spymemcached(spec: PlacementSpec, nodes: Sequence[Node]) -> Description:
    """spymemcached's KetamaNodeLocator: md5 of "<nodekey>-<i>", 4 points per digest, reps points per
    node (weighted: the float32-scaled count, as twemproxy's), a later node wins a shared point."""
    fmt = str(spec.option("format", "spymemcached"))
    reps = int(str(spec.option("reps", "160")))
    n = len(nodes)
    ws = _weights(spec, n)
    total = sum(ws)
    weighted = spec.option("weighted") == "true"
    entries = tuple(
        NodeEntry(
            spymemcached_node_key(x, fmt), weighted_points(ws[i], total, n, reps) if weighted else reps, i
        )
        for i, x in enumerate(nodes)
    )
    if len({e.name for e in entries}) != len(entries):
        raise PlacementError(f"spymemcached: node keys collide ({[e.name for e in entries]})")
    return md5_ketama([e.name for e in entries], [e.count for e in entries])


def md5_ketama(names: Sequence[str], counts: Sequence[int], delimiter: bytes = b"") -> Description:
    """spymemcached's ketama (EVCache's ring): md5 of "<name>-<i>", 4 points per digest, `counts[i]`
    points for node i, a later node wins a shared point (TreeMap.put), the key hashed with md5 (its
    part before `delimiter`, when given)."""
    entries = tuple(NodeEntry(n, c, i) for i, (n, c) in enumerate(zip(names, counts, strict=True)))
    return Description("ketama", entries, hash="md5", points="md5x4", collision="last", delimiter=delimiter)
