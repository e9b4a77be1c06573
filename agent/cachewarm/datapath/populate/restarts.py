"""A destination that restarted came back empty. Every outcome (a worker's, the probe's) carries the
identities (pid + start time) of the destinations it wrote to or looked at; one that changed means the
items of every file consumed so far that route to that destination are owed to it again
(`state.redo`), and what an outcome wrote to the server that is gone does not count."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from cachewarm.datapath.meta import ServerIdentity
from cachewarm.datapath.populate.state import PopulateState


@dataclass
class RestartWatch:
    state: PopulateState
    # Called once per restart seen, with the address and the number of files owed to it again.
    on_restart: Callable[[str, int], None]
    # (address, identity) of the servers seen replaced.
    dead: set[tuple[str, tuple[int, int]]] = field(default_factory=set)

    def check(self, seen: dict[str, tuple[int, int]]) -> set[str]:
        """Compare a view of the destinations with ours. Returns the addresses it wrote to a server
        that has since restarted (those items must be sent again)."""
        dead = set()
        state = self.state
        for addr, ident in seen.items():
            if (addr, ident) in self.dead:
                dead.add(addr)
                continue
            base = state.identities.get(addr)
            if base is None:
                state.identities[addr] = ident
            elif not ServerIdentity(*base).same_as(ServerIdentity(*ident)):
                self.dead.add((addr, base))
                state.identities[addr] = ident
                state.restarts_detected += 1
                redo = [n for n, f in state.consumed.items() if addr in f.nodes]
                for n in redo:
                    state.redo[n] = sorted({*state.redo.get(n, []), addr})
                self.on_restart(addr, len(redo))
        return dead
