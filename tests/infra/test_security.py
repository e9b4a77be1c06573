"""Issue 26 ("Let no one in where they don't belong"): template tests that fail if a closed door
opens again. One synth per session (conftest.py); docs/security.md is the threat model they guard."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk.assertions import Template

from tests.infra.support import MEMCACHED_SG, Synth

# ---- High 1: where a populator may send data ---------------------------------------------------------


def test_populators_reach_only_memcached_of_the_replicas_and_https(synth: Synth) -> None:
    [(sg_id, sg)] = synth.resources("AWS::EC2::SecurityGroup").items()
    egress = sg["Properties"]["SecurityGroupEgress"]
    assert [(e["CidrIp"], e["FromPort"], e["ToPort"], e["IpProtocol"]) for e in egress] == [
        ("0.0.0.0/0", 443, 443, "tcp")
    ]
    # The one other way out: memcached's port, to the replicas' group only.
    [rule] = synth.resources("AWS::EC2::SecurityGroupEgress").values()
    assert rule["Properties"] == {
        "Description": "memcached of the replicas (populate, verify)",
        "DestinationSecurityGroupId": MEMCACHED_SG,
        "FromPort": 11211,
        "GroupId": {"Fn::GetAtt": [sg_id, "GroupId"]},
        "IpProtocol": "tcp",
        "ToPort": 11211,
    }


def test_without_replica_groups_memcached_goes_to_private_addresses_only() -> None:
    from aws_cdk import App, Stack
    from aws_cdk import aws_ec2 as ec2
    from cachewarm_infra.compute import PRIVATE_RANGES, _limit_egress

    stack = Stack(App(), "Sg")
    vpc = ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-1", availability_zones=["a"])
    sg = ec2.SecurityGroup(stack, "G", vpc=vpc, allow_all_outbound=False)
    _limit_egress(sg, (), 11211)
    [group] = Template.from_stack(stack).find_resources("AWS::EC2::SecurityGroup").values()
    rules = {(e["CidrIp"], e["FromPort"]) for e in group["Properties"]["SecurityGroupEgress"]}
    assert rules == {*((c, 11211) for c in PRIVATE_RANGES), ("0.0.0.0/0", 443)}


def test_the_controller_is_told_its_vpc(synth: Synth) -> None:
    for fn in synth.resources("AWS::Lambda::Function").values():
        assert fn["Properties"]["Environment"]["Variables"]["VPC_ID"] == {"Ref": "VpcId"}


def test_every_rule_matches_this_account_only(synth: Synth) -> None:
    for lid, rule in synth.resources("AWS::Events::Rule").items():
        assert rule["Properties"]["EventPattern"]["account"] == [{"Ref": "AWS::AccountId"}], lid


def _statements_of(resource: dict[str, Any]) -> list[dict[str, Any]]:
    doc = resource["Properties"]["PolicyDocument"]
    return list(doc["Statement"])


del json
