"""A placement as hashkit describes it (hashkit/placement.h) and the `Placer` that routes by it: what
every scheme (spec.py, twemproxy.py, mcrouter.py) resolves a destination list to. A leaf: the scheme
modules import it, it imports none of them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cachewarm.datapath import _speedups  # required (setup.py): hashkit
from cachewarm.datapath.nodes import Node


class PlacementError(ValueError):
    """A scheme that cannot be used as given (named in the message); nothing has been sent."""


@dataclass(frozen=True)
class NodeEntry:
    """One node of a description: the name its points hash, its count (ketama points, modula slots,
    else 1) and the destination its keys go to."""

    name: str
    count: int
    dest: int


@dataclass(frozen=True)
class Description:
    dist: str
    nodes: tuple[NodeEntry, ...]
    hash: str | None = None
    points: str | None = None  # ketama: "md5x4" | "hash"
    collision: str = "first"
    prefix: bytes = b""
    hash_stop: bool = False
    tag: bytes = b""
    salt: bytes = b""
    delimiter: bytes = b""  # EVCache's hash.on.partial.key
    keyform: str | None = None
    weights: tuple[float, ...] = ()  # wch3

    def text(self) -> str:
        lines = [f"dist {self.dist}"]
        if self.hash:
            lines.append(f"hash {self.hash}")
        if self.points:
            lines.append(f"points {self.points}")
        if self.dist == "ketama":
            lines.append(f"collision {self.collision}")
        if self.keyform:
            lines.append(f"keyform {self.keyform}")
        if self.prefix:
            lines.append(f"prefix {self.prefix.hex()}")
        if self.hash_stop:
            lines.append("hash-stop")
        if self.tag:
            lines.append(f"tag {self.tag.hex()}")
        if self.salt:
            lines.append(f"salt {self.salt.hex()}")
        if self.delimiter:
            lines.append(f"delimiter {self.delimiter.hex()}")
        if self.weights:  # repr: the shortest text that reads back as the same double
            lines.append("weights " + ",".join(repr(float(w)) for w in self.weights))
        lines += [f"node {n.name.encode().hex()} {n.count} {n.dest}" for n in self.nodes]
        return "\n".join(lines) + "\n"


def weighted_points(weight: int, total: int, n: int, base: int = 160, libmemcached: bool = False) -> int:
    """Weighted ketama's points for one server (float32 arithmetic, as twemproxy or libmemcached)."""
    return int(_speedups.ketama_weighted_points(weight, total, n, base, libmemcached))


def node_name(host: str, port: int) -> str:
    """libmemcached's and twemproxy's name for an unnamed server: the host alone on 11211."""
    return host if port == 11211 else f"{host}:{port}"


@dataclass
class Placer:
    """A scheme resolved for a destination list: `index_for(key)` is the index in `nodes` of the
    node the client looks on."""

    nodes: Sequence[Node]
    scheme: str
    description: Description
    _c: object = field(init=False, repr=False)
    _place: Callable[[bytes], int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        try:
            self._c = _speedups.Placement(self.description.text().encode())
        except ValueError as e:
            raise PlacementError(f"{self.scheme}: {e}") from e
        self._place = self._c.place  # type: ignore[attr-defined]

    @property
    def c_placement(self) -> object:
        """The extension's Placement (plan_v2 routes with it)."""
        return self._c

    def index_for(self, key: bytes) -> int:
        try:
            return self._place(key)
        except ValueError as e:
            raise PlacementError(f"{self.scheme}: key {key[:60]!r}: {e}") from e

    def node_for(self, key: bytes) -> Node:
        return self.nodes[self.index_for(key)]

    def describe(self) -> dict[str, object]:
        return {"scheme": self.scheme, "description": self.description.text()}
