"""What the populator remembers between runs, outside the (read-only) volume: a state file (the files
it consumed, per destination what became of their items, the identity of each destination and the
routing the items were spread with) and a journal of the files it started to send (so a run after a
crash knows which files may already be partly in a destination)."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from cachewarm.datapath.populate.config import PopulateError

STATE_VERSION = 2


@dataclass
class RecheckCounts:
    """What one file's re-check (recheck.py; add mode) found for one destination."""

    # Items looked at on the source.
    rechecked: int = 0
    # Of those, the source no longer held as read (deleted, expired, rewritten, incremented, touched
    # shorter): our copy was stale.
    changed_at_source: int = 0
    # Stale copies deleted from the destination (ours, or a client's op on ours).
    deleted_stale: int = 0
    # The destination held a client's write (made after ours) equal to the source's: kept.
    client_overwrote: int = 0
    # A destination value that kept changing for MAX_ROUNDS looks: left, reported.
    unsettled: int = 0
    # Keys no meta command names: compared by CAS only (their expiry cannot be read).
    cas_only: int = 0

    def add(self, other: RecheckCounts) -> None:
        """Adds every count of `other` (of this class) to this one's."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass
class _Written:
    """What became of one file's items that route to one destination as they were written."""

    stored: int = 0
    # NS: the key held a value we did not write (live traffic); add mode kept it.
    present: int = 0
    # NS on a resend: the value there is the one we are sending (our own earlier attempt stored it).
    resent: int = 0
    expired: int = 0
    # Too large for the destination's item size: never sent (named in the oversize report).
    oversize: int = 0
    # Of stored + present + resent: written with the binary protocol (keys no meta command can name).
    binary: int = 0


# The bases in this order keep the written counts first in the state file.
@dataclass
class NodeCounts(RecheckCounts, _Written):
    """What became of one file's items that route to one destination: written, then re-checked."""

    @property
    def items(self) -> int:
        return self.stored + self.present + self.resent + self.expired + self.oversize

    @property
    def written(self) -> int:
        return self.stored + self.present + self.resent


@dataclass
class ConsumedFile:
    records: int
    bytes: int
    # Per destination address; every destination the file's items route to has an entry.
    nodes: dict[str, NodeCounts] = field(default_factory=dict)

    def total(self) -> NodeCounts:
        t = NodeCounts()
        for c in self.nodes.values():
            t.add(c)
        return t


@dataclass
class PopulateState:
    consumed: dict[str, ConsumedFile] = field(default_factory=dict)
    # Consumed files whose items of these destinations must be written again (they restarted empty).
    redo: dict[str, list[str]] = field(default_factory=dict)
    identities: dict[str, tuple[int, int]] = field(default_factory=dict)
    restarts_detected: int = 0
    # Per destination: (pid, its evictions counter) when first seen with that pid, so a resumed run
    # still counts what the destination evicted since the populate began.
    evictions_base: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Where the consumed files' items went (ketama.Routing.describe): the state means nothing for
    # another destination list or another routing.
    routing: dict[str, Any] = field(default_factory=dict)

    def done(self, name: str) -> bool:
        return name in self.consumed and not self.redo.get(name)

    @staticmethod
    def load(path: Path) -> PopulateState:
        if not path.exists():
            return PopulateState()
        try:
            obj = json.loads(path.read_text())
            if obj.get("version") != STATE_VERSION:
                raise PopulateError(
                    f"state file {path} was written by another version of cachewarm (version "
                    f"{obj.get('version')!r}, this one reads {STATE_VERSION}): remove it to start over "
                    "(add mode makes the redo harmless)"
                )
            return PopulateState(
                consumed={
                    k: ConsumedFile(
                        int(v["records"]),
                        int(v["bytes"]),
                        {a: NodeCounts(**c) for a, c in v["nodes"].items()},
                    )
                    for k, v in obj["consumed"].items()
                },
                redo={k: [str(a) for a in v] for k, v in obj.get("redo", {}).items()},
                identities={k: (int(v[0]), int(v[1])) for k, v in obj.get("identities", {}).items()},
                restarts_detected=int(obj.get("restarts_detected", 0)),
                evictions_base={k: (int(v[0]), int(v[1])) for k, v in obj.get("evictions_base", {}).items()},
                routing=dict(obj.get("routing", {})),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise PopulateError(f"state file {path} is unreadable ({e}); remove it to start over") from e

    def save(self, path: Path) -> None:
        """Atomic replace: a crash leaves the old or the new state, never half of one."""
        body = json.dumps(
            {
                "version": STATE_VERSION,
                "consumed": {k: asdict(v) for k, v in self.consumed.items()},
                "redo": {k: v for k, v in self.redo.items() if v},
                "identities": {k: list(v) for k, v in self.identities.items()},
                "restarts_detected": self.restarts_detected,
                "evictions_base": {k: list(v) for k, v in self.evictions_base.items()},
                "routing": self.routing,
            }
        )
        _replace(path, body)


@dataclass
class StartedJournal:
    """`<state file>.started`: the name of every file handed to a worker, appended and fsynced before
    its first byte is sent. A file named here that the state does not record as done may already be
    partly in a destination: its resend tags every set, so that an `NS` for a value we wrote
    ourselves is not taken for a live write."""

    path: Path
    names: set[str] = field(default_factory=set)

    @staticmethod
    def open(state_file: Path, state: PopulateState) -> StartedJournal:
        j = StartedJournal(state_file.with_name(state_file.name + ".started"))
        with contextlib.suppress(FileNotFoundError):
            j.names = {n for n in j.path.read_text().split("\n") if n}
        # Compact: a file done on every destination needs no mark any more.
        j.names = {n for n in j.names if not state.done(n)}
        _replace(j.path, "".join(f"{n}\n" for n in sorted(j.names)))
        return j

    def add(self, name: str) -> bool:
        """Record `name`; returns whether it was recorded before (it may be partly applied)."""
        return bool(self.add_many([name]))

    def add_many(self, names: list[str]) -> set[str]:
        """Record `names` (one fsync for all); returns those recorded before (maybe partly applied)."""
        before = {n for n in names if n in self.names}
        new = [n for n in names if n not in self.names]
        if new:
            with open(self.path, "a") as f:
                f.write("".join(f"{n}\n" for n in new))
                f.flush()
                os.fsync(f.fileno())
            self.names.update(new)
        return before

    def forget(self, name: str) -> None:
        """The worker sent nothing of `name` (it did not verify yet): its next send is a first one.
        (Only in memory: after a crash the file is tagged once more, which costs reads, not truth.)"""
        self.names.discard(name)


def _replace(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    with contextlib.suppress(OSError):
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
