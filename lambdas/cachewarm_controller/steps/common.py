"""What every step shares: its injected dependencies, the Lambdas' settings, which execution runs it,
the plan, and the shape of one pass of a loop."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cachewarm.contract.replicas import Pair

from cachewarm_controller.agents import AgentRunner
from cachewarm_controller.attach import VolumeAttacher
from cachewarm_controller.budget import EC2_MUTATIONS_PER_S, Deadline, Pacer
from cachewarm_controller.errors import PlanError, WaitTimedOutError
from cachewarm_controller.model import WarmInput
from cachewarm_controller.plan import WarmPlan
from cachewarm_controller.regions import RegionClients, RegionFactory, RoutedAgents
from cachewarm_controller.store import S3Store, StatusReader

MAX_BACKOFF_S = 60


@dataclass(frozen=True)
class Documents:
    """This stack's SSM documents (their deployed names), one per job on an instance."""

    dump: str
    populate: str
    verify: str
    install: str
    unmount: str
    stats: str


@dataclass(frozen=True)
class RemoteRegion:
    """A destination region's resources, deployed by the stack's app there (DESTINATION_REGION_SETTINGS):
    a cross-region warm's populators launch only from its template, only into its VPC, and find
    their destination there; commands there run its documents (`documents`: the home name -> the
    region's name, when they differ) and send output to its log group."""

    vpc_id: str
    launch_template_id: str
    agent_log_group: str | None = None
    documents: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Settings:
    """What the Lambdas read from their environment (set by the CDK stack)."""

    status_bucket: str
    documents: Documents
    kms_key_id: str | None = None
    # Deploy-time default populator subnets (parameter SubnetIds); the input's per-AZ choice wins.
    populator_subnet_ids: tuple[str, ...] = ()
    # The stack's VPC: sources and destinations are found only among its instances (None: any VPC
    # of the account; the stack always sets it, VPC_ID).
    vpc_id: str | None = None
    # This stack's cachewarm:stack tag value (STACK_TAG): on everything the controller creates; its IAM
    # lets it create, attach, terminate and command only what carries it.
    stack_tag: str | None = None
    # This stack's populator launch template (POPULATOR_LAUNCH_TEMPLATE_ID): the only one its IAM may
    # launch from, so an input naming another is refused at ValidateInput.
    launch_template_id: str | None = None
    # The populators' instance roles (POPULATOR_ROLE_ARNS): an S3 transport bucket lets them only read.
    populator_role_arns: tuple[str, ...] = ()
    # The controller Lambdas' role (CONTROLLER_ROLE_ARN): besides the warm's own instances, the only
    # principal an S3 transport bucket's policy lets reach its objects.
    controller_role_arn: str | None = None
    # The S3 transport buckets' name prefix (TRANSPORT_BUCKET_PREFIX): the stack's IAM allows the
    # controller and the agents only buckets named so.
    transport_bucket_prefix: str = "cw-"
    # The regions a cross-region S3 warm may launch populators in (DESTINATION_REGIONS, the stack's
    # destinationRegions prop): its IAM allows EC2 and SSM there and nowhere else.
    destination_regions: tuple[str, ...] = ()
    # Each destination region's fixed VPC, launch template, documents and log group.
    remote_regions: Mapping[str, RemoteRegion] = field(default_factory=dict)
    # The version of every SSM document SendCommand runs (DOCUMENT_VERSION): the stack names each
    # document after its content, so version 1 is what it deployed; None: the default version.
    document_version: str | None = None
    # Which replicas may be warmed from which (REPLICA_PAIRS, the stack's replicaPairs): none = no warm.
    replica_pairs: tuple[Pair, ...] = ()
    # The memcached nodes' security groups (MEMCACHED_SECURITY_GROUP_IDS): a node found by its
    # cachewarm:replica tag counts only when it is in one of them (`pairs`).
    memcached_security_groups: tuple[str, ...] = ()


