"""The stand-in for SSM Run Command and the agents on the instances (tests/controller): what moto gets
wrong about SSM (every command `Success` at once; no ListCommandInvocations, CancelCommand or
DescribeInstanceInformation) and what the agents would write."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cachewarm.contract.status import NodeStatus, Progress, VerifyResult, instance_arn, status_key, verify_key
from cachewarm_controller.agents import Invocation, SsmAgentRunner
from cachewarm_controller.store import S3Store, StatusMap, Writers

from tests.controller.clock import FakeClock
from tests.controller.names import (
    DUMP_DOC,
    INSTALL_DOC,
    NO_WARM_ID,
    POPULATE_DOC,
    STATS_DOC,
    UNMOUNT_DOC,
    VERIFY_DOC,
)


@dataclass
class SimNode:
    """How one node's agents behave in the simulation."""

    finish_after_s: float = 600.0  # populate done this long after its command was sent
    items: int = 1000
    files: int = 10
    silent_attempts: int = 0  # the first N populate attempts never heartbeat (go stale)
    fail_attempts: int = 0  # the first N populate attempts report state=failed
    frozen_attempts: int = 0  # the first N populate attempts heartbeat but never progress
    verify_differences: int = 0  # what the verify agent reports for this node


@dataclass
class SimCommand:
    document: str
    instance_ids: tuple[str, ...]
    parameters: dict[str, str]
    comment: str
    sent_ms: int


