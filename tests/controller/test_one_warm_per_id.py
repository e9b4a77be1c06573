"""One warm per warm id, atomically: two executions for one warm id, the second started at every step
of the first (EventBridge delivers at least once and names executions itself), end with exactly one
warm; the duplicate ends cleanly having written nothing, and tearing the duplicate down (its stop or
failure event) never touches the owner's resources. Launches of one Auto Scaling deployment map to
one warm id."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.controller.support import BUCKET
from tests.controller.test_state_machine import assert_nothing_left
from tests.controller.test_teardown_machine import status_change_event

STEPS = [
    "ValidateInput",
    "ClaimWarmId",
    "SurveyReplicas",
    "Plan",
    "CreateVolumes",
    "LaunchPopulators",
    "AttachVolumes",
    "InstallAgents",
    "StartAgents",
    "CheckProgress",
    "Verify",
    "Teardown",
]
DUPLICATE_PATH = ["ValidateInput", "ClaimWarmId", "WarmIdClaimed?", "AlreadyClaimed"]


def owned(world: Any) -> tuple[list[str], list[tuple[str, str]]]:
    """What the warm owns right now: its EC2 resources and attachments."""
    inv = world.inventory()
    ids = sorted([v["VolumeId"] for v in inv.volumes] + [i["InstanceId"] for i in inv.instances])
    atts = sorted((v, i) for v, t in world.attacher.table.items() for i in t)
    return ids, atts


@pytest.mark.parametrize("step", STEPS)
def test_a_second_execution_at_every_step_of_the_first(world: Any, step: str) -> None:
    body = world.make_input()
    seen: dict[str, Any] = {}

    def start_the_duplicate() -> None:
        before = owned(world)
        cancelled = list(world.agents.cancelled)
        second = world.wait(world.start(world.state_machine_arn, body))
        seen["second"] = second
        if second.entered() == DUPLICATE_PATH:
            # Its stop/failure event reaches the teardown machine: nothing of the owner's may go.
            event = status_change_event(json.dumps(body), "ABORTED", second.desc["executionArn"])
            seen["teardown"] = world.run_teardown(event)
            assert owned(world) == before
            assert world.agents.cancelled == cancelled and not world.agents.unmounted

    world.state_machine_arn = world.state_machine_arn or world.create_state_machine()
    world.before[step] = start_the_duplicate
    first = world.run(body)
    second = seen["second"]
    runs = sorted([first, second], key=lambda ex: ex.entered() == DUPLICATE_PATH)
    owner, duplicate = runs
    # Exactly one warm: the duplicate claimed nothing and ended cleanly; the owner warmed and tore down.
    assert duplicate.status == "SUCCEEDED" and duplicate.entered() == DUPLICATE_PATH
    claim = duplicate.outputs("ClaimWarmId")[0]["claim"]
    assert claim == {"owned": False, "owner": owner.desc["executionArn"]}
    assert owner.status == "SUCCEEDED" and owner.entered()[-1] == "WarmSucceeded", owner.entered()[-5:]
    if "teardown" in seen:
        assert seen["teardown"].status == "SUCCEEDED"
    # One set of agents was started, by the owner.
    started = [c for c in world.agents.command_params if c["document"] != "cachewarm-verify-agent"]
    assert len(started) == 6
    assert_nothing_left(world)
    claim_key = f"_controller/warms/_claims/{world.warm_id}.json"
    stored = json.loads(world.s3.get_object(Bucket=BUCKET, Key=claim_key)["Body"].read())
    assert stored["execution_arn"] == owner.desc["executionArn"]


def test_a_late_duplicate_after_the_warm_finished_is_still_a_duplicate(world: Any) -> None:
    """The claim outlives the teardown: an event redelivered hours later starts no second warm."""
    body = world.make_input()
    assert world.run(body).status == "SUCCEEDED"
    late = world.run(body)
    assert late.status == "SUCCEEDED" and late.entered() == DUPLICATE_PATH


def asg(world: Any, name: str, deployment: str | None, size: int = 2) -> None:
    tags = (
        [{"Key": "cachewarm:deployment", "Value": deployment, "PropagateAtLaunch": False}]
        if deployment
        else []
    )
    world.autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=name,
        LaunchTemplate={"LaunchTemplateId": world.template_id},
        MinSize=size,
        MaxSize=size,
        DesiredCapacity=size,
        VPCZoneIdentifier=world.subnets["us-east-1a"],
        Tags=[{"ResourceId": name, "ResourceType": "auto-scaling-group", **t} for t in tags],
    )


def launch_event_input(world: Any, group: str) -> dict[str, Any]:
    """What the Auto Scaling launch rule's input transformer sends (one per launched instance)."""
    return {"destination": {"asg_name": group}, "populator": {"launch_template_id": world.template_id}}


def test_launches_of_one_deployment_are_one_warm(world: Any) -> None:
    from cachewarm.contract.warm_ids import asg_warm_id
    from cachewarm_controller.steps.planning import validate

    group = f"Memcached-Replica-{world.serial}"
    asg(world, group, deployment="v42")
    world.allow(f"main-a->asg:{group}")
    ids = {validate(launch_event_input(world, group), world.deps).warm_id for _ in range(3)}
    assert ids == {asg_warm_id(group, "v42")}
    (warm_id,) = ids
    assert warm_id.startswith(f"memcached-replica-{world.serial}-")
    assert asg_warm_id(group, "v43") != warm_id  # the next deployment of the group is another warm
    # Two launch events of the deployment: one warm, one duplicate (source: main-a, by the input).
    body = {**launch_event_input(world, group), "source": {"replica": "main-a"}}
    first = world.run(body)
    second = world.run(body)
    assert first.status == "SUCCEEDED" and first.entered()[-1] == "WarmSucceeded", first.entered()[-4:]
    assert second.entered() == DUPLICATE_PATH
    world.warm_id = warm_id
    assert_nothing_left(world)


def test_a_group_without_a_deployment_tag_uses_its_creation_time(world: Any) -> None:
    from cachewarm_controller.steps.planning import validate

    group = f"memcached-untagged-{world.serial}"
    asg(world, group, deployment=None)
    world.allow(f"main-a->asg:{group}")
    a = validate(launch_event_input(world, group), world.deps).warm_id
    assert a == validate(launch_event_input(world, group), world.deps).warm_id