@dataclass
class Deps:
    """Everything a step touches, injected (tests pass moto clients and fakes)."""

    ec2: Any
    s3: S3Store
    agents: AgentRunner
    attacher: VolumeAttacher
    settings: Settings
    statuses: StatusReader | None = None  # defaults to the S3 store
    autoscaling: Any = None
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    deadline: Deadline = field(default_factory=Deadline)
    # Another region's EC2 client and SSM runner (a cross-region S3 warm's populators); None: this
    # controller reaches its own region only.
    regions: RegionFactory | None = None
    # Step Functions (DescribeExecution): the teardown machine checks the execution it is given.
    executions: Any = None

    def in_region(self, region: str | None) -> RegionClients:
        """The clients of `region`; None = the controller's own."""
        if region is None:
            return RegionClients(self.ec2, self.agents)
        if self.regions is None:
            raise PlanError(f"this controller has no clients for region {region}")
        return self.regions(region)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def status_reader(self) -> StatusReader:
        return self.statuses if self.statuses is not None else self.s3

    def ec2_pacer(self) -> Pacer:
        return Pacer(EC2_MUTATIONS_PER_S, clock=self.clock, sleep=self.sleep)


@dataclass(frozen=True)
class Warm:
    """The warm a step works on: its validated input and the execution that owns it (every resource
    it creates is tagged with both; teardown touches only what carries this execution's tag)."""

    inp: WarmInput
    execution_arn: str

    @property
    def warm_id(self) -> str:
        return self.inp.warm_id

    @property
    def prefix(self) -> str:
        return self.inp.status_prefix

    @property
    def region(self) -> str:
        """The execution's region (arn:<partition>:states:<region>:<account>:execution:...)."""
        return self.execution_arn.split(":")[3]

    @property
    def account(self) -> str:
        return self.execution_arn.split(":")[4]

    @property
    def populator_region(self) -> str | None:
        """The populators' region when it is not the controller's (a cross-region S3 warm), else None."""
        return populator_region(self.inp.s3.destination_region if self.inp.s3 else None, self.region)


def populator_region(destination_region: str | None, own_region: str) -> str | None:
    return destination_region if destination_region and destination_region != own_region else None


def populator_clients(warm: Warm, deps: Deps) -> RegionClients:
    """EC2 and SSM where the warm's populators run."""
    return deps.in_region(warm.populator_region)


def routed(deps: Deps, region: str | None, plan: WarmPlan | None) -> Deps:
    """`deps` whose agents reach the plan's populators in `region` (unchanged when None): the steps
    after LaunchPopulators command both regions through it."""
    if region is None or plan is None:
        return deps
    remote = deps.in_region(region).agents
    ids = frozenset(str(r.populator_id) for r in plan.nodes if r.populator_id)
    return replace(deps, agents=RoutedAgents(deps.agents, remote, region, ids))


def backoff_seconds(attempt: int, base: int = 5) -> int:
    return int(min(base * 2 ** min(attempt, 10), MAX_BACKOFF_S))


def load_plan(warm: Warm, deps: Deps) -> WarmPlan:
    """The plan Plan saved; every later step starts from it."""
    plan = deps.s3.load_plan(warm.prefix, warm.warm_id)
    if plan is None:
        raise PlanError(
            f"no plan for warm {warm.warm_id} in s3://{deps.settings.status_bucket} (Plan did not run?)"
        )
    if plan.execution_arn and plan.execution_arn != warm.execution_arn:
        raise PlanError(
            f"the plan of warm {warm.warm_id} belongs to {plan.execution_arn}, not this execution"
        )
    return plan


def pass_result(
    state: Mapping[str, int],
    *,
    ready: bool,
    progressed: bool,
    limit: int,
    what: str,
    pending: Sequence[str],
    **extra: Any,
) -> dict[str, Any]:
    """The output of one pass of a looping step: `ready`, or how long to wait before the next pass
    (none after a pass that did work). At `limit` passes without being ready, WaitTimedOutError."""
    passes = state.get("passes", 0) + 1
    waits = state.get("waits", 0) + (0 if ready or progressed else 1)
    if not ready and passes >= limit:
        raise WaitTimedOutError(
            f"{what} not ready after {passes} passes; still waiting for: {', '.join(list(pending)[:10])}"
        )
    return {
        "ready": ready,
        "passes": passes,
        "waits": waits,
        "wait_seconds": 0 if ready or progressed else backoff_seconds(waits - 1),
        "pending": len(pending),
        **extra,
    }
