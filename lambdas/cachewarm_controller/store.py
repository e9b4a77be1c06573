"""The S3 side: the warm's plan and the agents' status objects (docs/status-objects.md)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from botocore.exceptions import ClientError

from cachewarm_controller.awsutil import error_code
from cachewarm_controller.model import WarmPlan

ROLES = ("dump", "populate")


@dataclass(frozen=True)
class Progress:
    items: int = 0
    bytes: int = 0
    files: int = 0
    keys_listed: int = 0


@dataclass(frozen=True)
class NodeStatus:
    """One agent's status object: `<prefix>/<warm-id>/<role>/<node-id>.json`."""

    node_id: str
    role: str
    state: str  # running | done | failed
    heartbeat_ms: int
    progress: Progress = field(default_factory=Progress)
    error: str | None = None
    attempt: int = 0

    @staticmethod
    def from_json(body: dict[str, Any]) -> NodeStatus:
        p = body.get("progress") or {}
        state = str(body["state"])
        if state not in {"running", "done", "failed"}:
            raise ValueError(f"unknown state {state!r}")
        return NodeStatus(
            node_id=str(body["node_id"]),
            role=str(body["role"]),
            state=state,
            heartbeat_ms=int(body["heartbeat_ms"]),
            progress=Progress(
                items=int(p.get("items", 0)),
                bytes=int(p.get("bytes", 0)),
                files=int(p.get("files", 0)),
                keys_listed=int(p.get("keys_listed", 0)),
            ),
            error=body.get("error"),
            attempt=int(body.get("attempt", 0)),
        )


StatusMap = dict[tuple[str, str], NodeStatus]  # (role, node_id) -> status


class StatusReader(Protocol):
    def read_statuses(self, prefix: str, warm_id: str) -> StatusMap: ...


def warm_prefix(prefix: str, warm_id: str) -> str:
    return f"{prefix}/{warm_id}/"


def plan_key(prefix: str, warm_id: str) -> str:
    return f"{prefix}/{warm_id}/controller/plan.json"


@dataclass
class S3Store:
    s3: Any
    bucket: str
    # Status objects are fetched in parallel: 600 GETs for 300 nodes every poll.
    workers: int = 16
    corrupt: list[str] = field(default_factory=list)

    def save_plan(self, prefix: str, plan: WarmPlan) -> None:
        self.s3.put_object(
            Bucket=self.bucket,
            Key=plan_key(prefix, plan.warm_id),
            Body=plan.model_dump_json().encode(),
            ContentType="application/json",
        )

    def load_plan(self, prefix: str, warm_id: str) -> WarmPlan | None:
        try:
            obj = self.s3.get_object(Bucket=self.bucket, Key=plan_key(prefix, warm_id))
        except ClientError as exc:
            if error_code(exc) in {"NoSuchKey", "404"}:
                return None
            raise
        return WarmPlan.model_validate_json(obj["Body"].read())

    def _keys(self, prefix: str) -> list[str]:
        keys: list[str] = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            keys.extend(o["Key"] for o in page.get("Contents", []))
        return keys

    def read_statuses(self, prefix: str, warm_id: str) -> StatusMap:
        keys = [
            k
            for role in ROLES
            for k in self._keys(f"{warm_prefix(prefix, warm_id)}{role}/")
            if k.endswith(".json")
        ]

        def get(key: str) -> NodeStatus | None:
            try:
                body = json.loads(self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())
                return NodeStatus.from_json(body)
            except ClientError as exc:
                if error_code(exc) == "NoSuchKey":
                    return None
                raise
            except (ValueError, KeyError, TypeError):
                # A corrupt status object counts as no heartbeat (the node goes stale and is revived);
                # it is recorded so the check's output names it.
                self.corrupt.append(key)
                return None

        out: StatusMap = {}
        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(keys)))) as pool:
            for st in pool.map(get, keys):
                if st is not None:
                    out[(st.role, st.node_id)] = st
        return out

    def delete_warm(self, prefix: str, warm_id: str) -> int:
        keys = self._keys(warm_prefix(prefix, warm_id))
        for i in range(0, len(keys), 1000):
            self.s3.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True},
            )
        return len(keys)
