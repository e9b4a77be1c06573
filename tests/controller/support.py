"""Support for the controller tests: an offline AWS world of moto (EC2/SSM/S3/Step Functions/Lambda) plus
fakes for what moto gets wrong (multi-attach here; SSM and the agents in agent_sim.py).

The real ASL file runs under moto's Step Functions interpreter; its Lambda tasks are dispatched
in-process to the real handlers (moto's Lambda only echoes); Wait states advance a fake clock
instead of sleeping, and Retry back-off does not sleep.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cachewarm.contract.replicas import parse_pairs
from cachewarm.contract.tags import REPLICA as TAG_REPLICA
from cachewarm_controller import handlers
from cachewarm_controller.attach import Attachment
from cachewarm_controller.steps.common import Deps
from cachewarm_controller.steps.inventory import Inventory, tag_filter

from tests.controller.agent_sim import AgentSim, SimCommand, SimNode
from tests.controller.clock import FakeClock
from tests.controller.names import (
    DOCUMENT_NAMES,
    DUMP_DOC,
    INSTALL_DOC,
    POPULATE_DOC,
    STATS_DOC,
    UNMOUNT_DOC,
    VERIFY_DOC,
)

AMI = "ami-12c6146b"  # one of moto's built-in AMIs

# What the tests import from here (the world and its parts, the names of the offline world).
__all__ = [
    "ACCOUNT",
    "AMI",
    "ASL_PATH",
    "BUCKET",
    "DOCS_DIR",
    "DOCUMENT_NAMES",
    "DUMP_DOC",
    "INSTALL_DOC",
    "MOTO_CONFIG",
    "POPULATE_DOC",
    "REGION",
    "REPO",
    "STATS_DOC",
    "TEARDOWN_ASL_PATH",
    "UNMOUNT_DOC",
    "VERIFY_DOC",
    "AgentSim",
    "Execution",
    "FakeAttacher",
    "FakeClock",
    "SimCommand",
    "SimNode",
    "World",
    "dispatcher",
]

REPO = Path(__file__).resolve().parents[2]
ASL_PATH = REPO / "statemachine" / "warm.asl.json"
TEARDOWN_ASL_PATH = REPO / "statemachine" / "teardown.asl.json"
DOCS_DIR = REPO / "infra" / "ssm_documents"
REGION = "us-east-1"
ACCOUNT = "123456789012"
BUCKET = "cachewarm-status-test"
MOTO_CONFIG: Any = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}


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
    memcached_sg: str = ""
    base_settings: Any = None  # the module's Settings; a test's `allow` lasts until the next reset
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
            settings=self.base_settings or self.deps.settings,
            statuses=self.agents,
            autoscaling=self.deps.autoscaling,
            clock=self.clock,
            sleep=lambda s: None,
            executions=self.deps.executions,
        )

    def allow(self, *pairs: str) -> None:
        """Add replica pairs (`SOURCE->DESTINATION`) to the stack's configuration for this test."""
        settings = self.deps.settings
        more = parse_pairs(",".join(pairs))
        self.deps.settings = replace(settings, replica_pairs=settings.replica_pairs + more)

    def make_input(self, **overrides: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "warm_id": self.warm_id,
            "source": {"replica": "main-a"},
            "destination": {"replica": "main-b"},
            "populator": {"launch_template_id": self.template_id},
            "polling": {"interval_seconds": 120, "stale_after_seconds": 600, "max_revives": 2},
        }
        body.update(overrides)
        return body

    def add_source_nodes(
        self, replica: str | None, count: int, instance_type: str = "r5.large", in_group: bool = True
    ) -> list[str]:
        """Replica nodes: tagged with the replica and (`in_group`) in the replicas' security group."""
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
                SecurityGroupIds=[self.memcached_sg] if in_group and self.memcached_sg else [],
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
        """The warm's objects: the agents' and the controller's own (not the claim)."""
        keys: list[str] = []
        for prefix in (f"warms/{self.warm_id}/", f"_controller/warms/{self.warm_id}/"):
            resp = self.s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
            keys += [o["Key"] for o in resp.get("Contents", [])]
        return keys

    # ---- the state machine ----------------------------------------------------------------------

    def create_state_machine(self, path: Path = ASL_PATH, name: str = "cachewarm") -> str:
        definition = path.read_text()
        subs = {
            m: f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{m[: -len('FunctionArn')]}"
            for m in re.findall(r"\$\{(\w+FunctionArn)\}", definition)
        }
        subs.update({"StatusBucket": BUCKET})
        if "${WarmStateMachineArn}" in definition:  # the teardown machine serves the warm machine
            if not self.state_machine_arn:
                self.state_machine_arn = self.create_state_machine()
            subs["WarmStateMachineArn"] = self.state_machine_arn
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