@dataclass
class AgentSim:
    """Stands in for SSM + the agents on the instances: SendCommand really goes to moto (so the
    parameters are inspected there), command status is what the simulated agent is doing, and the
    agents' status objects are synthesized from the fake clock (optionally written to moto's S3 and
    read back through the real S3Store). The verify agent writes its result to S3 when sent."""

    ssm: Any
    clock: FakeClock
    results: S3Store | None = None  # where the verify agent writes
    store: S3Store | None = None
    default: SimNode = field(default_factory=SimNode)
    nodes: dict[str, SimNode] = field(default_factory=dict)
    # (role, node) -> list of (command id, attempt, sent_at)
    sent: dict[tuple[str, str], list[tuple[str, int, float]]] = field(default_factory=dict)
    commands: dict[str, SimCommand] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)
    offline: set[str] = field(default_factory=set)
    command_params: list[dict[str, Any]] = field(default_factory=list)
    unmounted: list[tuple[tuple[str, ...], str]] = field(default_factory=list)
    busy: dict[str, int] = field(default_factory=dict)  # instance -> unmounts that fail (busy)
    install_exit: dict[str, int] = field(default_factory=dict)  # instance -> install exit code
    version_exit: dict[str, int] = field(default_factory=dict)  # node -> agent document exit (126/127)
    use_ssm: bool = True  # False: command ids are made up here (the 300-node test)
    lost_sends: int = 0  # the next N agent sends happen but their response is lost (raise)
    # (role, node) -> the instance its agent runs on (and writes its status object as)
    ran_on: dict[tuple[str, str], str] = field(default_factory=dict)
    # instance -> its region, when not the test's (a cross-region warm's populators)
    region_of: dict[str, str] = field(default_factory=dict)

    def arn(self, instance_id: str) -> str:
        """The ARN the instance writes its objects under (IAM's ec2:SourceInstanceARN)."""
        return instance_arn(self.region_of.get(instance_id, "us-east-1"), "123456789012", instance_id)

    def __post_init__(self) -> None:
        self._real = SsmAgentRunner(self.ssm)

    def send(
        self, document: str, instance_ids: Sequence[str], parameters: Mapping[str, str], comment: str
    ) -> str:
        assert 1 <= len(instance_ids) <= 50, instance_ids
        if self.use_ssm:
            cid = self._real.send(document, instance_ids, parameters, comment)
        else:
            cid = f"cmd-{len(self.commands):06d}"
        self.commands[cid] = SimCommand(
            document, tuple(instance_ids), dict(parameters), comment, int(self.clock() * 1000)
        )
        if document in (DUMP_DOC, POPULATE_DOC, VERIFY_DOC):
            (instance_id,) = instance_ids
            self.command_params.append({"document": document, "instance": instance_id, **parameters})
        if document in (DUMP_DOC, POPULATE_DOC):
            role = "dump" if document == DUMP_DOC else "populate"
            runs = self.sent.setdefault((role, parameters["nodeId"]), [])
            runs.append((cid, len(runs) + 1, self.clock()))
            self.ran_on[(role, parameters["nodeId"])] = instance_ids[0]
        elif document == VERIFY_DOC and self.results is not None:
            node = parameters["nodeId"]
            sim = self._node(node)
            result = VerifyResult(
                parameters["warmId"],
                node,
                int(self.clock() * 1000),
                source_keys=sim.items,
                checked=min(sim.items, int(parameters["sampleKeys"])),
                missing=sim.verify_differences,
            )
            self.results.s3.put_object(
                Bucket=self.results.bucket,
                Key=verify_key(
                    parameters["statusPrefix"], parameters["warmId"], node, self.arn(instance_ids[0])
                ),
                Body=result.to_json(),
            )
        elif document == UNMOUNT_DOC:
            self.unmounted.append((tuple(instance_ids), parameters["mount"]))
        if self.lost_sends and document in (DUMP_DOC, POPULATE_DOC):
            self.lost_sends -= 1
            from cachewarm_controller.errors import TransientError

            raise TransientError("injected: SendCommand succeeded, its response was lost")
        return cid

    def find_sent(self, document: str, instance_id: str, since_ms: int, comment: str) -> str | None:
        for cid, cmd in self.commands.items():
            if (
                cmd.document == document
                and instance_id in cmd.instance_ids
                and cmd.sent_ms >= since_ms - 60_000
                and cmd.comment == comment[:100]
            ):
                return cid
        return None

    def _node(self, node: str) -> SimNode:
        return self.nodes.get(node, self.default)

    def _status(self, role: str, node: str) -> NodeStatus | None:
        runs = self.sent.get((role, node))
        if not runs:
            return None
        _, attempt, sent_at = runs[-1]
        if node in self.version_exit:
            return None  # the document refused to start the agent: no status object ever
        sim = self._node(node)
        now = self.clock()
        progress = Progress(items=sim.items, bytes=sim.items * 1000, files=sim.files)
        if role == "dump":
            return NodeStatus(NO_WARM_ID, node, role, "done", int(now * 1000), progress, None, attempt)
        if attempt <= sim.silent_attempts:
            return None
        if attempt <= sim.silent_attempts + sim.fail_attempts:
            return NodeStatus(
                NO_WARM_ID,
                node,
                role,
                "failed",
                int(now * 1000),
                Progress(),
                "injected agent failure",
                attempt,
            )
        if attempt <= sim.silent_attempts + sim.fail_attempts + sim.frozen_attempts:
            # A live heartbeat, no progress: the agent is stuck (e.g. a hung destination).
            return NodeStatus(
                NO_WARM_ID, node, role, "running", int(now * 1000), Progress(items=7), None, attempt
            )
        if now - sent_at >= sim.finish_after_s:
            return NodeStatus(NO_WARM_ID, node, role, "done", int(now * 1000), progress, None, attempt)
        # Progress grows with time, as a working agent's does.
        share = (now - sent_at) / sim.finish_after_s
        return NodeStatus(
            NO_WARM_ID,
            node,
            role,
            "running",
            int(now * 1000),
            Progress(items=int(sim.items * share), bytes=int(sim.items * 1000 * share)),
            None,
            attempt,
        )

    def read_statuses(self, prefix: str, warm_id: str, writers: Writers) -> StatusMap:
        out: StatusMap = {}
        for role, node in self.sent:
            st = self._status(role, node)
            # As the real store: only the object of the instance the controller expects counts.
            if st is not None and writers.get((role, node)) == self.arn(self.ran_on.get((role, node), "")):
                out[(role, node)] = st
        if self.store is None:
            return out
        for (role, node), st in out.items():  # the agents' side of the contract
            body = {
                "warm_id": warm_id,
                "node_id": node,
                "role": role,
                "state": st.state,
                "heartbeat_ms": st.heartbeat_ms,
                "progress": st.progress.__dict__,
                "error": st.error,
                "attempt": st.attempt,
            }
            key = status_key(prefix, warm_id, role, node, self.arn(self.ran_on[(role, node)]))  # type: ignore[arg-type]
            self.store.s3.put_object(Bucket=self.store.bucket, Key=key, Body=json.dumps(body))
        return self.store.read_statuses(prefix, warm_id, writers)

    def _agent_state(self, cid: str) -> str:
        if cid in self.cancelled:
            return "Cancelled"
        for (role, node), runs in self.sent.items():
            for rcid, _, _ in runs:
                if rcid != cid:
                    continue
                if node in self.version_exit:
                    return "Failed"
                st = self._status(role, node) if cid == runs[-1][0] else None
                return "Success" if st is not None and st.state == "done" else "InProgress"
        return "Success" if cid in self.commands else "Undeliverable"

    def command_states(self, command_ids: Sequence[str]) -> dict[str, str]:
        return {c: self._agent_state(c) for c in command_ids}

    def invocations(self, command_id: str) -> dict[str, Invocation]:
        cmd = self.commands[command_id]
        out: dict[str, Invocation] = {}
        for iid in cmd.instance_ids:
            if cmd.document == STATS_DOC:
                items = 1_000_000 + int(iid[-4:], 16)
                out[iid] = Invocation(iid, "Success", 0, f"curr_items {items}\nbytes {5 * 1024**3}\n")
            elif cmd.document == INSTALL_DOC:
                code = self.install_exit.get(iid, 0)
                status = "Success" if code == 0 else "Failed"
                out[iid] = Invocation(iid, status, code, "" if code == 0 else "injected install failure")
            elif cmd.document == UNMOUNT_DOC:
                if self.busy.get(iid, 0) > 0:
                    self.busy[iid] -= 1
                    out[iid] = Invocation(iid, "Failed", 1, "cannot unmount: still busy")
                else:
                    out[iid] = Invocation(iid, "Success", 0, "unmounted")
            else:
                state = self._agent_state(command_id)
                node = cmd.parameters.get("nodeId", "")
                code = (
                    self.version_exit.get(node, -1)
                    if state == "Failed"
                    else (0 if state == "Success" else -1)
                )
                out[iid] = Invocation(
                    iid, state, code, "injected version check" if code in (126, 127) else ""
                )
        return out

    def cancel(self, command_ids: Sequence[str]) -> None:
        self.cancelled.extend(command_ids)

    def online(self, instance_ids: Sequence[str]) -> set[str]:
        return set(instance_ids) - self.offline


def arn_of(instance_id: str) -> str:
    """The ARN an instance of the test account writes its objects under."""
    return instance_arn("us-east-1", "123456789012", instance_id)
