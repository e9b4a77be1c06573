"""The status object: what an agent reports about one node, and where it lives in S3.

`s3://<status-bucket>/<status-prefix>/<warm-id>/<role>/<node-id>/<writer>.json`, role `dump` |
`populate`, node id = the source instance id for both roles, writer = the ARN of the instance that
wrote it (`arn:aws:ec2:<region>:<account>:instance/<id>`): each agent may write only objects that end
in its own instance's ARN (IAM's `${ec2:SourceInstanceARN}`), and the controller reads a node's object
only from the writer it expects (the node itself for `dump`, its populator for `populate` and
`verify`). Written by the agents (`cachewarm.node_agent.status`), read by the controller
(`cachewarm_controller.store`) and the operator CLI (`cachewarm status|watch`). Meaning of each
field: docs/status-objects.md. The verify agent writes `<prefix>/<warm-id>/verify/<node-id>/<writer>.json`
(`VerifyResult`).

The controller's own state lives apart, under `_controller/<prefix>/` (no status prefix starts with
`_`, so no agent grant reaches it; the bucket policy lets only the controller write there): its plan,
survey and teardown memory at `_controller/<prefix>/<warm-id>/`, and the claim that makes one
execution the owner of a warm id at `_controller/<prefix>/_claims/<warm-id>.json` (`_` is not allowed
in a warm id; the claim outlives the warm's teardown so that a duplicate start of the same warm id
ends as a duplicate until the bucket's lifecycle expires it).
"""

from __future__ import annotations

import json
import re
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
    # Dump only, what the source's clients feel (the adaptive guard's probes, 0 = no guard): the p99
    # over the last second (when done: the median of the dump's 1-s windows' p99s), the same with no
    # dump, and the time the guard spent backed off.
    probe_p99_us: int = 0
    probe_baseline_us: int = 0
    backed_off_ms: int = 0

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
            probe_p99_us=int(p.get("probe_p99_us", 0)),
            probe_baseline_us=int(p.get("probe_baseline_us", 0)),
            backed_off_ms=int(p.get("backed_off_ms", 0)),
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


# The controller's state, apart from everything an agent may write (see the module's docstring).
CONTROLLER_ROOT = "_controller"
_INSTANCE_ARN = re.compile(r"^arn:aws[a-z-]*:ec2:[a-z0-9-]{1,30}:[0-9]{12}:instance/(i-[0-9a-f]{8,17})$")


def partition_of(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def instance_arn(region: str, account: str, instance_id: str) -> str:
    """The ARN IAM puts in `ec2:SourceInstanceARN` for requests signed with that instance's role."""
    return f"arn:{partition_of(region)}:ec2:{region}:{account}:instance/{instance_id}"


def writer_account(arn: str) -> str | None:
    """The account of a writer ARN (the one that owns the buckets the agent writes to); None for
    anything that is no EC2 instance ARN."""
    return arn.split(":")[4] if _INSTANCE_ARN.fullmatch(arn) else None


def writer_instance_id(arn: str) -> str | None:
    """The instance id of a writer ARN; None for anything that is no EC2 instance ARN."""
    m = _INSTANCE_ARN.fullmatch(arn)
    return m.group(1) if m else None


def warm_prefix(prefix: str, warm_id: str) -> str:
    """Everything the agents write for one warm (teardown deletes it): `<prefix>/<warm-id>/`."""
    return f"{prefix.strip('/')}/{warm_id}/"


def role_prefix(prefix: str, warm_id: str, role: Role) -> str:
    return f"{warm_prefix(prefix, warm_id)}{role}/"


def status_key(prefix: str, warm_id: str, role: Role, node_id: str, writer: str) -> str:
    """`writer`: the writing instance's ARN (`instance_arn`)."""
    return f"{role_prefix(prefix, warm_id, role)}{node_id}/{writer}.json"


def verify_root(prefix: str, warm_id: str) -> str:
    return f"{warm_prefix(prefix, warm_id)}verify/"


def verify_key(prefix: str, warm_id: str, node_id: str, writer: str) -> str:
    """The verify agent's result for one source node, written by the populator (ARN `writer`)."""
    return f"{verify_root(prefix, warm_id)}{node_id}/{writer}.json"


def parse_agent_key(key: str, under: str) -> tuple[str, str] | None:
    """(node id, writer's instance id) of an agent's object listed under `under` (a role prefix or
    `verify/`), None when the key is not `<under><node-id>/<instance ARN>.json`."""
    if not key.startswith(under) or not key.endswith(".json"):
        return None
    node_id, _, arn = key[len(under) : -len(".json")].partition("/")
    writer = writer_instance_id(arn)
    return (node_id, writer) if node_id and writer else None


def controller_prefix(prefix: str, warm_id: str) -> str:
    """The controller's state of one warm (teardown deletes it): `_controller/<prefix>/<warm-id>/`."""
    return f"{CONTROLLER_ROOT}/{prefix.strip('/')}/{warm_id}/"


def plan_key(prefix: str, warm_id: str) -> str:
    return f"{controller_prefix(prefix, warm_id)}plan.json"


def claim_key(prefix: str, warm_id: str) -> str:
    """The warm id's claim (written once, with S3's If-None-Match: *)."""
    return f"{CONTROLLER_ROOT}/{prefix.strip('/')}/_claims/{warm_id}.json"


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
    # The writing instance's ARN (`instance_arn`): IAM lets an agent write only objects ending in it.
    writer: str

    @property
    def key(self) -> str:
        return status_key(self.prefix, self.warm_id, self.role, self.node_id, self.writer)
