"""The execution input, validated before anything is created (the plan it leads to: `plan.py`).

Every string that reaches an SSM document parameter is constrained here at least as strictly as the
document's `allowedPattern`, so valid input never fails at SendCommand and hostile input never gets
that far. The patterns, limits and defaults come from `cachewarm.contract.inputs`, which the SSM
documents are checked against.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from aws_lambda_powertools.utilities.parser import parse
from cachewarm.contract import inputs
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from cachewarm_controller.errors import InvalidInputError

GIB = 1024**3
# io2: 4 GiB .. 64 TiB, at most 1000 provisioned IOPS per GiB, 100 .. 256,000 IOPS (Block Express).
IO2_MIN_GIB = 4
IO2_MAX_GIB = 65_536
IO2_MAX_IOPS_PER_GIB = 1000
# Filesystem metadata, the manifest and the checkpoint: a fixed allowance on top of the data.
FS_OVERHEAD_GIB = 1
# An io2 multi-attach volume is attached to at most 16 Nitro instances (we use 2 per volume).
MULTI_ATTACH_LIMIT = 16

WarmId = Annotated[str, Field(pattern=inputs.WARM_ID)]
InstanceId = Annotated[str, Field(pattern=inputs.INSTANCE_ID)]
SubnetId = Annotated[str, Field(pattern=inputs.SUBNET_ID)]
AzName = Annotated[str, Field(pattern=inputs.AZ_NAME)]
Endpoint = Annotated[str, Field(pattern=inputs.ENDPOINT)]
ReplicaName = Annotated[str, Field(pattern=inputs.REPLICA_NAME)]
Region = Annotated[str, Field(pattern=inputs.AWS_REGION)]
AsgName = Annotated[str, Field(pattern=inputs.ASG_NAME)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NodeStats(_Strict):
    """Supplied memcached stats of one source node (else the controller asks the node via SSM)."""

    items: int = Field(ge=0, description="memcached `curr_items` of the node")
    bytes: int = Field(ge=0, description="memcached `bytes` of the node (sizes its volume)")


class SourceSpec(_Strict):
    """Which replica to read. At most one selector; none = the replica with the most items."""

    replica: ReplicaName | None = Field(
        default=None, description="the running instances tagged cachewarm:replica=<this name>"
    )
    asg_name: AsgName | None = Field(
        default=None,
        description="the running instances of this Auto Scaling group (aws:autoscaling:groupName)",
    )
    instance_ids: list[InstanceId] | None = Field(
        default=None,
        min_length=1,
        max_length=1000,
        description="these instances (each tagged cachewarm:replica)",
    )
    node_stats: dict[InstanceId, NodeStats] | None = Field(
        default=None,
        description="{instance id: {items, bytes}}; nodes missing here are asked for memcached stats",
    )
    memcached_port: int = Field(
        default=inputs.DEFAULT_MEMCACHED_PORT,
        ge=1,
        le=65535,
        description="memcached's port on the source nodes (the dumper and Verify read it)",
    )

    @model_validator(mode="after")
    def _one_selector(self) -> SourceSpec:
        chosen = [n for n in ("replica", "asg_name", "instance_ids") if getattr(self, n) is not None]
        if len(chosen) > 1:
            raise ValueError(f"give at most one of replica, asg_name, instance_ids (got {', '.join(chosen)})")
        if self.instance_ids is not None and len(set(self.instance_ids)) != len(self.instance_ids):
            raise ValueError("instance_ids has duplicates")
        return self


class DestinationSpec(_Strict):
    """The replica being warmed: its memcached endpoints (the populators write to all of them), given
    directly or found from the replica tag / Auto Scaling group (private IP + port of running nodes)."""

    replica: ReplicaName | None = Field(
        default=None,
        description="the running instances tagged cachewarm:replica=<this name>, in the stack's VPC",
    )
    asg_name: AsgName | None = Field(
        default=None, description="the InService instances of this Auto Scaling group, in the stack's VPC"
    )
    endpoints: list[Endpoint] | None = Field(
        default=None,
        min_length=1,
        max_length=inputs.MAX_ENDPOINTS,
        description="HOST:PORT of each destination node: the private IP (or DNS name) of a destination "
        "replica node in the stack's VPC (else refused before anything is created)",
    )
    port: int = Field(
        default=inputs.DEFAULT_MEMCACHED_PORT,
        ge=1,
        le=65535,
        description="memcached's port on the destination nodes found by replica or asg_name",
    )

    @model_validator(mode="after")
    def _some_target(self) -> DestinationSpec:
        if self.endpoints is None and self.replica is None and self.asg_name is None:
            raise ValueError("give endpoints, or a replica or asg_name to find them")
        return self


class PopulatorSpec(_Strict):
    """The instances that write the destination: one per source node, from the stack's template."""

    launch_template_id: Annotated[str, Field(pattern=inputs.LAUNCH_TEMPLATE_ID)] | None = Field(
        default=None,
        description="the stack's populator template (output PopulatorLaunchTemplateId; a cross-region "
        "warm: that region's stack's); any other is refused",
    )
    launch_template_name: Annotated[str, Field(pattern=inputs.LAUNCH_TEMPLATE_NAME)] | None = Field(
        default=None, description="instead of the id (a deployed stack refuses it: give the id)"
    )
    launch_template_version: Annotated[str, Field(pattern=inputs.LAUNCH_TEMPLATE_VERSION)] = Field(
        default="$Latest", description="the template's version"
    )
    # Per AZ; a node whose AZ is missing here gets a populator in the source node's own subnet.
    subnet_ids: dict[AzName, SubnetId] = Field(
        default_factory=dict,
        description="{AZ: subnet} for the volume transport; default: the stack's SubnetIds in that AZ, "
        "else the source node's subnet",
    )
    mode: Literal["add", "set"] = Field(
        default=inputs.DEFAULT_MODE,
        description="add never overwrites a value live traffic wrote; set overwrites",
    )
    # Where the destination's client looks for a key (docs/placement.md): evcache (EVCache's ketama),
    # libmemcached[,...], pymemcache[,...] or gomemcache; the populators and verify place keys so.
    placement: Annotated[str, Field(pattern=inputs.PLACEMENT)] = Field(
        default=inputs.DEFAULT_PLACEMENT,
        description="the destination client's key -> node mapping (docs/placement.md); evcache: node key "
        "<private IP>/<private IP>:11211 (docs/deploy.md)",
    )
    max_items_per_second: int = Field(
        default=0, ge=0, le=100_000_000, description="items/s one populator writes, 0 = unlimited"
    )
    # Bytes/s written to the destination by one populator, 0 = unlimited.
    max_bytes_per_second: int = Field(
        default=0, ge=0, le=inputs.BYTE_RATE_MAX, description="bytes/s one populator writes, 0 = unlimited"
    )

    @model_validator(mode="after")
    def _one_template(self) -> PopulatorSpec:
        if (self.launch_template_id is None) == (self.launch_template_name is None):
            raise ValueError("give exactly one of launch_template_id, launch_template_name")
        return self


