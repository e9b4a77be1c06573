"""The operator's commands: `cachewarm start`, `cachewarm status`, `cachewarm watch`.

They read what the platform already has: the Step Functions execution (input, status, history) and
the agents' status objects in the status bucket (found from the state machine's
`cachewarm:status-bucket` tag, or `--status-bucket`). Logic is plain functions over boto3 clients
passed in, so tests run them against moto.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from botocore.exceptions import BotoCoreError, ClientError

DEFAULT_PREFIX = "warms"
TERMINAL = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")


class OperatorError(click.ClickException):
    """Shown as `Error: …` with exit code 1."""


# ---- reading the state ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentStatus:
    node_id: str
    role: str
    state: str
    heartbeat_ms: int
    items: int = 0
    bytes: int = 0
    files: int = 0
    keys_listed: int = 0
    error: str | None = None
    attempt: int = 0

    @staticmethod
    def from_json(body: dict[str, Any]) -> AgentStatus:
        p = body.get("progress") or {}
        return AgentStatus(
            node_id=str(body["node_id"]),
            role=str(body["role"]),
            state=str(body["state"]),
            heartbeat_ms=int(body["heartbeat_ms"]),
            items=int(p.get("items", 0)),
            bytes=int(p.get("bytes", 0)),
            files=int(p.get("files", 0)),
            keys_listed=int(p.get("keys_listed", 0)),
            error=body.get("error"),
            attempt=int(body.get("attempt", 0)),
        )


@dataclass(frozen=True)
class NodeView:
    node_id: str
    dump: AgentStatus | None = None
    populate: AgentStatus | None = None

    @property
    def total(self) -> int | None:
        """Items to populate: the dump's count once it is done, else the keys listed so far."""
        if self.dump is None:
            return None
        if self.dump.state == "done":
            return self.dump.items
        return max(self.dump.keys_listed, self.dump.items) or None

    @property
    def populated(self) -> int:
        return self.populate.items if self.populate else 0

    @property
    def state(self) -> str:
        if self.populate and self.populate.state == "done":
            return "done"
        for s in (self.populate, self.dump):
            if s is not None and s.state == "failed":
                return f"{s.role} failed"
        if self.populate:
            return "populating"
        if self.dump:
            return "dumping"
        return "waiting"


@dataclass(frozen=True)
class WarmView:
    execution_arn: str
    status: str
    warm_id: str
    started: datetime | None
    stopped: datetime | None
    nodes: list[NodeView]
    events: list[str] = field(default_factory=list)
    error: str | None = None
    unreadable: list[str] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return self.status not in TERMINAL


def status_location(sfn: Any, execution: dict[str, Any], bucket: str | None) -> tuple[str, str, str]:
    """(bucket, prefix, warm_id) of an execution's status objects."""
    try:
        doc = json.loads(execution.get("input") or "{}")
    except ValueError:
        doc = {}
    warm_id = doc.get("warm_id") if isinstance(doc, dict) else None
    if not warm_id:
        raise OperatorError(f"execution {execution['executionArn']} has no warm_id in its input")
    prefix = doc.get("status_prefix") or DEFAULT_PREFIX
    if bucket is None:
        tags = sfn.list_tags_for_resource(resourceArn=execution["stateMachineArn"]).get("tags", [])
        bucket = next((t["value"] for t in tags if t["key"] == "cachewarm:status-bucket"), None)
        if bucket is None:
            raise OperatorError(
                "the state machine has no cachewarm:status-bucket tag; pass --status-bucket "
                "(the stack output StatusBucketName)"
            )
    return bucket, prefix, str(warm_id)


def read_agent_statuses(s3: Any, bucket: str, prefix: str, warm_id: str) -> tuple[list[NodeView], list[str]]:
    by_node: dict[str, dict[str, AgentStatus]] = {}
    unreadable: list[str] = []
    for role in ("dump", "populate"):
        pages = s3.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=f"{prefix}/{warm_id}/{role}/"
        )
        for page in pages:
            for obj in page.get("Contents", []):
                key = obj["Key"]
                try:
                    body = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
                    st = AgentStatus.from_json(body)
                except (ValueError, KeyError, TypeError):
                    unreadable.append(key)
                    continue
                by_node.setdefault(st.node_id, {})[role] = st
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


