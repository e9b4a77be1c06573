"""The S3 side: the warm's plan and the agents' status objects (docs/status-objects.md).

The status object, its JSON codec and the S3 layout are `cachewarm.contract.status` (the agents write
what this reads).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from botocore.exceptions import ClientError
from cachewarm.contract.status import (
    CONTROLLER_ROOT,
    ROLES,
    NodeStatus,
    StatusFormatError,
    VerifyResult,
    claim_key,
    controller_prefix,
    parse_agent_key,
    plan_key,
    role_prefix,
    verify_root,
    warm_prefix,
)

from cachewarm_controller.awsutil import error_code
from cachewarm_controller.budget import STATUS_READERS
from cachewarm_controller.errors import TransientError
from cachewarm_controller.model import Survey, TeardownState, WarmPlan

StatusMap = dict[tuple[str, str], NodeStatus]  # (role, node_id) -> status
# (role, node_id) -> the instance id whose object counts: the node itself for `dump`, its populator
# for `populate` (WarmPlan.status_writers). An object another instance wrote is ignored.
Writers = Mapping[tuple[str, str], str]


def survey_key(prefix: str, warm_id: str) -> str:
    """The controller's own survey of the source candidates (only the controller reads it)."""
    return f"{controller_prefix(prefix, warm_id)}survey.json"


def teardown_key(prefix: str, warm_id: str) -> str:
    """Teardown's memory between passes (deleted with the rest of the warm's objects)."""
    return f"{controller_prefix(prefix, warm_id)}teardown.json"


def execution_key(prefix: str, execution_arn: str) -> str:
    """Which warm id an execution owns (written by its claim): how the teardown machine finds the plan
    of an execution whose input named no warm id (an Auto Scaling launch)."""
    digest = hashlib.sha256(execution_arn.encode()).hexdigest()[:40]
    return f"{CONTROLLER_ROOT}/{prefix.strip('/')}/_executions/{digest}.json"


class StatusReader(Protocol):
    def read_statuses(self, prefix: str, warm_id: str, writers: Writers) -> StatusMap: ...


