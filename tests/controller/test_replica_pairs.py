"""The stack's replicaPairs as the controller reads them (REPLICA_PAIRS), and who counts as a node of a
replica: a tag alone never does."""

from __future__ import annotations

from typing import Any

import pytest
from cachewarm.contract.replicas import Pair, Side, format_pairs, parse_pairs, sources_for
from cachewarm_controller.handlers import replica_pairs
from cachewarm_controller.steps.pairs import membership_problem


def test_pairs_parse_both_kinds_of_side_and_refuse_nonsense() -> None:
    pairs = parse_pairs(" users-v1->users-v2 , users-v1->asg:memcached-b,users-v1->users-v2")
    assert pairs == (
        Pair(Side("replica", "users-v1"), Side("replica", "users-v2")),
        Pair(Side("replica", "users-v1"), Side("asg", "memcached-b")),
    )
    assert format_pairs(pairs) == "users-v1->users-v2,users-v1->asg:memcached-b"
    assert sources_for(pairs, Side("asg", "memcached-b")) == [Side("replica", "users-v1")]
    assert parse_pairs("") == () and parse_pairs([]) == ()
    for bad, named in (
        ("a-b", "SOURCE->DESTINATION"),
        ("a->b->c", "SOURCE->DESTINATION"),
        ("a->a", "cannot be warmed from itself"),
        ("a->b c", "not a replica name"),
        ("a->asg:", "not an Auto Scaling group name"),
    ):
        with pytest.raises(ValueError, match=named):
            parse_pairs(bad)


def test_a_bad_replica_pairs_environment_stops_the_lambda_naming_it() -> None:
    assert replica_pairs(None) == ()
    with pytest.raises(RuntimeError, match="REPLICA_PAIRS: replica pair 'a=b'"):
        replica_pairs("a=b")


def _node(tags: dict[str, str], groups: list[str]) -> dict[str, Any]:
    return {
        "InstanceId": "i-0123456789abcdef0",
        "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
        "SecurityGroups": [{"GroupId": g} for g in groups],
    }


def test_a_node_by_tag_counts_only_in_the_replicas_security_group() -> None:
    replica = Side("replica", "main-b")
    tagged = {"cachewarm:replica": "main-b"}
    assert membership_problem(_node(tagged, ["sg-1"]), replica, ("sg-1",)) is None
    assert "in none of the stack's memcached security groups" in str(
        membership_problem(_node(tagged, ["sg-2"]), replica, ("sg-1",))
    )
    assert "no memcached security group" in str(membership_problem(_node(tagged, ["sg-1"]), replica, ()))
    assert "not a node of main-b" in str(membership_problem(_node({}, ["sg-1"]), replica, ("sg-1",)))
    # An Auto Scaling group's instances: a tag only Auto Scaling sets is enough.
    group = Side("asg", "memcached-b")
    in_group = {"aws:autoscaling:groupName": "memcached-b"}
    assert membership_problem(_node(in_group, []), group, ()) is None
    assert membership_problem(_node(tagged, ["sg-1"]), group, ("sg-1",)) is not None