class VolumeSpec(_Strict):
    """The io2 multi-attach volume of each source node (transport volume)."""

    iops: int = Field(default=5000, ge=100, le=256_000, description="io2 provisioned IOPS")
    # Volume size = data bytes x headroom + FS_OVERHEAD_GIB (docs: statemachine/README.md).
    headroom: float = Field(
        default=1.25,
        ge=1.0,
        le=10.0,
        description="size = memcached bytes x headroom + 1 GiB (at least 4 GiB)",
    )
    kms_key_id: Annotated[str, Field(pattern=inputs.KMS_KEY_ID)] | None = Field(
        default=None,
        description="the volumes' key: the stack's only (another is refused); default the stack's",
    )
    device_name: Annotated[str, Field(pattern=inputs.ATTACH_DEVICE_NAME)] = Field(
        default="/dev/sdf", description="preferred attach name; the next free sdf..sdp is used"
    )


class S3Spec(_Strict):
    """The S3 transport (docs/transport-s3.md): a bucket per warm in the source region (KMS-encrypted,
    a lifecycle rule, a policy naming only this warm's instances' roles), the dumps uploaded there and
    read by populators launched in the destination region's subnets."""

    # Where the populators run (the destination replica's region); None = the controller's own.
    # Another region needs the stack's `destinationRegions` prop to name it; there the populators
    # launch from the template the app deployed in that region (populator.launch_template_id), into
    # its fixed VPC, the destination is found there by replica tag or endpoints, and the populators
    # read the bucket across regions (docs/transport-s3.md, "Cross-region").
    destination_region: Region | None = Field(
        default=None,
        description="where the populators run; another region must be one of the stack's destinationRegions",
    )
    # The destination region's subnets the populators are launched in, one after another.
    subnet_ids: list[SubnetId] = Field(
        min_length=1,
        max_length=16,
        description="the populators' subnets (in the destination region's VPC), used one after another",
    )
    # Bytes/s one source node uploads, 0 = unlimited: the upload shares the clients' network.
    upload_bytes_per_second: int = Field(
        default=0,
        ge=0,
        le=inputs.BYTE_RATE_MAX,
        description="bytes/s each source node uploads, 0 = unlimited",
    )
    # The lifecycle rule: objects a teardown could not delete expire after this many days, and
    # unfinished multipart uploads are aborted after one.
    expire_days: int = Field(
        default=3, ge=1, le=365, description="objects a teardown could not delete expire after this many days"
    )
    # The bucket's SSE-KMS key: only the stack's (KMS_KEY_ID), whatever is given; ValidateInput
    # refuses any other (an alias, aws/s3, another account's key).
    kms_key_id: Annotated[str, Field(pattern=inputs.KMS_KEY_ID)] | None = Field(
        default=None, description="the bucket's SSE-KMS key: only the stack's key is accepted (its ARN or id)"
    )

    @model_validator(mode="after")
    def _unique_subnets(self) -> S3Spec:
        if len(set(self.subnet_ids)) != len(self.subnet_ids):
            raise ValueError("subnet_ids has duplicates")
        return self


