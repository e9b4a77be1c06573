"""The populator's look at its destinations between files: who each one is (a memcached that restarted
came back empty) and how many items it evicted since the populate began (a destination too small
for the data drops items)."""

from __future__ import annotations

from dataclasses import dataclass, field

from cachewarm.datapath.ketama import Node
from cachewarm.datapath.meta import DestinationUnavailable, MetaConnection, retry_while_unavailable
from cachewarm.datapath.populate.config import PopulateError


@dataclass
class DestinationProbe:
    nodes: list[Node]
    # How long a destination may refuse connections before the populator gives up.
    timeout: float
    # Per address: (pid, evictions) when first seen with that pid.
    _evictions_at_start: dict[str, tuple[int, int]] = field(default_factory=dict)
    _evictions: dict[str, int] = field(default_factory=dict)

    @property
    def evictions(self) -> int:
        """Items the destinations evicted since the first probe."""
        return sum(self._evictions.values())

    def probe(self) -> dict[str, tuple[int, int]]:
        """Connect to each destination (with backoff): its identity (pid, start time) by address.
        Raises PopulateError when one stays unavailable for `timeout`."""
        seen: dict[str, tuple[int, int]] = {}
        for n in self.nodes:
            try:
                for attempt in retry_while_unavailable(self.timeout):
                    with attempt:
                        c = MetaConnection(n.host, n.port, 10.0)
                        try:
                            ident = c.connect()
                            evictions = int(c.stats().get("evictions", "0"))
                        finally:
                            c.close()
            except DestinationUnavailable as e:
                raise PopulateError(f"destination {n.address} unavailable for {self.timeout:g}s: {e}") from e
            seen[n.address] = (ident.pid, ident.started)
            # Evictions while we write mean the destination is too small: items were dropped.
            first = self._evictions_at_start.setdefault(n.address, (ident.pid, evictions))
            if first[0] == ident.pid:
                self._evictions[n.address] = evictions - first[1]
            else:
                self._evictions_at_start[n.address] = (ident.pid, 0)
                self._evictions[n.address] = evictions
        return seen
