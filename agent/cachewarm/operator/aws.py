"""Reading a warm from AWS: its Step Functions execution and its agents' status objects; starting one.

Plain functions over boto3 clients passed in (tests pass moto's). The status objects' format and S3
layout are `cachewarm.contract.status`'s; the bucket is named by the state machine's tag.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from cachewarm.contract import tags, warm_ids
from cachewarm.contract.inputs import DEFAULT_STATUS_PREFIX
from cachewarm.contract.status import (
    ROLES,
    NodeStatus,
    StatusFormatError,
    instance_arn,
    status_key,
    warm_prefix,
)
from cachewarm.exitcodes import CliError, ExitCode
from cachewarm.operator.view import NodeView, WarmView

# Seconds to connect to an AWS endpoint, seconds to wait for an answer, and attempts in all: an
# unreachable endpoint is reported in seconds (botocore's defaults are 60 s, 60 s and 5 legacy
# attempts: minutes).
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 30
MAX_ATTEMPTS = 3


class OperatorError(CliError):
    """Shown as one `error: …` line, exit code 1 unless given another."""


# arn:<partition>:states:<region>:<account>:execution|stateMachine:<machine>[:<execution>]
_ARN = re.compile(r"^arn:aws[a-z-]*:states:([a-z0-9-]+):[0-9]{12}:(execution|stateMachine):[^:]+(:[^:]+)?$")


def region_of(arn: str | None) -> str | None:
    """The region a Step Functions ARN names (None for anything else, e.g. a warm id)."""
    m = _ARN.fullmatch(arn or "")
    return m.group(1) if m else None


def pick_region(explicit: str | None, *arns: str | None) -> str | None:
    """--region, else the region in an ARN the user gave, else AWS_REGION (which the SDK itself does
    not read: it reads AWS_DEFAULT_REGION and the profile's), else None (the SDK's own)."""
    return (
        explicit
        or next((r for a in arns if (r := region_of(a))), None)
        or os.environ.get("AWS_REGION")
        or None
    )


@dataclass
class Clients:
    """Lazily created boto3 clients (no client at import time; tests inject their own)."""

    region: str | None = None
    _cache: dict[str, Any] = field(default_factory=dict)
    _session: Any = None

    def get(self, service: str) -> Any:
        if service not in self._cache:
            import boto3
            from botocore.config import Config

            config = Config(
                connect_timeout=CONNECT_TIMEOUT_S,
                read_timeout=READ_TIMEOUT_S,
                retries={"max_attempts": MAX_ATTEMPTS, "mode": "standard"},
            )
            if self._session is None:  # one session of our own (boto3's default one is module state)
                self._session = boto3.session.Session()
            self._cache[service] = self._session.client(service, region_name=self.region, config=config)
        return self._cache[service]


def input_warm_id(doc: object, autoscaling: Any | None) -> str | None:
    """The execution's warm id: its input's, else (an Auto Scaling launch names only the destination
    group) the one ValidateInput derived from the group (contract.warm_ids)."""
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("warm_id"), str) and doc["warm_id"]:
        return str(doc["warm_id"])
    dest = doc.get("destination")
    asg = dest.get("asg_name") if isinstance(dest, dict) else None
    if not isinstance(asg, str) or not asg or autoscaling is None:
        return None
    try:
        warm_id = warm_ids.warm_id_of_group(autoscaling, asg)
    except ClientError as e:
        raise OperatorError(f"cannot describe the destination's Auto Scaling group {asg!r}: {e}") from e
    if warm_id is None:
        raise OperatorError(
            f"the destination's Auto Scaling group {asg!r} no longer exists: the warm id ValidateInput "
            "derived from it cannot be derived again (see the execution's ValidateInput output)"
        )
    return warm_id


def status_location(
    sfn: Any, execution: dict[str, Any], bucket: str | None, autoscaling: Any | None = None
) -> tuple[str, str, str]:
    """(bucket, prefix, warm_id) of an execution's status objects."""
    try:
        doc = json.loads(execution.get("input") or "{}")
    except ValueError:
        doc = {}
    warm_id = input_warm_id(doc, autoscaling)
    if not warm_id:
        raise OperatorError(
            f"execution {execution['executionArn']} has no warm_id in its input (nor a destination "
            "Auto Scaling group to derive it from)"
        )
    prefix = doc.get("status_prefix") or DEFAULT_STATUS_PREFIX
    if bucket is None:
        found = sfn.list_tags_for_resource(resourceArn=execution["stateMachineArn"]).get("tags", [])
        bucket = next((t["value"] for t in found if t["key"] == tags.STATUS_BUCKET), None)
        if bucket is None:
            raise OperatorError(
                f"the state machine has no {tags.STATUS_BUCKET} tag; pass --status-bucket "
                "(the stack output StatusBucketName)"
            )
    return bucket, prefix, str(warm_id)