@dataclass
class S3Store:
    s3: Any
    bucket: str
    # Status objects are fetched in parallel: 600 GETs for 300 nodes every poll.
    workers: int = STATUS_READERS
    corrupt: list[str] = field(default_factory=list)
    # Agent objects written by an instance other than the one expected for their node (never read).
    foreign: list[str] = field(default_factory=list)

    def save_plan(self, prefix: str, plan: WarmPlan) -> None:
        self.s3.put_object(
            Bucket=self.bucket,
            Key=plan_key(prefix, plan.warm_id),
            Body=plan.model_dump_json().encode(),
            ContentType="application/json",
        )

    def load_plan(self, prefix: str, warm_id: str) -> WarmPlan | None:
        body = self._get(plan_key(prefix, warm_id))
        return None if body is None else WarmPlan.model_validate_json(body)

    def _get(self, key: str) -> bytes | None:
        try:
            return bytes(self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        except ClientError as exc:
            if error_code(exc) in {"NoSuchKey", "404"}:
                return None
            raise

    def save_survey(self, prefix: str, warm_id: str, survey: Survey) -> None:
        self.s3.put_object(
            Bucket=self.bucket,
            Key=survey_key(prefix, warm_id),
            Body=survey.model_dump_json().encode(),
            ContentType="application/json",
        )

    def load_survey(self, prefix: str, warm_id: str) -> Survey | None:
        body = self._get(survey_key(prefix, warm_id))
        return None if body is None else Survey.model_validate_json(body)

    def save_teardown(self, prefix: str, warm_id: str, state: TeardownState) -> None:
        self.s3.put_object(
            Bucket=self.bucket,
            Key=teardown_key(prefix, warm_id),
            Body=state.model_dump_json().encode(),
            ContentType="application/json",
        )

    def load_teardown(self, prefix: str, warm_id: str) -> TeardownState:
        body = self._get(teardown_key(prefix, warm_id))
        return TeardownState() if body is None else TeardownState.model_validate_json(body)

    def claim(self, prefix: str, warm_id: str, body: dict[str, Any]) -> bool:
        """Create the warm id's claim unless it exists (S3 conditional write, If-None-Match: *).
        True: this call created it. False: it already existed (read it to see whose it is)."""
        try:
            self.s3.put_object(
                Bucket=self.bucket,
                Key=claim_key(prefix, warm_id),
                Body=json.dumps(body).encode(),
                ContentType="application/json",
                IfNoneMatch="*",
            )
        except ClientError as exc:
            if error_code(exc) in {"PreconditionFailed", "412"}:
                return False
            if error_code(exc) in {"ConditionalRequestConflict", "409"}:
                # Two writers raced for the key; S3 asks the loser to retry (which then sees 412).
                raise TransientError(f"claim of {warm_id} raced another writer: {exc}") from exc
            raise
        return True

    def save_execution(self, prefix: str, execution_arn: str, warm_id: str) -> None:
        self.s3.put_object(
            Bucket=self.bucket,
            Key=execution_key(prefix, execution_arn),
            Body=json.dumps({"execution_arn": execution_arn, "warm_id": warm_id}).encode(),
            ContentType="application/json",
        )

    def execution_warm_id(self, prefix: str, execution_arn: str) -> str | None:
        """The warm id this execution claimed (None: it never owned one)."""
        body = self._get(execution_key(prefix, execution_arn))
        try:
            doc = json.loads(body) if body is not None else {}
        except ValueError:
            return None
        if not isinstance(doc, dict) or doc.get("execution_arn") != execution_arn:
            return None
        warm_id = doc.get("warm_id")
        return warm_id if isinstance(warm_id, str) else None

    def read_claim(self, prefix: str, warm_id: str) -> dict[str, Any] | None:
        body = self._get(claim_key(prefix, warm_id))
        if body is None:
            return None
        try:
            doc = json.loads(body)
        except ValueError:
            return {}
        return doc if isinstance(doc, dict) else {}

    def read_verify(self, prefix: str, warm_id: str, writers: Mapping[str, str]) -> dict[str, VerifyResult]:
        """The verify agents' results for these nodes (node id -> its populator's instance id): only
        an object the node's own populator wrote counts (missing: not written yet; corrupt: recorded).
        One listing of the warm's verify objects, then the wanted ones fetched in parallel."""
        root = verify_root(prefix, warm_id)
        keys: dict[str, str] = {}
        for key in self._keys(root):
            parsed = parse_agent_key(key, root)
            if parsed is not None and parsed[0] in writers and writers[parsed[0]] == parsed[1]:
                keys[parsed[0]] = key
            else:
                self.foreign.append(key)

        def get(node: str) -> VerifyResult | None:
            body = self._get(keys[node])
            if body is None:
                return None
            try:
                result = VerifyResult.from_json(body)
            except StatusFormatError:
                self.corrupt.append(keys[node])
                return None
            if result.node_id != node:
                self.foreign.append(keys[node])
                return None
            return result

        nodes = list(keys)
        out: dict[str, VerifyResult] = {}
        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(nodes)))) as pool:
            for node, res in zip(nodes, pool.map(get, nodes), strict=True):
                if res is not None:
                    out[node] = res
        return out

    def _keys(self, prefix: str) -> list[str]:
        keys: list[str] = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            keys.extend(o["Key"] for o in page.get("Contents", []))
        return keys

    def read_statuses(self, prefix: str, warm_id: str, writers: Writers) -> StatusMap:
        """The status objects of this warm that their expected writer wrote (`writers`); an object
        under another instance's ARN, or one whose body names another node or role, is ignored and
        recorded in `foreign` — a foothold on one node cannot speak for another."""
        wanted: list[tuple[str, str, str]] = []  # (key, role, node)
        for role in ROLES:
            under = role_prefix(prefix, warm_id, role)
            for key in self._keys(under):
                parsed = parse_agent_key(key, under)
                if parsed is None or writers.get((role, parsed[0])) != parsed[1]:
                    self.foreign.append(key)
                    continue
                wanted.append((key, role, parsed[0]))

        def get(item: tuple[str, str, str]) -> NodeStatus | None:
            key, role, node = item
            try:
                st = NodeStatus.from_json(self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())
            except ClientError as exc:
                if error_code(exc) == "NoSuchKey":
                    return None
                raise
            except StatusFormatError:
                # A corrupt status object counts as no heartbeat (the node goes stale and is revived);
                # it is recorded so the check's output names it.
                self.corrupt.append(key)
                return None
            if (st.role, st.node_id) != (role, node):
                self.foreign.append(key)
                return None
            return st

        out: StatusMap = {}
        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(wanted)))) as pool:
            for st in pool.map(get, wanted):
                if st is not None:
                    out[(st.role, st.node_id)] = st
        return out

    def delete_warm(self, prefix: str, warm_id: str) -> int:
        """Every object of the warm: the agents' and the controller's (not the claim)."""
        keys = self._keys(warm_prefix(prefix, warm_id)) + self._keys(controller_prefix(prefix, warm_id))
        for i in range(0, len(keys), 1000):
            self.s3.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True},
            )
        return len(keys)
