"""Issue 26, High 1: a warm writes only to nodes of the destination replica in this account and the
stack's VPC. Whoever can start an execution (an event, StartExecution) must not be able to send a
replica's data to a host of their choosing: a given endpoint that is not a tagged instance's private
address is refused at ValidateInput, before anything is created."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cachewarm.contract.tags import REPLICA
from cachewarm_controller.errors import InvalidInputError
from cachewarm_controller.steps.planning import validate

from tests.controller.support import AMI
from tests.controller.test_state_machine import snapshot


def _ips(world: Any, replica: str) -> list[str]:
    found = world.ec2.describe_instances(
        Filters=[
            {"Name": f"tag:{REPLICA}", "Values": [replica]},
            {"Name": "instance-state-name", "Values": ["running"]},
        ]
    )
    return sorted(i["PrivateIpAddress"] for r in found["Reservations"] for i in r["Instances"])


def _instance(world: Any, subnet: str, tags: dict[str, str]) -> dict[str, Any]:
    spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
    return world.ec2.run_instances(
        ImageId=AMI,
        InstanceType="r5.large",
        MinCount=1,
        MaxCount=1,
        SubnetId=subnet,
        TagSpecifications=spec if tags else [],
    )["Instances"][0]


def test_endpoints_of_the_destination_replica_are_accepted(world: Any) -> None:
    endpoints = [f"{ip}:11211" for ip in _ips(world, "main-b")]
    inp = validate(world.make_input(destination={"replica": "main-b", "endpoints": endpoints}), world.deps)
    assert inp.destination.endpoints == endpoints
    # Without a replica name no pair of the configuration can be checked: refused.
    with pytest.raises(InvalidInputError, match="destination: name the replica"):
        validate(world.make_input(destination={"endpoints": endpoints[:1]}), world.deps)


@pytest.mark.parametrize("where", ["outside", "untagged", "other-replica", "other-vpc", "tag-only"])
def test_an_endpoint_that_is_not_a_destination_node_is_refused(world: Any, where: str) -> None:
    good = f"{_ips(world, 'main-b')[0]}:11211"
    made: list[str] = []
    if where == "outside":
        bad = "203.0.113.7"
    elif where == "untagged":
        inst = _instance(world, world.subnets["us-east-1a"], {})
        made.append(inst["InstanceId"])
        bad = inst["PrivateIpAddress"]
    elif where == "other-replica":
        bad = _ips(world, "main-a")[0]  # the source replica's own node
    elif where == "tag-only":  # the replica tag, but not in the replicas' security group
        inst = _instance(world, world.subnets["us-east-1a"], {REPLICA: "main-b"})
        made.append(inst["InstanceId"])
        bad = inst["PrivateIpAddress"]
    else:
        vpc = world.ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
        subnet = world.ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.1.0/24", AvailabilityZone="us-east-1a")
        inst = _instance(world, subnet["Subnet"]["SubnetId"], {REPLICA: "main-b"})
        made.append(inst["InstanceId"])
        bad = inst["PrivateIpAddress"]
    try:
        raw = world.make_input(destination={"replica": "main-b", "endpoints": [good, f"{bad}:11211"]})
        with pytest.raises(InvalidInputError, match=rf"destination\.endpoints refused: {bad}"):
            validate(raw, world.deps)
    finally:
        if made:
            world.ec2.terminate_instances(InstanceIds=made)


def test_a_hostname_that_is_no_instance_is_refused(world: Any) -> None:
    raw = world.make_input(destination={"replica": "main-b", "endpoints": ["exfil.example.com:11211"]})
    with pytest.raises(InvalidInputError, match=r"exfil\.example\.com is not the private address"):
        validate(raw, world.deps)


def test_an_execution_naming_an_outside_address_creates_nothing(world: Any) -> None:
    """Through the real state machine: refused at ValidateInput, before a claim, command, volume or
    instance exists."""
    before = snapshot(world)
    ex = world.run(world.make_input(destination={"replica": "main-b", "endpoints": ["198.51.100.9:11211"]}))
    assert ex.status == "FAILED"
    failure = ex.failure()
    assert failure["error"] == "InvalidInputError"
    assert "198.51.100.9" in json.loads(failure["cause"])["errorMessage"]
    assert ex.entered() == ["ValidateInput", "InputRejected"]
    assert snapshot(world) == before


def test_sources_and_destinations_are_found_only_in_the_stacks_vpc(world: Any) -> None:
    """A replica tag on an instance of another VPC does not make it a source or destination."""
    vpc = world.ec2.create_vpc(CidrBlock="10.8.0.0/16")["Vpc"]["VpcId"]
    subnet = world.ec2.create_subnet(VpcId=vpc, CidrBlock="10.8.1.0/24", AvailabilityZone="us-east-1a")
    stray = _instance(world, subnet["Subnet"]["SubnetId"], {REPLICA: "stray-replica"})
    try:
        from cachewarm_controller.errors import PlanError
        from cachewarm_controller.model import parse_input
        from cachewarm_controller.steps.inventory import candidate_sources, destination_endpoints

        world.allow("stray-replica->main-b", "main-a->stray-replica")
        settings = world.deps.settings
        scope = (settings.replica_pairs, settings.memcached_security_groups, settings.vpc_id)
        inp = parse_input(world.make_input(source={"replica": "stray-replica"}))
        with pytest.raises(PlanError, match="stray-replica"):
            candidate_sources(inp, world.ec2, *scope)
        inp = parse_input(world.make_input(destination={"replica": "stray-replica"}))
        with pytest.raises(PlanError, match="no running instances to warm"):
            destination_endpoints(inp, world.ec2, set(), *scope[1:])
    finally:
        world.ec2.terminate_instances(InstanceIds=[stray["InstanceId"]])