# (role, node id) -> the ARN of the instance whose status object counts.
Writers = dict[tuple[str, str], str]


def plan_writers(sfn: Any, execution_arn: str) -> Writers | None:
    """Whose status objects count, from the newest plan in the execution's own history (the state
    data `$.plan` PlanWarm made): a source node writes its `dump` object, its populator the `populate`
    one — as the controller reads them. None before the plan exists. Only the execution's history is
    trusted here: anyone who can write under the status prefix can name any node in an object's key or
    body."""
    parts = execution_arn.split(":")
    if len(parts) < 5:
        return None
    region, account = parts[3], parts[4]
    kwargs: dict[str, Any] = {"executionArn": execution_arn, "reverseOrder": True, "maxResults": 100}
    while True:
        resp = sfn.get_execution_history(**kwargs)
        # Newest first within a page (some emulators ignore reverseOrder: sort by the event id).
        for ev in sorted(resp.get("events", []), key=lambda e: int(e.get("id", 0)), reverse=True):
            details = ev.get("stateExitedEventDetails") or ev.get("executionSucceededEventDetails")
            if not details or (details.get("outputDetails") or {}).get("truncated"):
                continue
            plan = _plan_of(details.get("output"))
            if plan is not None:
                return _writers(plan, region, account)
        token = resp.get("nextToken")
        if not token:
            return None
        kwargs["nextToken"] = token


def _plan_of(output: object) -> dict[str, Any] | None:
    try:
        doc = json.loads(output) if isinstance(output, str) else None
    except ValueError:
        return None
    plan = doc.get("plan") if isinstance(doc, dict) else None
    return plan if isinstance(plan, dict) and isinstance(plan.get("nodes"), list) else None


def _writers(plan: dict[str, Any], region: str, account: str) -> Writers:
    populator_region = plan.get("populator_region") or region
    out: Writers = {}
    for n in plan["nodes"]:
        if not isinstance(n, dict) or not isinstance(n.get("node_id"), str):
            continue
        out[("dump", n["node_id"])] = instance_arn(region, account, n["node_id"])
        if isinstance(n.get("populator_id"), str) and n["populator_id"]:
            out[("populate", n["node_id"])] = instance_arn(populator_region, account, n["populator_id"])
    return out


def read_agent_statuses(
    s3: Any, bucket: str, prefix: str, warm_id: str, writers: Writers
) -> tuple[list[NodeView], list[str]]:
    """Every planned node's status objects, each read by its exact key (its expected writer's ARN):
    nothing is listed, so objects other principals put under the prefix are neither read nor counted.
    Also the keys of expected objects that are no status object of that node and role."""
    by_node: dict[str, dict[str, NodeStatus]] = {node: {} for _, node in writers}
    unreadable: list[str] = []
    for (role, node), arn in sorted(writers.items()):
        if role not in ROLES:
            continue
        key = status_key(prefix, warm_id, role, node, arn)
        try:
            body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                continue
            raise
        try:
            st = NodeStatus.from_json(body)
        except StatusFormatError:
            unreadable.append(key)
            continue
        if (st.role, st.node_id) != (role, node):
            unreadable.append(key)
            continue
        by_node[node][role] = st
    nodes = [NodeView(n, roles.get("dump"), roles.get("populate")) for n, roles in sorted(by_node.items())]
    return nodes, unreadable