def load_view(sfn: Any, s3: Any, execution_arn: str, bucket: str | None = None) -> WarmView:
    try:
        ex = sfn.describe_execution(executionArn=execution_arn)
    except ClientError as e:
        raise OperatorError(f"cannot describe {execution_arn}: {e}") from e
    bucket_name, prefix, warm_id = status_location(sfn, ex, bucket)
    try:
        nodes, unreadable = read_agent_statuses(s3, bucket_name, prefix, warm_id)
    except ClientError as e:
        raise OperatorError(f"cannot read s3://{bucket_name}/{prefix}/{warm_id}/: {e}") from e
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
    )


# ---- showing it ----------------------------------------------------------------------------------


def _pct(n: int, total: int | None) -> str:
    return f"{100.0 * n / total:5.1f}%" if total else "    -"


def render(view: WarmView, now_ms: int | None = None) -> str:
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    done = sum(1 for n in view.nodes if n.state == "done")
    items = sum(n.populated for n in view.nodes)
    out = [
        f"warm {view.warm_id}: {view.status}  "
        f"({done}/{len(view.nodes)} nodes done, {items:,} items populated)",
        f"execution {view.execution_arn}",
    ]
    if view.error:
        out.append(f"error: {view.error}")
    if view.nodes:
        out.append(f"{'node':<22} {'state':<16} {'dumped':>14} {'populated':>14} {'':>6}  heartbeat")
    for n in view.nodes:
        beats = [s.heartbeat_ms for s in (n.dump, n.populate) if s is not None]
        age = f"{(now_ms - max(beats)) / 1000:.0f}s ago" if beats else "-"
        dumped = n.dump.items if n.dump else 0
        pct = _pct(n.populated, n.total)
        out.append(f"{n.node_id:<22} {n.state:<16} {dumped:>14,} {n.populated:>14,} {pct}  {age}")
        for s in (n.dump, n.populate):
            if s is not None and s.error:
                out.append(f"    {s.role} (attempt {s.attempt}): {s.error}")
    for key in view.unreadable:
        out.append(f"unreadable status object: {key}")
    if view.events:
        out.append("recent events (newest first):")
        out.extend(f"  {e}" for e in view.events)
    return "\n".join(out)


# ---- the commands --------------------------------------------------------------------------------


@dataclass
class Clients:
    """Lazily created boto3 clients (no client at import time; tests inject their own)."""

    region: str | None = None
    _cache: dict[str, Any] = field(default_factory=dict)

    def get(self, service: str) -> Any:
        if service not in self._cache:
            import boto3

            self._cache[service] = boto3.client(service, region_name=self.region)  # type: ignore[call-overload]
        return self._cache[service]


def start_warm(sfn: Any, state_machine_arn: str, doc: dict[str, Any]) -> tuple[str, bool]:
    """Start an execution named after the warm id. Returns (execution ARN, started now?).

    The name makes the start idempotent: starting the same warm twice finds the first execution.
    """
    warm_id = doc.get("warm_id")
    if not isinstance(warm_id, str) or not warm_id:
        raise OperatorError("the input has no warm_id (a string naming this warm)")
    arn = state_machine_arn.replace(":stateMachine:", ":execution:", 1) + f":{warm_id}"
    try:
        sfn.describe_execution(executionArn=arn)
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


region_option = click.option("--region", default=None, help="AWS region (default: the SDK's).")
bucket_option = click.option(
    "--status-bucket",
    default=None,
    help="Status bucket (default: the state machine's cachewarm:status-bucket tag).",
)


