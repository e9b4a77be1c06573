"""The S3 side: the warm's plan and the agents' status objects (docs/status-objects.md).

The status object, its JSON codec and the S3 layout are `cachewarm.contract.status` (the agents write
what this reads).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from botocore.exceptions import ClientError
from cachewarm.contract.status import (
    ROLES,
    NodeStatus,
    StatusFormatError,
    plan_key,
    role_prefix,
    warm_prefix,
)

from cachewarm_controller.awsutil import error_code
from cachewarm_controller.model import WarmPlan

StatusMap = dict[tuple[str, str], NodeStatus]  # (role, node_id) -> status


class StatusReader(Protocol):
    def read_statuses(self, prefix: str, warm_id: str) -> StatusMap: ...


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
            k for role in ROLES for k in self._keys(role_prefix(prefix, warm_id, role)) if k.endswith(".json")
        ]

        def get(key: str) -> NodeStatus | None:
            try:
                return NodeStatus.from_json(self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())
            except ClientError as exc:
                if error_code(exc) == "NoSuchKey":
                    return None
                raise
            except StatusFormatError:
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
