"""The per-node plan and what the controller keeps beside it between passes: one row per source
node, kept in S3 (300 rows would crowd the execution's 256 KiB state)."""

from __future__ import annotations

from cachewarm.contract.status import instance_arn
from pydantic import BaseModel, Field

from cachewarm_controller.model import NodeStats


class Probe(BaseModel):
    """One command sent to up to 50 instances with the same parameters (memcached stats, agent
    install); an empty `command_id` is one about to be sent (recorded first, like RoleRun)."""

    command_id: str
    instance_ids: list[str]


class RoleRun(BaseModel):
    """The latest SSM command of one agent role on one node. `sending_ms` is written to S3 before the
    command is sent: a retried step that finds it without a command id looks the command up (by its
    comment) instead of sending it twice."""

    command_id: str | None = None
    attempt: int = 0
    sent_ms: int = 0
    sending_ms: int = 0
    cancelled: bool = False


class NodePlan(BaseModel):
    node_id: str  # the source instance id
    az: str
    subnet_id: str
    instance_type: str
    items: int
    bytes: int
    size_gib: int
    private_ip: str = ""
    # What this execution created for the node, recorded when created: the only volume and instance
    # it ever attaches, detaches, deletes or terminates. `*_requested` is saved before the create call:
    # a node requested but without an id (the Lambda ended between the call and the save) is recovered
    # by the call's ClientToken (`ownership`), never by a tag.
    volume_id: str | None = None
    volume_requested: bool = False
    populator_id: str | None = None
    populator_requested: bool = False
    dump: RoleRun = Field(default_factory=RoleRun)
    populate: RoleRun = Field(default_factory=RoleRun)
    verify: RoleRun = Field(default_factory=RoleRun)
    # The verify result once judged and passed: [keys checked, differences] (empty: not yet). Later
    # passes read only the results not judged yet.
    verified: list[int] = Field(default_factory=list)
    revives: int = 0
    done: bool = False
    # Progress, not heartbeats: the last (items, bytes, files, keys) seen of both agents, when it last
    # moved, and how often the node was revived for not moving.
    progress_mark: list[int] = Field(default_factory=list)
    progress_ms: int = 0
    stall_revives: int = 0


class WarmPlan(BaseModel):
    warm_id: str
    execution_arn: str = ""
    # Random, made once when the plan is first written, kept under the controller's own S3 prefix: every
    # ClientToken of this execution derives from it (`ownership.client_token`), so nobody else can make
    # the resource EC2 would hand back for one of them.
    nonce: str
    # Where the populators run when not in the controller's region (a cross-region S3 warm).
    populator_region: str | None = None
    # The volumes' CreateVolume parameters besides the node's own: a recovery re-issues the identical
    # request (EC2 refuses a token reused with other parameters).
    volume_iops: int = 0
    volume_kms_key_id: str | None = None
    source_replica: str | None
    started_ms: int
    destination_endpoints: list[str]
    nodes: list[NodePlan]
    # InstallAgents: the install-agent commands (recorded before they are sent) and whether every
    # instance reported this deployment's agent.
    install_commands: list[Probe] = Field(default_factory=list)
    install_sending_ms: int = 0
    installed: bool = False
    # The S3 transport's bucket (CreateTransport records it before creating it): its name holds a
    # random token, so only the plan and the controller's transport record know it.
    transport_bucket: str | None = None

    def status_writers(self, populator_region: str | None = None) -> dict[tuple[str, str], str]:
        """(role, node id) -> the ARN of the instance whose status object counts: a source node
        writes its own `dump` object, its populator (in `populator_region`, else the execution's)
        the `populate` one; store.read_statuses reads exactly those keys and nothing else."""
        out: dict[tuple[str, str], str] = {}
        for n in self.nodes:
            out[("dump", n.node_id)] = self._arn(n.node_id, None)
            if n.populator_id:
                out[("populate", n.node_id)] = self._arn(n.populator_id, populator_region)
        return out

    def verify_writers(self, node_ids: list[str], populator_region: str | None = None) -> dict[str, str]:
        """node id -> its populator's ARN (the verify agent runs there); nodes without one left out."""
        by_id = {n.node_id: n for n in self.nodes}
        return {
            i: self._arn(str(by_id[i].populator_id), populator_region)
            for i in node_ids
            if by_id[i].populator_id
        }

    def _arn(self, instance_id: str, region: str | None) -> str:
        """The ARN IAM names the instance's requests with: the execution's account and region (a
        cross-region warm's populators: theirs)."""
        parts = self.execution_arn.split(":")
        if len(parts) < 5:
            raise ValueError(f"plan of {self.warm_id} has no execution ARN: no writer ARN for {instance_id}")
        return instance_arn(region or parts[3], parts[4], instance_id)

    def node(self, node_id: str) -> NodePlan:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(node_id)


class Survey(BaseModel):
    """What SurveyReplicas found: the candidate source nodes per replica, the stats probes it sent and
    the stats they returned (kept in S3 between passes, beside the plan)."""

    execution_arn: str
    candidates: dict[str, list[str]]  # replica name (or "" when given by instance ids) -> node ids
    probes: list[Probe] = Field(default_factory=list)
    stats: dict[str, NodeStats] = Field(default_factory=dict)


class TeardownState(BaseModel):
    """What Teardown remembers between passes (in S3 beside the plan: 600 instances' unmount state
    would crowd the execution's 256 KiB state)."""

    cancelled: bool = False
    unmount: dict[str, list[str]] = Field(default_factory=dict)  # command id -> instance ids
    unmount_tries: dict[str, int] = Field(default_factory=dict)  # instance id -> unmount commands
    # instance id -> "ok" or "failed (...): output" of its latest unmount that answered
    unmount_results: dict[str, str] = Field(default_factory=dict)
    stuck: dict[str, int] = Field(default_factory=dict)  # "<volume>/<instance>" -> passes detaching
