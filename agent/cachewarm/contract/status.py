"""The status object: what an agent reports about one node, and where it lives in S3.

`s3://<status-bucket>/<status-prefix>/<warm-id>/<role>/<node-id>.json`, role `dump` | `populate`,
node id = the source instance id for both roles. Written by the agents
(`cachewarm.node_agent.status`), read by the controller (`cachewarm_controller.store`) and the
operator CLI (`cachewarm status|watch`). Meaning of each field: docs/status-objects.md.
The controller keeps its plan beside them at `<prefix>/<warm-id>/controller/plan.json`; the verify
agent writes `<prefix>/<warm-id>/verify/<node-id>.json` (`VerifyResult`); the claim that makes one
execution the owner of a warm id is `<prefix>/_claims/<warm-id>.json` (`_` is not allowed in a warm
id, so no warm's prefix holds it; it outlives the warm's teardown so that a duplicate start of the
same warm id ends as a duplicate until the bucket's lifecycle expires it).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, cast

Role = Literal["dump", "populate"]
State = Literal["running", "done", "failed"]
ROLES: tuple[Role, ...] = ("dump", "populate")
STATES: tuple[State, ...] = ("running", "done", "failed")
# Errors are for humans and the Step Functions history; keep them inside the state's payload budget.
MAX_ERROR_CHARS = 2000


class StatusFormatError(ValueError):
    """A status object that is not what an agent writes (the reader treats it as no heartbeat)."""


@dataclass(frozen=True)
class Progress:
    """Dump: keys listed, items/bytes/files published. Populate: items/bytes applied, files consumed."""

    items: int = 0
    bytes: int = 0
    files: int = 0
    keys_listed: int = 0
    # Dump only (the dumper's progress line): items/s over its last interval, its pace limit now
    # (0 = unlimited), and whether its adaptive guard is backing off to spare the source's clients.
    items_per_s: int = 0
    limit_items_per_s: int = 0
    backing_off: bool = False

    @staticmethod
    def from_json(body: Any) -> Progress:
        p = body if isinstance(body, dict) else {}
        return Progress(
            items=int(p.get("items", 0)),
            bytes=int(p.get("bytes", 0)),
            files=int(p.get("files", 0)),
            keys_listed=int(p.get("keys_listed", 0)),
            items_per_s=int(p.get("items_per_s", 0)),
            limit_items_per_s=int(p.get("limit_items_per_s", 0)),
            backing_off=bool(p.get("backing_off", False)),
        )


def _json_object(body: Any) -> dict[str, Any]:
    """A status body (bytes, text or already parsed) as a JSON object; StatusFormatError otherwise."""
    if isinstance(body, (bytes, str)):
        try:
            body = json.loads(body)
        except ValueError as e:
            raise StatusFormatError(f"not JSON: {e}") from None
    if not isinstance(body, dict):
        raise StatusFormatError(f"not a JSON object: {type(body).__name__}")
    return body


@dataclass(frozen=True)
class NodeStatus:
    warm_id: str
    node_id: str
    role: Role
    state: State
    heartbeat_ms: int
    progress: Progress = field(default_factory=Progress)
    error: str | None = None
    attempt: int = 1

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @staticmethod
    def from_json(body: Any) -> NodeStatus:
        """From the parsed JSON object; StatusFormatError names what is wrong."""
        body = _json_object(body)
        try:
            state = str(body["state"])
            role = str(body["role"])
            if state not in STATES:
                raise StatusFormatError(f"unknown state {state!r}")
            if role not in ROLES:
                raise StatusFormatError(f"unknown role {role!r}")
            return NodeStatus(
                # Older agents did not write warm_id; the key it is stored under names the warm anyway.
                warm_id=str(body.get("warm_id", "")),
                node_id=str(body["node_id"]),
                role=cast(Role, role),
                state=cast(State, state),
                heartbeat_ms=int(body["heartbeat_ms"]),
                progress=Progress.from_json(body.get("progress")),
                error=body.get("error"),
                attempt=int(body.get("attempt", 0)),
            )
        except KeyError as e:
            raise StatusFormatError(f"missing field {e.args[0]!r}") from None
        except (TypeError, ValueError) as e:
            if isinstance(e, StatusFormatError):
                raise
            raise StatusFormatError(f"bad field value: {e}") from None


# ---- the S3 layout ------------------------------------------------------------------------------


def warm_prefix(prefix: str, warm_id: str) -> str:
    """Everything of one warm (teardown deletes it): `<prefix>/<warm-id>/`."""
    return f"{prefix.strip('/')}/{warm_id}/"


def role_prefix(prefix: str, warm_id: str, role: Role) -> str:
    return f"{warm_prefix(prefix, warm_id)}{role}/"


def status_key(prefix: str, warm_id: str, role: Role, node_id: str) -> str:
    return f"{role_prefix(prefix, warm_id, role)}{node_id}.json"


def plan_key(prefix: str, warm_id: str) -> str:
    return f"{warm_prefix(prefix, warm_id)}controller/plan.json"


def verify_key(prefix: str, warm_id: str, node_id: str) -> str:
    """The verify agent's result for one source node."""
    return f"{warm_prefix(prefix, warm_id)}verify/{node_id}.json"


def claim_key(prefix: str, warm_id: str) -> str:
    """The warm id's claim (written once, with S3's If-None-Match: *)."""
    return f"{prefix.strip('/')}/_claims/{warm_id}.json"


@dataclass(frozen=True)
class VerifyResult:
    """What `cachewarm agent verify` found comparing a sample of one source node's keys with the
    destination (the fields of `cachewarm verify --json`), or why it could not compare (`error`)."""

    warm_id: str
    node_id: str
    finished_ms: int
    source_keys: int = 0
    checked: int = 0
    gone_from_source: int = 0
    missing: int = 0
    value_mismatch: int = 0
    flags_mismatch: int = 0
    ttl_mismatch: int = 0
    examples: tuple[str, ...] = ()
    error: str | None = None

    @property
    def differences(self) -> int:
        return self.missing + self.value_mismatch + self.flags_mismatch + self.ttl_mismatch

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "examples": list(self.examples)}, separators=(",", ":"))

    @staticmethod
    def from_json(body: Any) -> VerifyResult:
        body = _json_object(body)
        try:
            counts = {
                k: int(body.get(k, 0))
                for k in (
                    "source_keys",
                    "checked",
                    "gone_from_source",
                    "missing",
                    "value_mismatch",
                    "flags_mismatch",
                    "ttl_mismatch",
                )
            }
            error = body.get("error")
            return VerifyResult(
                warm_id=str(body.get("warm_id", "")),
                node_id=str(body["node_id"]),
                finished_ms=int(body["finished_ms"]),
                examples=tuple(str(e) for e in body.get("examples", []) or [])[:10],
                error=None if error is None else str(error)[:MAX_ERROR_CHARS],
                **counts,
            )
        except KeyError as e:
            raise StatusFormatError(f"missing field {e.args[0]!r}") from None
        except (TypeError, ValueError) as e:
            raise StatusFormatError(f"bad field value: {e}") from None


@dataclass(frozen=True)
class StatusLocation:
    """Where one agent's status object lives."""

    bucket: str
    prefix: str
    warm_id: str
    role: Role
    node_id: str

    @property
    def key(self) -> str:
        return status_key(self.prefix, self.warm_id, self.role, self.node_id)
