"""What the populator remembers between runs, in a state file outside the (read-only) volume: the
files it consumed and the identity of each destination they were written to."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cachewarm.datapath.populate.config import PopulateError


@dataclass
class ConsumedFile:
    records: int
    stored: int
    present: int
    expired: int
    bytes: int


@dataclass
class PopulateState:
    consumed: dict[str, ConsumedFile] = field(default_factory=dict)
    identities: dict[str, tuple[int, int]] = field(default_factory=dict)
    restarts_detected: int = 0
    # The destinations the consumed files were written to: the state means nothing for others.
    destinations: list[str] = field(default_factory=list)

    @staticmethod
    def load(path: Path) -> PopulateState:
        if not path.exists():
            return PopulateState()
        try:
            obj = json.loads(path.read_text())
            return PopulateState(
                consumed={k: ConsumedFile(**v) for k, v in obj["consumed"].items()},
                identities={k: (int(v[0]), int(v[1])) for k, v in obj.get("identities", {}).items()},
                restarts_detected=int(obj.get("restarts_detected", 0)),
                destinations=[str(d) for d in obj.get("destinations", [])],
            )
        except (ValueError, KeyError, TypeError) as e:
            raise PopulateError(f"state file {path} is unreadable ({e}); remove it to start over") from e

    def save(self, path: Path) -> None:
        """Atomic replace: a crash leaves the old or the new state, never half of one."""
        path.parent.mkdir(parents=True, exist_ok=True)
        body = json.dumps(
            {
                "version": 1,
                "consumed": {k: asdict(v) for k, v in self.consumed.items()},
                "identities": {k: list(v) for k, v in self.identities.items()},
                "restarts_detected": self.restarts_detected,
                "destinations": self.destinations,
            }
        )
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
