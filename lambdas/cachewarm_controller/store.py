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
from cachewarm.contract.inputs import MAX_SOURCE_NODES
from cachewarm.contract.status import (
    CONTROLLER_ROOT,
    ROLES,
    NodeStatus,
    StatusFormatError,
    VerifyResult,
    claim_key,
    controller_prefix,
    plan_key,
    status_key,
    verify_key,
    warm_prefix,
)

from cachewarm_controller.awsutil import error_code
from cachewarm_controller.budget import STATUS_READERS
from cachewarm_controller.errors import TransientError
from cachewarm_controller.plan import Survey, TeardownState, WarmPlan

StatusMap = dict[tuple[str, str], NodeStatus]  # (role, node_id) -> status
# (role, node_id) -> the ARN of the instance whose object counts: the node itself for `dump`, its
# populator for `populate` (WarmPlan.status_writers). An object another instance wrote is never read.
Writers = Mapping[tuple[str, str], str]
# What one warm's agents write at most, honestly: one object per role and node, one verify result.
AGENT_OBJECTS_DELETED = 3 * MAX_SOURCE_NODES + 1000


def survey_key(prefix: str, warm_id: str) -> str:
    """The controller's own survey of the source candidates (only the controller reads it)."""
    return f"{controller_prefix(prefix, warm_id)}survey.json"


def teardown_key(prefix: str, warm_id: str) -> str:
    """Teardown's memory between passes (deleted with the rest of the warm's objects)."""
    return f"{controller_prefix(prefix, warm_id)}teardown.json"