def recent_events(sfn: Any, execution_arn: str, limit: int = 10) -> tuple[list[str], str | None]:
    """The last states entered (newest first) and the failure, if any, from the execution history."""
    resp = sfn.get_execution_history(executionArn=execution_arn, reverseOrder=True, maxResults=100)
    lines: list[str] = []
    error = None
    for ev in resp.get("events", []):
        kind = ev["type"]
        if kind.endswith("StateEntered"):
            lines.append(f"{ev['timestamp']:%H:%M:%S} entered {ev['stateEnteredEventDetails']['name']}")
        elif kind in ("ExecutionFailed", "ExecutionTimedOut", "ExecutionAborted") or kind.endswith("Failed"):
            details = next((v for k, v in ev.items() if k.endswith("EventDetails")), {}) or {}
            msg = " ".join(str(details.get(k, "")) for k in ("error", "cause")).strip()
            lines.append(f"{ev['timestamp']:%H:%M:%S} {kind} {msg[:300]}")
            if error is None and kind.startswith("Execution"):
                error = msg or kind
        if len(lines) >= limit:
            break
    return lines, error


def load_view(
    sfn: Any, s3: Any, execution_arn: str, bucket: str | None = None, autoscaling: Any | None = None
) -> WarmView:
    try:
        ex = sfn.describe_execution(executionArn=execution_arn)
    except ClientError as e:
        raise OperatorError(f"cannot describe {execution_arn}: {e}") from e
    bucket_name, prefix, warm_id = status_location(sfn, ex, bucket, autoscaling)
    writers = plan_writers(sfn, execution_arn)
    try:
        nodes, unreadable = read_agent_statuses(s3, bucket_name, prefix, warm_id, writers or {})
    except ClientError as e:
        raise OperatorError(f"cannot read s3://{bucket_name}/{warm_prefix(prefix, warm_id)}: {e}") from e
    events, error = recent_events(sfn, execution_arn)
    if ex.get("error") or ex.get("cause"):
        error = f"{ex.get('error', '')} {ex.get('cause', '')}".strip()
    return WarmView(
        execution_arn=execution_arn,
        status=ex["status"],
        warm_id=warm_id,
        started=ex.get("startDate"),
        stopped=ex.get("stopDate"),
        nodes=nodes,
        events=events,
        error=error,
        unreadable=unreadable,
        planned=writers is not None,
    )


def execution_arn(state_machine_arn: str, name: str) -> str:
    return state_machine_arn.replace(":stateMachine:", ":execution:", 1) + f":{name}"


def _code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def warm_machines(sfn: Any, state_machine: str | None) -> list[str]:
    """The warm state machines to look in: --state-machine, else every one in the region tagged
    with the status bucket (the stack's warm machine carries it; the teardown machine does not)."""
    if state_machine:
        return [state_machine]
    found = []
    for page in sfn.get_paginator("list_state_machines").paginate():
        for m in page.get("stateMachines", []):
            arn = m["stateMachineArn"]
            if any(
                t["key"] == tags.STATUS_BUCKET
                for t in sfn.list_tags_for_resource(resourceArn=arn).get("tags", [])
            ):
                found.append(str(arn))
    return found


def find_execution(sfn: Any, warm: str, state_machine: str | None) -> str:
    """The execution ARN of WARM: an execution ARN as given, else the execution named after the warm
    id (`cachewarm start` names it so), else — an event-started warm, named by EventBridge — the most
    recent of the last 100 executions whose input carries that warm id."""
    if warm.startswith("arn:"):
        return warm
    machines = warm_machines(sfn, state_machine)
    if not machines:
        raise OperatorError(
            f"no cachewarm state machine in this region (none tagged {tags.STATUS_BUCKET}): pass "
            "--state-machine (the stack output StateMachineArn), --region, or the execution ARN",
            ExitCode.USAGE,
        )
    for m in machines:
        try:
            return str(sfn.describe_execution(executionArn=execution_arn(m, warm))["executionArn"])
        except ClientError as e:
            if _code(e) != "ExecutionDoesNotExist":
                raise
    for m in machines:
        for ex in sfn.list_executions(stateMachineArn=m, maxResults=100).get("executions", []):
            if warm_id_of(sfn, ex["executionArn"]) == warm:
                return str(ex["executionArn"])
    raise OperatorError(
        f"no warm {warm!r} in {', '.join(machines)} (`cachewarm list` shows the warms)", ExitCode.USAGE
    )


