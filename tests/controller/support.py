"""Support for the controller tests: an offline AWS world of moto (EC2/SSM/S3/Step Functions/Lambda) plus
three fakes for what moto gets wrong (multi-attach, SSM command status/online, agents' heartbeats).

The real ASL file runs under moto's Step Functions interpreter; its Lambda tasks are dispatched
in-process to the real handlers (moto's Lambda only echoes); Wait states advance a fake clock
instead of sleeping, and Retry back-off does not sleep.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cachewarm.contract.status import NodeStatus, Progress, VerifyResult, verify_key
from cachewarm.contract.tags import REPLICA as TAG_REPLICA
from cachewarm_controller import handlers
from cachewarm_controller.agents import Invocation, SsmAgentRunner
from cachewarm_controller.attach import Attachment
from cachewarm_controller.steps.common import Deps
from cachewarm_controller.steps.inventory import Inventory, tag_filter
from cachewarm_controller.store import S3Store, StatusMap

REPO = Path(__file__).resolve().parents[2]
ASL_PATH = REPO / "statemachine" / "warm.asl.json"
TEARDOWN_ASL_PATH = REPO / "statemachine" / "teardown.asl.json"
DOCS_DIR = REPO / "infra" / "ssm_documents"
REGION = "us-east-1"
ACCOUNT = "123456789012"
BUCKET = "cachewarm-status-test"
DUMP_DOC = "cachewarm-dump-agent"
POPULATE_DOC = "cachewarm-populate-agent"
VERIFY_DOC = "cachewarm-verify-agent"
INSTALL_DOC = "cachewarm-install-agent"
UNMOUNT_DOC = "cachewarm-unmount"
STATS_DOC = "cachewarm-memcached-stats"
# SSM document stem (infra/ssm_documents/<stem>.json) -> its name in the offline world.
DOCUMENT_NAMES = {
    "dump-agent": DUMP_DOC,
    "populate-agent": POPULATE_DOC,
    "verify-agent": VERIFY_DOC,
    "install-agent": INSTALL_DOC,
    "unmount": UNMOUNT_DOC,
    "memcached-stats": STATS_DOC,
}
AMI = "ami-12c6146b"  # one of moto's built-in AMIs
# The simulated statuses name no warm (the controller keys them by role and node); the objects
# written to S3 carry the warm id, as the agents' do.
NO_WARM_ID = ""
MOTO_CONFIG: Any = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}


class FakeClock:
    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeAttacher:
    """Multi-attach as EC2 does it (moto keeps only the last attachment): attachments are immediate."""

    def __init__(self) -> None:
        self.table: dict[str, dict[str, Attachment]] = {}
        self.calls: list[tuple[str, str, str]] = []

    def attachments(self, volume_ids: Sequence[str]) -> dict[str, list[Attachment]]:
        return {v: list(self.table.get(v, {}).values()) for v in volume_ids}

    def attach(self, volume_id: str, instance_id: str, device: str) -> None:
        self.calls.append(("attach", volume_id, instance_id))
        self.table.setdefault(volume_id, {})[instance_id] = Attachment(
            volume_id, instance_id, "attached", device
        )

    def detach(self, volume_id: str, instance_id: str, force: bool) -> None:
        self.calls.append(("detach", volume_id, instance_id))
        self.table.get(volume_id, {}).pop(instance_id, None)


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
                Key=verify_key(parameters["statusPrefix"], parameters["warmId"], node),
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

    def read_statuses(self, prefix: str, warm_id: str) -> StatusMap:
        out: StatusMap = {}
        for role, node in self.sent:
            st = self._status(role, node)
            if st is not None:
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
            self.store.s3.put_object(
                Bucket=self.store.bucket, Key=f"{prefix}/{warm_id}/{role}/{node}.json", Body=json.dumps(body)
            )
        return self.store.read_statuses(prefix, warm_id)

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


@dataclass
class World:
    ec2: Any
    ssm: Any
    s3: Any
    sfn: Any
    clock: FakeClock
    attacher: FakeAttacher
    agents: AgentSim
    deps: Deps
    subnets: dict[str, str]
    source_ids: list[str]
    template_id: str
    # PascalName -> "before" | "after" | "transient" | "transient-after"
    faults: dict[str, str] = field(default_factory=dict)
    # PascalName -> called once, before the next invocation of that step (any execution)
    before: dict[str, Callable[[], None]] = field(default_factory=dict)
    invocations: list[str] = field(default_factory=list)
    autoscaling: Any = None
    warm_id: str = "warm-test-0"
    state_machine_arn: str = ""
    teardown_machine_arn: str = ""
    serial: int = 0

    def reset(self) -> None:
        """A fresh test on the shared moto world: new warm id, fakes and counters."""
        self.serial += 1
        self.warm_id = f"warm-test-{self.serial}"
        self.faults = {}
        self.before = {}
        self.invocations = []
        self.attacher = FakeAttacher()
        self.agents = AgentSim(self.ssm, self.clock, results=self.deps.s3)
        self.deps = Deps(
            ec2=self.ec2,
            s3=self.deps.s3,
            agents=self.agents,
            attacher=self.attacher,
            settings=self.deps.settings,
            statuses=self.agents,
            autoscaling=self.deps.autoscaling,
            clock=self.clock,
            sleep=lambda s: None,
        )

    def make_input(self, **overrides: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "warm_id": self.warm_id,
            "source": {"replica": "main-a"},
            "destination": {"replica": "main-b", "endpoints": ["10.0.9.1:11211", "10.0.9.2:11211"]},
            "populator": {"launch_template_id": self.template_id},
            "polling": {"interval_seconds": 120, "stale_after_seconds": 600, "max_revives": 2},
        }
        body.update(overrides)
        return body

    def add_source_nodes(self, replica: str | None, count: int, instance_type: str = "r5.large") -> list[str]:
        ids: list[str] = []
        azs = sorted(self.subnets)
        for i in range(count):
            az = azs[i % len(azs)]
            resp = self.ec2.run_instances(
                ImageId=AMI,
                InstanceType=instance_type,
                MinCount=1,
                MaxCount=1,
                SubnetId=self.subnets[az],
                TagSpecifications=[
                    {"ResourceType": "instance", "Tags": [{"Key": TAG_REPLICA, "Value": replica}]}
                ]
                if replica
                else [],
            )
            ids.append(resp["Instances"][0]["InstanceId"])
        return ids

    def inventory(self, warm_id: str | None = None) -> Inventory:
        """Everything tagged with the warm id, whichever execution created it."""
        inv = Inventory()
        flt = [tag_filter("cachewarm:warm-id", warm_id or self.warm_id)]
        inv.volumes = [
            v for v in self.ec2.describe_volumes(Filters=flt)["Volumes"] if v["State"] != "deleted"
        ]
        live = {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}
        for res in self.ec2.describe_instances(Filters=[*flt, live])["Reservations"]:
            inv.instances.extend(res["Instances"])
        return inv

    def status_objects(self) -> list[str]:
        resp = self.s3.list_objects_v2(Bucket=BUCKET, Prefix=f"warms/{self.warm_id}/")
        return [o["Key"] for o in resp.get("Contents", [])]

    # ---- the state machine ----------------------------------------------------------------------

    def create_state_machine(self, path: Path = ASL_PATH, name: str = "cachewarm") -> str:
        definition = path.read_text()
        subs = {
            m: f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{m[: -len('FunctionArn')]}"
            for m in re.findall(r"\$\{(\w+FunctionArn)\}", definition)
        }
        subs.update({"StatusBucket": BUCKET})
        for k, v in subs.items():
            definition = definition.replace("${" + k + "}", v)
        arn = self.sfn.create_state_machine(
            name=name, definition=definition, roleArn=f"arn:aws:iam::{ACCOUNT}:role/sfn"
        )["stateMachineArn"]
        return str(arn)

    def run(self, execution_input: Any, timeout_s: float = 90.0) -> Execution:
        if not self.state_machine_arn:
            self.state_machine_arn = self.create_state_machine()
        return self.execute(self.state_machine_arn, execution_input, timeout_s)

    def run_teardown(self, event: Any, timeout_s: float = 90.0) -> Execution:
        """statemachine/teardown.asl.json, started with `event` (an EventBridge event) as input."""
        if not self.teardown_machine_arn:
            self.teardown_machine_arn = self.create_state_machine(TEARDOWN_ASL_PATH, "cachewarm-teardown")
        return self.execute(self.teardown_machine_arn, event, timeout_s)

    def start(self, arn: str, execution_input: Any) -> str:
        self.serial += 1
        raw = json.dumps(execution_input)
        return str(
            self.sfn.start_execution(stateMachineArn=arn, name=f"run-{self.serial}", input=raw)[
                "executionArn"
            ]
        )

    def execute(self, arn: str, execution_input: Any, timeout_s: float) -> Execution:
        return self.wait(self.start(arn, execution_input), timeout_s)

    def wait(self, exec_arn: str, timeout_s: float = 90.0) -> Execution:
        deadline = time.monotonic() + timeout_s
        while True:
            desc = self.sfn.describe_execution(executionArn=exec_arn)
            if desc["status"] != "RUNNING":
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"execution still running after {timeout_s}s")
            time.sleep(0.1)  # the interpreter runs in a thread; do not starve it
        events: list[dict[str, Any]] = []
        token = None
        while True:
            kw: dict[str, Any] = {"executionArn": exec_arn, "maxResults": 1000}
            if token:
                kw["nextToken"] = token
            page = self.sfn.get_execution_history(**kw)
            events.extend(page["events"])
            token = page.get("nextToken")
            if not token:
                break
        return Execution(desc, events)


@dataclass
class Execution:
    desc: dict[str, Any]
    events: list[dict[str, Any]]

    @property
    def status(self) -> str:
        return str(self.desc["status"])

    def entered(self) -> list[str]:
        """State names in the order they were entered."""
        return [e["stateEnteredEventDetails"]["name"] for e in self.events if "stateEnteredEventDetails" in e]

    def outputs(self, state: str) -> list[dict[str, Any]]:
        return [
            json.loads(e["stateExitedEventDetails"]["output"])
            for e in self.events
            if "stateExitedEventDetails" in e and e["stateExitedEventDetails"]["name"] == state
        ]

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    def failure(self) -> dict[str, Any]:
        for e in self.events:
            if e["type"] == "ExecutionFailed":
                return dict(e["executionFailedEventDetails"])
        raise AssertionError("execution did not fail")


@dataclass
class _Context:
    function_name: str
    memory_limit_in_mb: int = 256
    aws_request_id: str = "req-1"

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{self.function_name}"


def _snake(pascal: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", pascal).lower()


class InjectedFault(Exception):
    """A failure the test injects into a step (not retried by the ASL)."""


def dispatcher(world_ref: Callable[[], World]) -> Callable[..., bytes]:
    def invoke(
        self: Any,
        function_name: str,
        qualifier: Any,
        body: Any,
        headers: Any,
        response_headers: dict[str, str],
    ) -> bytes:
        world = world_ref()
        name = function_name.rsplit(":", 1)[-1]
        world.invocations.append(name)
        handler = getattr(handlers, _snake(name))
        event = json.loads(body) if body else {}
        hook = world.before.pop(name, None)
        if hook is not None:  # e.g. run another execution to its end before this step
            hook()
        fault = world.faults.get(name)
        try:
            if fault == "transient":
                world.faults.pop(name)
                from cachewarm_controller.errors import TransientError

                raise TransientError("injected throttling")
            if fault == "before":
                raise InjectedFault(f"injected failure before {name}")
            result = handler(event, _Context(name))
            if fault == "after":
                raise InjectedFault(f"injected failure after {name} did its work")
            if fault == "transient-after":  # the work was done, the response lost: the ASL retries
                world.faults.pop(name)
                from cachewarm_controller.errors import TransientError

                raise TransientError(f"injected throttling after {name} did its work")
        except Exception as exc:
            response_headers["x-amz-function-error"] = "Unhandled"
            return json.dumps({"errorType": type(exc).__name__, "errorMessage": str(exc)}).encode()
        return json.dumps(result).encode()

    return invoke