def transport_key(prefix: str, execution_arn: str) -> str:
    """The S3 transport's record of one execution: the name of the bucket it made (or is about to
    make). Keyed by the execution alone, so teardown finds it from an event without the warm id;
    `_transport` is no warm id (they never start with `_`)."""
    digest = hashlib.sha256(execution_arn.encode()).hexdigest()
    return f"{CONTROLLER_ROOT}/{prefix.strip('/')}/_transport/{digest}.json"


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
    # The account that owns the status bucket: every call names it (ExpectedBucketOwner), so a bucket
    # of that name in another account (the stack's deleted and the name taken) is never used.
    owner: str | None = None

    def _own(self) -> dict[str, str]:
        return {"ExpectedBucketOwner": self.owner} if self.owner else {}

    def save_plan(self, prefix: str, plan: WarmPlan) -> None:
        self.s3.put_object(
            Bucket=self.bucket,
            **self._own(),
            Key=plan_key(prefix, plan.warm_id),
            Body=plan.model_dump_json().encode(),
            ContentType="application/json",
        )

    def load_plan(self, prefix: str, warm_id: str) -> WarmPlan | None:
        body = self._get(plan_key(prefix, warm_id))
        return None if body is None else WarmPlan.model_validate_json(body)

    def _get(self, key: str) -> bytes | None:
        try:
            return bytes(self.s3.get_object(Bucket=self.bucket, Key=key, **self._own())["Body"].read())
        except ClientError as exc:
            if error_code(exc) in {"NoSuchKey", "404"}:
                return None
            raise

    def save_survey(self, prefix: str, warm_id: str, survey: Survey) -> None:
        self.s3.put_object(
            Bucket=self.bucket,
            **self._own(),
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
            **self._own(),
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
                **self._own(),
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

    def record_transport(self, prefix: str, execution_arn: str, bucket: str) -> str:
        """Record the execution's transport bucket unless one is recorded (If-None-Match: *);
        returns the recorded name — this one, or an earlier pass's."""
        key = transport_key(prefix, execution_arn)
        try:
            self.s3.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=json.dumps({"bucket": bucket, "execution_arn": execution_arn}).encode(),
                ContentType="application/json",
                IfNoneMatch="*",
                **self._own(),
            )
        except ClientError as exc:
            if error_code(exc) in {"ConditionalRequestConflict", "409"}:
                raise TransientError(f"the transport record of {execution_arn} raced: {exc}") from exc
            if error_code(exc) not in {"PreconditionFailed", "412"}:
                raise
            recorded = self.transport_bucket(prefix, execution_arn)
            if recorded is None:
                raise TransientError(
                    f"the transport record of {execution_arn} exists but is unreadable"
                ) from exc
            return recorded
        return bucket

    def transport_bucket(self, prefix: str, execution_arn: str) -> str | None:
        """The bucket name the execution recorded (None: it never made one)."""
        body = self._get(transport_key(prefix, execution_arn))
        try:
            doc = json.loads(body) if body is not None else None
        except ValueError:
            return None
        return doc.get("bucket") if isinstance(doc, dict) and isinstance(doc.get("bucket"), str) else None

    def forget_transport(self, prefix: str, execution_arn: str) -> None:
        """Once the bucket is gone."""
        self.s3.delete_object(Bucket=self.bucket, Key=transport_key(prefix, execution_arn), **self._own())

    def save_execution(self, prefix: str, execution_arn: str, warm_id: str) -> None:
        self.s3.put_object(
            Bucket=self.bucket,
            Key=execution_key(prefix, execution_arn),
            Body=json.dumps({"execution_arn": execution_arn, "warm_id": warm_id}).encode(),
            ContentType="application/json",
            **self._own(),
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
        """The verify agents' results for these nodes (node id -> its populator's instance ARN): only
        the object its own populator wrote is read (missing: not written yet; corrupt: recorded)."""

        def get(node: str) -> VerifyResult | None:
            key = verify_key(prefix, warm_id, node, writers[node])
            body = self._get(key)
            if body is None:
                return None
            try:
                result = VerifyResult.from_json(body)
            except StatusFormatError:
                self.corrupt.append(key)
                return None
            if result.node_id != node:
                self.foreign.append(key)
                return None
            return result

        nodes = list(writers)
        out: dict[str, VerifyResult] = {}
        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(nodes)))) as pool:
            for node, res in zip(nodes, pool.map(get, nodes), strict=True):
                if res is not None:
                    out[node] = res
        return out

    def _keys(self, prefix: str, limit: int | None = None) -> list[str]:
        keys: list[str] = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix, **self._own()
        ):
            keys.extend(o["Key"] for o in page.get("Contents", []))
            if limit is not None and len(keys) >= limit:
                break
        return keys

    def read_statuses(self, prefix: str, warm_id: str, writers: Writers) -> StatusMap:
        """The status objects of this warm that their expected writer wrote (`writers`: (role, node)
        -> the writer's instance ARN), each read by its exact key: an object under another
        instance's ARN is never read, and nothing is listed — any agent may write objects ending in
        its own ARN anywhere under the status prefix, and how many must not decide how long a poll
        takes. One whose body names another node or role is ignored and recorded in `foreign`."""
        wanted = [
            (status_key(prefix, warm_id, role, node, arn), role, node)
            for (role, node), arn in writers.items()
            if role in ROLES
        ]

        def get(item: tuple[str, str, str]) -> NodeStatus | None:
            key, role, node = item
            body = self._get(key)
            if body is None:
                return None
            try:
                st = NodeStatus.from_json(body)
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
        """Every object of the warm: the agents' and the controller's (not the claim). Agents may
        write any number of objects under the warm's prefix (each ending in its own ARN): at most
        AGENT_OBJECTS_DELETED of them are deleted, the status bucket's lifecycle rule takes the rest
        — a flood never keeps a teardown from completing."""
        agents = self._keys(warm_prefix(prefix, warm_id), AGENT_OBJECTS_DELETED)[:AGENT_OBJECTS_DELETED]
        keys = agents + self._keys(controller_prefix(prefix, warm_id))
        for i in range(0, len(keys), 1000):
            self.s3.delete_objects(
                Bucket=self.bucket,
                **self._own(),
                Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True},
            )
        return len(keys)
