"""SSM Run Command behind a small interface: start agents, read command status, check agents online.

moto reports every command `Success` at once and lacks DescribeInstanceInformation/CancelCommand, so
the end-to-end tests script these through a fake; `SsmAgentRunner` is tested against moto where moto
is right (SendCommand) and against botocore's Stubber where it is not.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from botocore.exceptions import ClientError
from cachewarm.contract import inputs

from cachewarm_controller.awsutil import chunks, error_code
from cachewarm_controller.errors import PlanError
from cachewarm_controller.model import NodeStats

# SSM command states that end a command without our agent having finished its job.
FAILED_COMMAND_STATES = frozenset(
    {"Failed", "TimedOut", "Cancelled", "Cancelling", "Undeliverable", "Terminated"}
)
RUNNING_COMMAND_STATES = frozenset({"Pending", "InProgress", "Delayed"})
# SSM's delivery timeout (not the run time, which the document's executionTimeout sets).
DELIVERY_TIMEOUT_S = 600


class AgentRunner(Protocol):
    def send(self, document: str, instance_id: str, parameters: dict[str, str], comment: str) -> str: ...

    def statuses(self, command_ids: Sequence[str], since_ms: int) -> dict[str, str]: ...

    def cancel(self, command_ids: Sequence[str]) -> None: ...

    def online(self, instance_ids: Sequence[str]) -> set[str]: ...

    def memcached_stats(self, instance_ids: Sequence[str], port: int) -> dict[str, NodeStats]: ...

    def unmount(self, instance_ids: Sequence[str], mount_point: str, comment: str) -> None: ...


@dataclass
class SsmAgentRunner:
    ssm: Any
    sleep: Callable[[float], None] = time.sleep
    stats_timeout_s: float = 120.0

    def send(self, document: str, instance_id: str, parameters: dict[str, str], comment: str) -> str:
        resp = self.ssm.send_command(
            DocumentName=document,
            InstanceIds=[instance_id],
            Parameters={k: [v] for k, v in parameters.items()},
            Comment=comment[:100],
            TimeoutSeconds=DELIVERY_TIMEOUT_S,
        )
        return str(resp["Command"]["CommandId"])

    def statuses(self, command_ids: Sequence[str], since_ms: int) -> dict[str, str]:
        """Status per command id: one paginated ListCommands over the warm's window (not one call per
        command: 600 commands for 300 nodes), then single lookups for any not seen."""
        wanted = set(command_ids)
        out: dict[str, str] = {}
        since = datetime.fromtimestamp(since_ms / 1000 - 60, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for page in self.ssm.get_paginator("list_commands").paginate(
            Filters=[{"key": "InvokedAfter", "value": since}]
        ):
            for cmd in page["Commands"]:
                if cmd["CommandId"] in wanted:
                    out[cmd["CommandId"]] = cmd["Status"]
        for cid in sorted(wanted - out.keys()):
            cmds = self.ssm.list_commands(CommandId=cid)["Commands"]
            out[cid] = cmds[0]["Status"] if cmds else "Undeliverable"
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

    def unmount(self, instance_ids: Sequence[str], mount_point: str, comment: str) -> None:
        """Fire-and-forget lazy unmount (the agent was cancelled; the detach follows). `mount_point`
        comes from validated input (warm id and mount dir patterns: no shell metacharacters)."""
        if not inputs.matches(inputs.MOUNT, mount_point):
            raise ValueError(f"unsafe mount point {mount_point!r}")
        script = (
            f"if mountpoint -q '{mount_point}'; then umount -l '{mount_point}'; fi; "
            f"rmdir '{mount_point}' 2>/dev/null || true"
        )
        for batch in chunks(list(instance_ids), 50):
            self.ssm.send_command(
                DocumentName="AWS-RunShellScript",
                InstanceIds=list(batch),
                Parameters={"commands": [script], "executionTimeout": ["120"]},
                Comment=comment[:100],
                TimeoutSeconds=DELIVERY_TIMEOUT_S,
            )

    def memcached_stats(self, instance_ids: Sequence[str], port: int) -> dict[str, NodeStats]:
        """`stats` of the memcached on each node, asked through AWS-RunShellScript (bash /dev/tcp: no
        client needed on the node)."""
        script = (
            f"exec 3<>/dev/tcp/127.0.0.1/{int(port)} && "
            "printf 'stats\\r\\nquit\\r\\n' >&3 && timeout 10 cat <&3"
        )
        pending: dict[tuple[str, str], None] = {}
        for batch in chunks(list(instance_ids), 50):
            resp = self.ssm.send_command(
                DocumentName="AWS-RunShellScript",
                InstanceIds=list(batch),
                Parameters={"commands": [script], "executionTimeout": ["60"]},
                Comment="cachewarm: memcached stats",
                TimeoutSeconds=DELIVERY_TIMEOUT_S,
            )
            for iid in batch:
                pending[(resp["Command"]["CommandId"], iid)] = None
        out: dict[str, NodeStats] = {}
        deadline = time.monotonic() + self.stats_timeout_s
        while pending:
            for cid, iid in list(pending):
                try:
                    inv = self.ssm.get_command_invocation(CommandId=cid, InstanceId=iid)
                except ClientError as exc:
                    if error_code(exc) == "InvocationDoesNotExist":
                        continue  # not registered yet
                    raise
                status = inv["Status"]
                if status in RUNNING_COMMAND_STATES:
                    continue
                del pending[(cid, iid)]
                if status != "Success":
                    raise PlanError(
                        f"memcached stats on {iid} failed ({status}): {inv.get('StandardErrorContent', '')}"
                    )
                out[iid] = parse_stats(iid, inv.get("StandardOutputContent", ""))
            if pending:
                if time.monotonic() > deadline:
                    raise PlanError(f"memcached stats timed out on {sorted(i for _, i in pending)}")
                self.sleep(2.0)
        return out


_STAT = re.compile(r"^STAT (\S+) (\d+)\s*$", re.MULTILINE)


def parse_stats(instance_id: str, text: str) -> NodeStats:
    stats = dict(_STAT.findall(text))
    if "curr_items" not in stats or "bytes" not in stats:
        raise PlanError(f"no memcached stats from {instance_id} (is memcached listening?): {text[:200]!r}")
    return NodeStats(items=int(stats["curr_items"]), bytes=int(stats["bytes"]))
