"""SSM Run Command behind a small interface: send this stack's documents (one instance, or up to 50
with identical parameters), look up commands by id, read per-instance results, cancel, check online.

Nothing here waits for a command: the state machine's Wait states do (docs: statemachine/README.md).
moto reports every command `Success` at once and lacks ListCommandInvocations,
DescribeInstanceInformation and CancelCommand, so the end-to-end tests script these through a fake;
`SsmAgentRunner` is tested against botocore's Stubber with real response shapes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from botocore.exceptions import ClientError
from cachewarm.contract import inputs

from cachewarm_controller.awsutil import chunks, error_code
from cachewarm_controller.errors import PlanError
from cachewarm_controller.model import NodeStats

# SSM command states that end a command without our agent having finished its job.
FAILED_COMMAND_STATES = frozenset(
    {"Failed", "TimedOut", "Cancelled", "Cancelling", "Undeliverable", "Terminated", "DeliveryTimedOut"}
)
RUNNING_COMMAND_STATES = frozenset({"Pending", "InProgress", "Delayed"})
# SSM's delivery timeout (not the run time, which the document's executionTimeout sets).
DELIVERY_TIMEOUT_S = 600
# Exit codes of the documents' own checks: the agent is not installed (127) or is another version
# than this deployment's (126). A revive cannot fix either: the node fails at once, naming it.
NOT_INSTALLED_EXIT = 127
WRONG_VERSION_EXIT = 126


@dataclass(frozen=True)
class Invocation:
    """One instance's part of a command: SSM status, exit code (-1 while running), output excerpt."""

    instance_id: str
    status: str
    response_code: int = -1
    output: str = ""


class AgentRunner(Protocol):
    def send(
        self, document: str, instance_ids: Sequence[str], parameters: Mapping[str, str], comment: str
    ) -> str: ...

    def find_sent(self, document: str, instance_id: str, since_ms: int, comment: str) -> str | None: ...

    def command_states(self, command_ids: Sequence[str]) -> dict[str, str]: ...

    def invocations(self, command_id: str) -> dict[str, Invocation]: ...

    def cancel(self, command_ids: Sequence[str]) -> None: ...

    def online(self, instance_ids: Sequence[str]) -> set[str]: ...


@dataclass
class SsmAgentRunner:
    ssm: Any
    # SendCommand's CloudWatchOutputConfig: every command's output also goes to this log group.
    log_group: str | None = None
    # The document version every command runs (the stack's: pinned, never whatever is the default).
    document_version: str | None = None
    # A document's name in this runner's region, by its name at home (a destination region's copies).
    document_names: Mapping[str, str] = field(default_factory=dict)

    def _name(self, document: str) -> str:
        return self.document_names.get(document, document)

    def send(
        self, document: str, instance_ids: Sequence[str], parameters: Mapping[str, str], comment: str
    ) -> str:
        if not 1 <= len(instance_ids) <= inputs.SSM_MAX_TARGETS:
            raise ValueError(
                f"SendCommand takes 1..{inputs.SSM_MAX_TARGETS} instances, got {len(instance_ids)}"
            )
        kwargs: dict[str, Any] = {
            "DocumentName": self._name(document),
            "InstanceIds": list(instance_ids),
            "Parameters": {k: [v] for k, v in parameters.items()},
            "Comment": comment[:100],
            "TimeoutSeconds": DELIVERY_TIMEOUT_S,
        }
        if self.document_version:
            kwargs["DocumentVersion"] = self.document_version
        if self.log_group:
            kwargs["CloudWatchOutputConfig"] = {
                "CloudWatchLogGroupName": self.log_group,
                "CloudWatchOutputEnabled": True,
            }
        return str(self.ssm.send_command(**kwargs)["Command"]["CommandId"])

    def find_sent(self, document: str, instance_id: str, since_ms: int, comment: str) -> str | None:
        """The command `comment` names that was sent to `instance_id` since `since_ms`, if any: how a
        retried step finds a command whose id it recorded no more (it records the intent first)."""
        since = datetime.fromtimestamp(since_ms / 1000 - 60, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for page in self.ssm.get_paginator("list_commands").paginate(
            InstanceId=instance_id,
            Filters=[
                {"key": "InvokedAfter", "value": since},
                {"key": "DocumentName", "value": self._name(document)},
            ],
        ):
            for cmd in page["Commands"]:
                if cmd.get("Comment") == comment[:100]:
                    return str(cmd["CommandId"])
        return None

    def command_states(self, command_ids: Sequence[str]) -> dict[str, str]:
        """Status per command id, one ListCommands each: only this warm's commands are listed (the
        caller asks only about the ones whose status objects do not already say enough)."""
        out: dict[str, str] = {}
        for cid in command_ids:
            try:
                cmds = self.ssm.list_commands(CommandId=cid)["Commands"]
            except ClientError as exc:
                if error_code(exc) != "InvalidCommandId":
                    raise
                cmds = []
            out[cid] = str(cmds[0]["Status"]) if cmds else "Undeliverable"
        return out

    def invocations(self, command_id: str) -> dict[str, Invocation]:
        """Every instance's part of one command (up to 50), with the output excerpt SSM keeps."""
        out: dict[str, Invocation] = {}
        for page in self.ssm.get_paginator("list_command_invocations").paginate(
            CommandId=command_id, Details=True
        ):
            for inv in page["CommandInvocations"]:
                text = "\n".join(
                    str(p.get("Output", "")) for p in inv.get("CommandPlugins", []) if p.get("Output")
                )
                codes = [int(p["ResponseCode"]) for p in inv.get("CommandPlugins", []) if "ResponseCode" in p]
                out[inv["InstanceId"]] = Invocation(
                    inv["InstanceId"], str(inv["Status"]), max(codes) if codes else -1, text
                )
        return out

    def cancel(self, command_ids: Sequence[str]) -> None:
        for cid in command_ids:
            try:
                self.ssm.cancel_command(CommandId=cid)
            except ClientError as exc:
                # Finished or unknown commands cannot be cancelled; that is the goal anyway.
                if error_code(exc) not in {"InvalidCommandId", "InvalidInstanceId", "DuplicateInstanceId"}:
                    raise

    def online(self, instance_ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for batch in chunks(list(instance_ids), 50):
            for page in self.ssm.get_paginator("describe_instance_information").paginate(
                Filters=[{"Key": "InstanceIds", "Values": list(batch)}]
            ):
                found.update(
                    i["InstanceId"]
                    for i in page["InstanceInformationList"]
                    if i.get("PingStatus") == "Online"
                )
        return found


_STAT = re.compile(r"^(?:STAT )?(curr_items|bytes) (\d+)\s*$", re.MULTILINE)


def parse_stats(instance_id: str, text: str) -> NodeStats:
    """The memcached-stats document's output (`curr_items N`, `bytes N`; raw `STAT` lines work too)."""
    stats = dict(_STAT.findall(text))
    if "curr_items" not in stats or "bytes" not in stats:
        raise PlanError(f"no memcached stats from {instance_id} (is memcached listening?): {text[:200]!r}")
    return NodeStats(items=int(stats["curr_items"]), bytes=int(stats["bytes"]))