def warm_id_of(sfn: Any, arn: str) -> str | None:
    """The warm id in an execution's input (None: an Auto Scaling launch's input names none)."""
    try:
        doc = json.loads(sfn.describe_execution(executionArn=arn).get("input") or "{}")
    except ValueError:
        return None
    w = doc.get("warm_id") if isinstance(doc, dict) else None
    return w if isinstance(w, str) else None


@dataclass(frozen=True)
class WarmRow:
    """One line of `cachewarm list`."""

    warm_id: str | None
    status: str
    started: str | None
    stopped: str | None
    execution_arn: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "warm_id": self.warm_id,
            "status": self.status,
            "started": self.started,
            "stopped": self.stopped,
            "execution_arn": self.execution_arn,
        }


def list_warms(sfn: Any, machines: list[str], status: str | None, limit: int) -> list[WarmRow]:
    """The most recent `limit` executions of each machine (newest first), with their warm ids."""
    rows = []
    for m in machines:
        kw: dict[str, Any] = {"stateMachineArn": m, "maxResults": limit}
        if status:
            kw["statusFilter"] = status
        for ex in sfn.list_executions(**kw).get("executions", [])[:limit]:
            rows.append(
                WarmRow(
                    warm_id=warm_id_of(sfn, ex["executionArn"]),
                    status=str(ex["status"]),
                    started=_iso(ex.get("startDate")),
                    stopped=_iso(ex.get("stopDate")),
                    execution_arn=str(ex["executionArn"]),
                )
            )
    return sorted(rows, key=lambda r: r.started or "", reverse=True)


def _iso(t: Any) -> str | None:
    return t.isoformat(timespec="seconds") if t is not None else None


def stop_warm(sfn: Any, arn: str, cause: str) -> str | None:
    """Stop a running warm; returns None, or the status it already ended with."""
    status = str(sfn.describe_execution(executionArn=arn)["status"])
    if status != "RUNNING":
        return status
    sfn.stop_execution(executionArn=arn, error="cachewarm.Stopped", cause=cause)
    return None


def start_warm(sfn: Any, state_machine_arn: str, doc: dict[str, Any]) -> tuple[str, bool]:
    """Start an execution named after the warm id. Returns (execution ARN, started now?).

    The name makes the start idempotent: starting the same warm twice finds the first execution. A
    warm id whose execution ended without success cannot run again (Step Functions keeps an execution
    name for 90 days): that is an error naming a new warm id to use.
    """
    warm_id = doc.get("warm_id")
    if not isinstance(warm_id, str) or not warm_id:
        raise OperatorError("the input has no warm_id (a string naming this warm)")
    arn = execution_arn(state_machine_arn, warm_id)
    try:
        status = sfn.describe_execution(executionArn=arn)["status"]
        if status not in ("RUNNING", "SUCCEEDED"):
            raise OperatorError(
                f"warm {warm_id} already ran and ended {status} ({arn}); an execution name is never "
                f"reused: start it again under a new warm_id (e.g. {warm_id}-2) — docs/runbook.md"
            )
        return arn, False
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") != "ExecutionDoesNotExist":
            raise OperatorError(f"cannot look up {arn}: {e}") from e
    try:
        resp = sfn.start_execution(stateMachineArn=state_machine_arn, name=warm_id, input=json.dumps(doc))
        return str(resp["executionArn"]), True
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") == "ExecutionAlreadyExists":
            return arn, False  # started by someone else in the meantime
        raise OperatorError(f"cannot start {state_machine_arn}: {e}") from e