class DumperSpec(_Strict):
    """How each source node's dumper reads: fixed ceilings (0 = unlimited), the adaptive guard that
    backs off while the source's live clients would feel the dump (on by default), and the order
    (recency: the most recently used items first, so the destination serves hits early)."""

    threads: int = Field(default=4, ge=1, le=inputs.THREADS_MAX, description="dumper worker threads")
    max_items_per_second: int = Field(
        default=0, ge=0, le=100_000_000, description="items/s read from each source, 0 = unlimited"
    )
    max_bytes_per_second: int = Field(
        default=0, ge=0, le=inputs.BYTE_RATE_MAX, description="bytes/s read from each source, 0 = unlimited"
    )
    adaptive: bool = Field(
        default=True, description="back off while the source's live clients would feel the dump"
    )
    # The guard backs off while its probes' latency is above this x their latency before the dump.
    adaptive_target: float = Field(
        default=inputs.DEFAULT_ADAPTIVE_TARGET,
        ge=inputs.ADAPTIVE_TARGET_MIN,
        le=inputs.ADAPTIVE_TARGET_MAX,
        description="back off while probes answer slower than this x before the dump",
    )
    order: Literal["recency", "crawl"] = Field(
        default="recency", description="recency: most recently used items first; crawl: memcached's order"
    )
    # memcached's `lru_crawler sleep` (us per 1000 items listed) during the dump; None = the server's.
    crawl_sleep_us: int | None = Field(
        default=None,
        ge=0,
        le=inputs.CRAWL_SLEEP_MAX,
        description="lru_crawler sleep (us per 1000 items listed) during the dump; default the server's",
    )


class PollingSpec(_Strict):
    """How CheckProgress polls. Together with the waits, these bound the execution's history: input
    whose worst case exceeds the budget is refused (cachewarm_controller.history)."""

    interval_seconds: int = Field(
        default=180, ge=5, le=3600, description="seconds between CheckProgress polls"
    )
    stale_after_seconds: int = Field(
        default=600, ge=60, le=86_400, description="a heartbeat older than this revives the agent"
    )
    # A node whose items/bytes/files/keys have not moved for this long is stalled, even with fresh
    # heartbeats: it is revived once, and fails the warm the second time.
    stalled_after_seconds: int = Field(
        default=1800,
        ge=300,
        le=86_400,
        description="no progress for this long: revived once, then the warm fails naming the node",
    )
    max_revives: int = Field(default=3, ge=0, le=50, description="revives per node before the warm fails")
    deadline_hours: float = Field(default=24.0, gt=0, le=240, description="the warm fails after this long")
    # Bounded waits for the survey, volumes, instances, attachments, agent install and verify (each
    # wait ~ a backoff of 5 .. 60 s).
    resource_wait_attempts: int = Field(
        default=40,
        ge=1,
        le=500,
        description="waiting passes of the survey, volume, launch, attach, install, verify loops",
    )


