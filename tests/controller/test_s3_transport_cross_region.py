"""A cross-region S3 warm (issue 25) under moto's Step Functions interpreter: the real ASL and
handlers, moto's S3 and EC2 in two regions (mock_aws keeps one backend per region). The bucket is made
in the controller's region (us-east-1); the populators are launched in the destination region's
subnets (us-west-2) from the template the stack deployed there, into its fixed VPC, commanded through
that region's SSM, read the bucket with `--s3-region us-east-1`, and are terminated there on every way
the execution ends — with the bucket deleted. A template, subnet or destination of that region the
stack did not name is refused before anything is created."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from cachewarm.contract import tags
from cachewarm.contract.replicas import parse_pairs
from cachewarm_controller.agents import Invocation
from cachewarm_controller.regions import RegionClients
from cachewarm_controller.steps.common import RemoteRegion

from tests.controller.agent_sim import AgentSim
from tests.controller.support import AMI, POPULATE_DOC, REGION, World
from tests.controller.test_s3_transport_machine import (  # noqa: F401 (autouse fixtures)
    as_the_stack_sets_it,
    assert_no_bucket,
    fill_bucket,
    moto_reads_bucket_policies_as_denies,
    warm_buckets,
)
from tests.controller.test_teardown_machine import status_change_event

FAR = "us-west-2"


@dataclass
class Far:
    """The destination region: its EC2 client, subnets, populator template and destination replica."""

    ec2: Any
    vpc: str
    subnets: list[str]
    template_id: str
    destination_ids: list[str]
    memcached_sg: str = ""  # the far replicas' security group (the stack names it too)


@dataclass
class FarSsm:
    """The destination region's SSM runner: checks that every instance it is asked about is an
    instance of that region, records what went through it, and lets the shared AgentSim act (the
    statuses the populators write land in the source region's status bucket either way)."""

    sim: AgentSim
    ec2: Any
    sent: list[str] = field(default_factory=list)  # command ids
    asked: list[str] = field(default_factory=list)  # command ids looked up or cancelled

    def _here(self, instance_ids: Sequence[str]) -> None:
        found = {
            i["InstanceId"]
            for r in self.ec2.describe_instances(InstanceIds=list(instance_ids))["Reservations"]
            for i in r["Instances"]
        }
        assert found == set(instance_ids), f"not instances of {FAR}: {set(instance_ids) - found}"

    def send(
        self, document: str, instance_ids: Sequence[str], parameters: Mapping[str, str], comment: str
    ) -> str:
        self._here(instance_ids)
        self.sim.region_of.update(dict.fromkeys(instance_ids, FAR))  # they write under their own ARNs
        cid = self.sim.send(document, instance_ids, parameters, comment)
        self.sent.append(cid)
        return cid

    def find_sent(self, document: str, instance_id: str, since_ms: int, comment: str) -> str | None:
        self._here([instance_id])
        return self.sim.find_sent(document, instance_id, since_ms, comment)

    def command_states(self, command_ids: Sequence[str]) -> dict[str, str]:
        assert set(command_ids) <= set(self.sent), "a command of another region asked here"
        self.asked.extend(command_ids)
        return self.sim.command_states(command_ids)

    def invocations(self, command_id: str) -> dict[str, Invocation]:
        assert command_id in self.sent
        return self.sim.invocations(command_id)

    def cancel(self, command_ids: Sequence[str]) -> None:
        assert set(command_ids) <= set(self.sent), "a command of another region cancelled here"
        self.asked.extend(command_ids)
        self.sim.cancel(command_ids)

    def online(self, instance_ids: Sequence[str]) -> set[str]:
        self._here(instance_ids)
        return self.sim.online(instance_ids)


@pytest.fixture(scope="module")
def far(shared_world: World) -> Far:
    ec2 = boto3.client("ec2", region_name=FAR)
    vpc = ec2.create_vpc(CidrBlock="10.8.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=az)["Subnet"]["SubnetId"]
        for az, cidr in ((f"{FAR}a", "10.8.16.0/20"), (f"{FAR}b", "10.8.32.0/20"))
    ]
    sg = ec2.create_security_group(GroupName="memcached", Description="replicas", VpcId=vpc)["GroupId"]
    template_id = ec2.create_launch_template(
        LaunchTemplateName="cachewarm-populator",
        LaunchTemplateData={"ImageId": _ami(ec2), "InstanceType": "m5.large"},
        TagSpecifications=[
            {"ResourceType": "launch-template", "Tags": [{"Key": tags.STACK, "Value": "cachewarm-test"}]}
        ],
    )["LaunchTemplate"]["LaunchTemplateId"]
    dest = ec2.run_instances(
        ImageId=_ami(ec2),
        InstanceType="r5.large",
        MinCount=2,
        MaxCount=2,
        SubnetId=subnets[0],
        SecurityGroupIds=[sg],
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": tags.REPLICA, "Value": "main-w"}]}],
    )
    return Far(ec2, vpc, subnets, template_id, [i["InstanceId"] for i in dest["Instances"]], sg)


def _ami(ec2: Any) -> str:
    """moto's built-in AMIs differ per region: the source region's, else any of this one's."""
    try:
        return str(ec2.describe_images(ImageIds=[AMI])["Images"][0]["ImageId"])
    except ClientError:
        return str(ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"])


@pytest.fixture
def cross(world: World, far: Far) -> FarSsm:
    """The world with a factory for the destination region's clients (the controller's region gets
    none: a call for it would be a bug)."""
    ssm = FarSsm(world.agents, far.ec2)

    def in_region(region: str) -> RegionClients:
        assert region == FAR, region
        return RegionClients(far.ec2, ssm)

    world.deps.regions = in_region
    settings = world.deps.settings
    world.deps.settings = replace(
        settings,
        destination_regions=(FAR,),
        remote_regions={FAR: RemoteRegion(vpc_id=far.vpc, launch_template_id=far.template_id)},
        replica_pairs=(*settings.replica_pairs, *parse_pairs("main-a->main-w")),
        memcached_security_groups=(*settings.memcached_security_groups, far.memcached_sg),
    )
    return ssm


def cross_input(world: World, far: Far, **s3: Any) -> dict[str, Any]:
    spec = {"destination_region": FAR, "subnet_ids": far.subnets, **s3}
    return world.make_input(
        transport="s3",
        s3=spec,
        destination={"replica": "main-w"},
        populator={"launch_template_id": far.template_id},
    )


def far_instances(world: World, far: Far) -> list[dict[str, Any]]:
    flt = [
        {"Name": f"tag:{tags.WARM_ID}", "Values": [world.warm_id]},
        {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
    ]
    return [i for r in far.ec2.describe_instances(Filters=flt)["Reservations"] for i in r["Instances"]]


def assert_nothing_left_anywhere(world: World, far: Far) -> None:
    assert_no_bucket(world)  # the bucket, the source region's instances and volumes, the objects
    assert far_instances(world, far) == []
    vols = far.ec2.describe_volumes(Filters=[{"Name": f"tag:{tags.WARM_ID}", "Values": [world.warm_id]}])
    assert [v for v in vols["Volumes"] if v["State"] != "deleted"] == []


def routed_right(world: World, far: Far, ssm: FarSsm) -> None:
    """Every command to a destination-region instance went through that region's SSM, no other."""
    far_ids = {i["InstanceId"] for i in far_instances(world, far)} | set(ssm_targets(world, ssm))
    for cid, cmd in world.agents.commands.items():
        there = bool(set(cmd.instance_ids) & far_ids)
        assert there == (cid in ssm.sent), (cmd.document, cmd.instance_ids)


def ssm_targets(world: World, ssm: FarSsm) -> list[str]:
    return [i for cid in ssm.sent for i in world.agents.commands[cid].instance_ids]


def test_a_cross_region_s3_warm_runs_in_both_regions_and_leaves_nothing(
    world: World, far: Far, cross: FarSsm
) -> None:
    world.agents.store = world.deps.s3
    seen: dict[str, Any] = {}

    def inspect() -> None:  # before StartAgents: populators in the far region only, the bucket here
        (name,) = warm_buckets(world)
        seen["bucket"] = name
        seen["location"] = world.s3.get_bucket_location(Bucket=name).get("LocationConstraint")
        seen["far"] = far_instances(world, far)
        seen["near"] = world.inventory().instances
        fill_bucket(world)

    world.before["StartAgents"] = inspect
    ex = world.run(cross_input(world, far))
    assert ex.status == "SUCCEEDED", ex.desc
    assert seen["location"] in (None, "", REGION)  # us-east-1 answers without a constraint
    assert seen["near"] == []
    pops = seen["far"]
    assert len(pops) == 3 and {p["SubnetId"] for p in pops} <= set(far.subnets)
    assert {p["Placement"]["AvailabilityZone"][:-1] for p in pops} == {FAR}
    # Populators across the destination's subnets, one after another.
    assert {p["SubnetId"] for p in pops} == set(far.subnets)
    populates = [c for c in world.agents.commands.values() if c.document == POPULATE_DOC]
    assert len(populates) == 3
    for cmd in populates:
        assert cmd.parameters["s3Region"] == REGION  # the bucket's region, read cross-region
        # The populator's ARN is of the far region: its IAM reaches only keys naming it.
        node, pop = cmd.parameters["nodeId"], cmd.instance_ids[0]
        source_arn = f"arn:aws:ec2:{REGION}:123456789012:instance/{node}"
        pop_arn = f"arn:aws:ec2:{FAR}:123456789012:instance/{pop}"
        assert cmd.parameters["fromS3"] == f"s3://{seen['bucket']}/dumps/{source_arn}/{pop_arn}/{node}"
        assert set(cmd.parameters["to"].split(",")) == {
            f"{i['PrivateIpAddress']}:11211"
            for r in far.ec2.describe_instances(InstanceIds=far.destination_ids)["Reservations"]
            for i in r["Instances"]
        }
    routed_right(world, far, cross)
    assert cross.asked  # progress and verify looked the populators' commands up in their region
    assert set(ssm_targets(world, cross)) == {p["InstanceId"] for p in pops}
    assert_nothing_left_anywhere(world, far)


@pytest.mark.parametrize(
    "state",
    [
        "Plan",
        "LaunchPopulators",
        "CreateTransport",
        "InstallAgents",
        "StartAgents",
        "CheckProgress",
        "Verify",
    ],
)
def test_a_failing_cross_region_warm_leaves_nothing_in_either_region(
    world: World, far: Far, cross: FarSsm, state: str
) -> None:
    world.agents.store = world.deps.s3
    if state not in ("Plan", "LaunchPopulators", "CreateTransport"):
        world.before["InstallAgents"] = lambda: fill_bucket(world)
    world.faults[state] = "after"
    ex = world.run(cross_input(world, far))
    assert ex.status == "FAILED", ex.desc
    assert ex.entered()[-1] == "WarmFailed", ex.entered()
    assert_nothing_left_anywhere(world, far)
    if state in ("StartAgents", "CheckProgress"):  # the populators' commands were cancelled there
        assert set(world.agents.cancelled) & set(cross.asked) & set(cross.sent)


def test_a_stopped_cross_region_warm_is_torn_down_from_the_event(
    world: World, far: Far, cross: FarSsm
) -> None:
    """ABORTED / TIMED_OUT: no Catch runs; the EventBridge rule's teardown finds the far populators
    from the execution's input (s3.destination_region)."""
    world.agents.store = world.deps.s3
    world.before["InstallAgents"] = lambda: fill_bucket(world)
    world.faults["StartAgents"] = "after"
    world.faults["Teardown"] = "before"
    body = cross_input(world, far)
    ex = world.run(body)
    assert ex.status == "FAILED" and ex.entered()[-1] == "TeardownFailed", ex.entered()
    assert len(far_instances(world, far)) == 3 and len(warm_buckets(world)) == 1
    world.faults.clear()
    torn = world.run_teardown(status_change_event(json.dumps(body), "ABORTED", ex.desc["executionArn"]))
    assert torn.status == "SUCCEEDED", torn.desc
    assert set(world.agents.cancelled) & set(cross.asked)  # the populate commands, in their region
    assert_nothing_left_anywhere(world, far)


def test_a_far_template_the_stack_did_not_deploy_is_refused_even_with_its_tag(
    world: World, far: Far, cross: FarSsm
) -> None:
    """Tags are labels: a template tagged like the stack's is still not the one it deployed."""
    other = far.ec2.create_launch_template(
        LaunchTemplateName=f"not-ours-{world.warm_id}",
        LaunchTemplateData={"ImageId": _ami(far.ec2), "InstanceType": "m5.large"},
        TagSpecifications=[
            {"ResourceType": "launch-template", "Tags": [{"Key": tags.STACK, "Value": "cachewarm-test"}]}
        ],
    )["LaunchTemplate"]["LaunchTemplateId"]
    body = cross_input(world, far)
    body["populator"] = {"launch_template_id": other}
    ex = world.run(body)
    assert ex.status == "FAILED" and ex.failure()["error"] == "InvalidInputError", ex.failure()
    cause = ex.failure()["cause"]
    assert other in cause and far.template_id in cause and FAR in cause
    assert_nothing_left_anywhere(world, far)


def test_far_subnets_and_destinations_outside_the_fixed_vpc_are_refused(
    world: World, far: Far, cross: FarSsm
) -> None:
    """Another VPC of the destination region: its subnets fail Plan, its replica nodes are no
    destination (before this, a remote warm searched every VPC of the region)."""
    vpc = far.ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnet = far.ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.16.0/20", AvailabilityZone=f"{FAR}a")["Subnet"][
        "SubnetId"
    ]
    ex = world.run(cross_input(world, far, subnet_ids=[subnet]))
    assert ex.status == "FAILED" and ex.failure()["error"] == "PlanError", ex.failure()
    assert subnet in ex.failure()["cause"] and far.vpc in ex.failure()["cause"]
    assert_nothing_left_anywhere(world, far)

    foreign = far.ec2.run_instances(
        ImageId=_ami(far.ec2),
        InstanceType="r5.large",
        MinCount=1,
        MaxCount=1,
        SubnetId=subnet,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": tags.REPLICA, "Value": "main-w"}]}],
    )["Instances"][0]
    body = cross_input(world, far)
    body["destination"] = {"replica": "main-w", "endpoints": [f"{foreign['PrivateIpAddress']}:11211"]}
    ex = world.run(body)
    assert ex.status == "FAILED" and ex.failure()["error"] == "InvalidInputError", ex.failure()
    assert foreign["PrivateIpAddress"] in ex.failure()["cause"]
    assert_nothing_left_anywhere(world, far)
    far.ec2.terminate_instances(InstanceIds=[foreign["InstanceId"]])


def test_an_unknown_far_subnet_fails_at_plan_naming_the_region(world: World, far: Far, cross: FarSsm) -> None:
    ex = world.run(cross_input(world, far, subnet_ids=["subnet-0123456789abcdef0"]))
    assert ex.status == "FAILED"
    assert "subnet-0123456789abcdef0" in ex.failure()["cause"] and FAR in ex.failure()["cause"]
    assert_nothing_left_anywhere(world, far)