@click.command("start")
@click.option("--state-machine", "state_machine", required=True, help="State machine ARN (stack output).")
@click.option(
    "--input", "input_file", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@region_option
@click.pass_obj
def start_cmd(obj: Any, state_machine: str, input_file: Path, region: str | None) -> None:
    """Start a warm: an execution of the state machine with the JSON input in FILE."""
    try:
        doc = json.loads(input_file.read_text())
    except ValueError as e:
        raise OperatorError(f"{input_file}: not valid JSON ({e})") from e
    if not isinstance(doc, dict):
        raise OperatorError(f"{input_file}: the input must be a JSON object")
    clients = obj if isinstance(obj, Clients) else Clients(region)
    arn, started = start_warm(clients.get("stepfunctions"), state_machine, doc)
    click.echo(("started " if started else "already started: ") + arn)


@click.command("status")
@click.argument("execution_arn")
@bucket_option
@region_option
@click.pass_obj
def status_cmd(obj: Any, execution_arn: str, status_bucket: str | None, region: str | None) -> None:
    """Per-node progress of a warm, from its status objects and execution history."""
    clients = obj if isinstance(obj, Clients) else Clients(region)
    view = load_view(clients.get("stepfunctions"), clients.get("s3"), execution_arn, status_bucket)
    click.echo(render(view))
    sys.exit(0 if view.status in ("RUNNING", "SUCCEEDED") else 1)


def watch_loop(
    load: Callable[[], WarmView],
    interval_s: float,
    max_bars: int,
    sleep: Callable[[float], None] = time.sleep,
    stream: Any = None,
) -> WarmView:
    """Progress bars (tqdm) per node until the execution ends; returns the last view."""
    from tqdm import tqdm

    stream = stream or sys.stderr
    bars: dict[str, Any] = {}
    overall = tqdm(
        total=0, desc="all nodes", unit="item", unit_scale=True, position=0, file=stream, leave=True
    )
    try:
        while True:
            view = load()
            nodes = sorted(view.nodes, key=lambda n: (n.state == "done", n.populated))[:max_bars]
            overall.total = sum(n.total or 0 for n in view.nodes) or None
            overall.n = sum(n.populated for n in view.nodes)
            done = sum(1 for n in view.nodes if n.state == "done")
            overall.set_postfix_str(f"{view.status} {done}/{len(view.nodes)} done", refresh=False)
            overall.refresh()
            for i, n in enumerate(nodes, start=1):
                bar = bars.get(n.node_id)
                if bar is None:
                    bar = bars[n.node_id] = tqdm(
                        total=0,
                        desc=n.node_id,
                        unit="item",
                        unit_scale=True,
                        position=i,
                        file=stream,
                        leave=True,
                    )
                bar.total = n.total
                bar.n = n.populated
                bar.set_postfix_str(n.state, refresh=False)
                bar.refresh()
            if not view.running:
                return view
            sleep(interval_s)
    finally:
        for bar in bars.values():
            bar.close()
        overall.close()


@click.command("watch")
@click.argument("execution_arn")
@bucket_option
@region_option
@click.option(
    "--interval", type=click.FloatRange(min=0), default=15.0, show_default=True, help="Seconds between polls."
)
@click.option(
    "--max-bars",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Nodes shown (least done first).",
)
@click.pass_obj
def watch_cmd(
    obj: Any,
    execution_arn: str,
    status_bucket: str | None,
    region: str | None,
    interval: float,
    max_bars: int,
) -> None:
    """Follow a warm with progress bars until it ends; exit 0 only if it succeeded."""
    clients = obj if isinstance(obj, Clients) else Clients(region)
    sfn, s3 = clients.get("stepfunctions"), clients.get("s3")

    def load() -> WarmView:
        try:
            return load_view(sfn, s3, execution_arn, status_bucket)
        except (ClientError, BotoCoreError) as e:
            raise OperatorError(str(e)) from e

    view = watch_loop(load, interval, max_bars)
    click.echo(render(view))
    sys.exit(0 if view.status == "SUCCEEDED" else 1)