class VerifySpec(_Strict):
    """Verify runs `cachewarm verify --sample` (through `cachewarm agent verify` on the populator)
    for `sample_nodes` source nodes against the destination; a node fails when more than
    `max_difference_ratio` of its checked keys differ (live traffic keeps writing both replicas, so a
    few differences are expected). `require_item_match` also compares the agents' own counts."""

    sample_nodes: int = Field(
        default=16, ge=0, le=10_000, description="source nodes whose keys are compared with the destination"
    )
    sample_keys: int = Field(
        default=10_000, ge=1, le=inputs.SAMPLE_KEYS_MAX, description="keys compared per sampled node"
    )
    max_difference_ratio: float = Field(
        default=0.001, ge=0.0, le=1.0, description="share of a node's checked keys that may differ"
    )
    require_item_match: bool = Field(default=True, description="also compare the agents' own item counts")


class WarmInput(_Strict):
    """The state machine's input. See statemachine/README.md for an example."""

    warm_id: WarmId = Field(
        description="names the warm: claimed by one execution, on every resource it creates and its S3 prefix"
    )
    source: SourceSpec = Field(default_factory=SourceSpec, description="the replica to read")
    destination: DestinationSpec = Field(description="the replica to warm")
    populator: PopulatorSpec = Field(description="the instances that write the destination")
    # volume: an io2 multi-attach volume per node (the destination in the source node's AZ); s3: the
    # dumps travel through a bucket per warm (any zone or region; `s3` says where).
    transport: Literal["volume", "s3"] = Field(
        default="volume",
        description="volume: an io2 multi-attach volume per node (same AZ); s3: a bucket per warm",
    )
    volume: VolumeSpec = Field(default_factory=VolumeSpec, description="the volumes (transport volume)")
    s3: S3Spec | None = Field(default=None, description="the bucket and populator subnets (transport s3)")
    dumper: DumperSpec = Field(default_factory=DumperSpec, description="how each source node is read")
    polling: PollingSpec = Field(default_factory=PollingSpec, description="how progress is polled and judged")
    verify: VerifySpec = Field(default_factory=VerifySpec, description="the sample compared after the warm")
    status_prefix: Annotated[str, Field(pattern=inputs.STATUS_PREFIX)] = Field(
        default=inputs.DEFAULT_STATUS_PREFIX,
        description="the status objects' prefix in the stack's status bucket",
    )
    mount_dir: Annotated[str, Field(pattern=inputs.MOUNT_DIR)] = Field(
        default=inputs.DEFAULT_MOUNT_DIR, description="the agents mount the volume at <mount_dir>/<warm id>"
    )

    @model_validator(mode="after")
    def _transport(self) -> WarmInput:
        if self.transport == "s3" and self.s3 is None:
            raise ValueError(
                "transport s3 needs s3.subnet_ids (the destination region's subnets for the populators)"
            )
        if self.transport == "volume" and self.s3 is not None:
            raise ValueError('s3 is given but transport is "volume": set transport to "s3" or drop s3')
        if self.transport == "s3" and self.populator.subnet_ids:
            raise ValueError(
                "populator.subnet_ids picks subnets per source AZ for volumes; with transport s3 the "
                "populators go to s3.subnet_ids"
            )
        return self


def describe_errors(exc: ValidationError) -> str:
    """Every bad field of a validation error, by path (`source.instance_ids.0: ...`)."""
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '<input>'}: {err['msg']}" for err in exc.errors()
    )


def parse_input(raw: object) -> WarmInput:
    """Validate the raw execution input (Powertools' parser); the error names every bad field."""
    if not isinstance(raw, dict):
        raise InvalidInputError(f"input must be a JSON object, got {type(raw).__name__}")
    try:
        return parse(event=raw, model=WarmInput)
    except ValidationError as exc:
        raise InvalidInputError(f"invalid input: {describe_errors(exc)}") from None


def volume_size_gib(data_bytes: int, headroom: float, iops: int) -> int:
    """GiB for one node: data x headroom + overhead, at least what io2 needs for `iops`."""
    size = math.ceil(data_bytes * headroom / GIB) + FS_OVERHEAD_GIB
    size = max(size, IO2_MIN_GIB, math.ceil(iops / IO2_MAX_IOPS_PER_GIB))
    if size > IO2_MAX_GIB:
        raise InvalidInputError(
            f"a node holds {data_bytes} bytes; x{headroom} headroom needs {size} GiB, "
            f"above io2's {IO2_MAX_GIB} GiB volume limit"
        )
    return size
