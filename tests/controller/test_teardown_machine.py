"""statemachine/teardown.asl.json under moto's interpreter: what a stopped (ABORTED), timed-out
(TIMED_OUT) or failed (FAILED) warm execution leaves behind is torn down from the EventBridge event
alone — and only what that execution created."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.controller.support import ACCOUNT, REGION
from tests.controller.test_state_machine import assert_nothing_left

WARM_MACHINE_ARN = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:cachewarm"
EXECUTION_PREFIX = f"arn:aws:states:{REGION}:{ACCOUNT}:execution:cachewarm:"


def status_change_event(
    execution_input: str, status: str = "ABORTED", execution_arn: str = f"{EXECUTION_PREFIX}run-1"
) -> dict[str, Any]:
    """An EventBridge 'Step Functions Execution Status Change' event as the rule delivers it."""
    return {
        "version": "0",
        "id": "315c1398-40ff-a850-213b-158f73e60175",
        "detail-type": "Step Functions Execution Status Change",
        "source": "aws.states",
        "account": ACCOUNT,
        "time": "2026-11-22T07:00:00Z",
        "region": REGION,
        "resources": [execution_arn],
        "detail": {
            "executionArn": execution_arn,
            "stateMachineArn": WARM_MACHINE_ARN,
            "name": execution_arn.rsplit(":", 1)[-1],
            "status": status,
            "startDate": 1795330800000,
            "stopDate": 1795334400000,
            "input": execution_input,
            "inputDetails": {"included": True},
            "output": None,
            "outputDetails": None,
            "error": None,
            "cause": None,
        },
    }


def leave_a_running_warm_behind(world: Any) -> tuple[dict[str, Any], str]:
    """What a stopped execution leaves: volumes, populators, attachments, agent commands and status
    objects. A warm that fails after StartAgents and whose own Teardown fails gets there."""
    world.agents.store = world.deps.s3
    world.faults["StartAgents"] = "after"
    world.faults["Teardown"] = "before"
    body = world.make_input(status_prefix="warms", mount_dir="/mnt/cachewarm")
    ex = world.run(body)
    assert ex.status == "FAILED" and ex.entered()[-1] == "TeardownFailed", ex.entered()
    execution_arn = ex.desc["executionArn"]
    plan = world.deps.s3.load_plan("warms", world.warm_id)
    assert len({r.volume_id for r in plan.nodes} | {r.populator_id for r in plan.nodes} - {None}) == 6
    assert any(world.attacher.table.values())
    assert world.status_objects()  # at least the plan
    world.faults.clear()
    world.invocations.clear()
    return body, execution_arn


@pytest.mark.parametrize("status", ["ABORTED", "TIMED_OUT", "FAILED"])
def test_a_stopped_warm_is_torn_down_from_the_event(world: Any, status: str) -> None:
    body, arn = leave_a_running_warm_behind(world)
    ex = world.run_teardown(status_change_event(json.dumps(body), status, arn))
    assert ex.status == "SUCCEEDED", ex.desc
    entered = ex.entered()
    assert entered[:2] == ["WaitForInFlightSteps", "Teardown"] and entered[-1] == "TornDown"
    assert set(world.invocations) == {"Teardown"}
    passes = ex.outputs("Teardown")
    assert [p["teardown"]["passes"] for p in passes] == list(range(1, len(passes) + 1))
    assert passes[-1]["teardown"]["complete"] is True
    # The event reached every pass unchanged (the attempt counter rides beside it in $.teardown).
    assert all(p["detail"]["input"] == json.dumps(body) for p in passes)
    # The running populate commands were cancelled (the simulated dumps had finished), the volume
    # unmounted on both hosts before it was detached, everything else deleted.
    running = [
        cid for (role, _), runs in world.agents.sent.items() if role == "populate" for cid, _, _ in runs
    ]
    assert len(running) == 3 and set(running) <= set(world.agents.cancelled)
    assert world.agents.unmounted and all(
        mp == f"/mnt/cachewarm/{world.warm_id}" for _, mp in world.agents.unmounted
    )
    unmounted = {i for hosts, _ in world.agents.unmounted for i in hosts}
    assert set(world.source_ids) <= unmounted  # the source nodes
    assert len(unmounted - set(world.source_ids)) == 3  # and the populators
    assert_nothing_left(world)


def test_a_repeated_event_is_harmless(world: Any) -> None:
    """EventBridge delivers at least once: a second event for the same warm finds nothing left,
    makes one pass and succeeds."""
    body, arn = leave_a_running_warm_behind(world)
    event = status_change_event(json.dumps(body), execution_arn=arn)
    assert world.run_teardown(event).status == "SUCCEEDED"
    again = world.run_teardown(event)
    assert again.status == "SUCCEEDED"
    assert again.entered() == ["WaitForInFlightSteps", "Teardown", "TeardownComplete?", "TornDown"]
    assert_nothing_left(world)


def test_a_failed_warm_that_tore_itself_down_is_harmless_to_tear_down_again(world: Any) -> None:
    """The rule also fires for FAILED: a warm that failed through its own Catch and Teardown is
    torn down once more, which finds nothing and succeeds."""
    world.faults["StartAgents"] = "after"
    body = world.make_input()
    ex = world.run(body)
    assert ex.status == "FAILED" and ex.entered()[-1] == "WarmFailed"
    assert_nothing_left(world)
    world.faults.clear()
    world.invocations.clear()
    again = world.run_teardown(status_change_event(json.dumps(body), "FAILED", ex.desc["executionArn"]))
    assert again.status == "SUCCEEDED"
    assert again.entered() == ["WaitForInFlightSteps", "Teardown", "TeardownComplete?", "TornDown"]
    assert world.invocations == ["Teardown"]
    assert_nothing_left(world)


@pytest.mark.parametrize(
    "execution_input",
    [{"warm_id": "Bad Id!"}, {"source": {"replica": "main-a"}}, ""],
)
def test_an_event_whose_input_was_rejected_tears_down_nothing(world: Any, execution_input: Any) -> None:
    """A failed execution whose input ValidateInput rejected created nothing: its event (FAILED)
    finds no plan and succeeds (no second alarm for a bad input)."""
    rejected = world.run(execution_input)
    assert rejected.entered() == ["ValidateInput", "InputRejected"]
    arn = rejected.desc["executionArn"]
    ex = world.run_teardown(status_change_event(json.dumps(execution_input), "FAILED", arn))
    assert ex.status == "SUCCEEDED", ex.desc
    assert ex.entered() == ["WaitForInFlightSteps", "Teardown", "TeardownComplete?", "TornDown"]


def test_an_event_without_an_execution_arn_fails_naming_it(world: Any) -> None:
    event = status_change_event(json.dumps({"warm_id": world.warm_id}))
    del event["detail"]["executionArn"]
    ex = world.run_teardown(event)
    assert ex.status == "FAILED"
    failure = ex.failure()
    assert failure["error"] == "InvalidInputError"
    assert "teardown needs the execution's ARN" in json.loads(failure["cause"])["errorMessage"]
    assert ex.entered() == ["WaitForInFlightSteps", "Teardown", "TeardownFailed"]
    assert world.invocations == ["Teardown"]  # bad input is not retried


def test_a_step_still_running_when_the_warm_stopped_is_waited_out(world: Any) -> None:
    """Stopping an execution does not stop a Lambda it invoked: a CreateVolumes still running when the
    warm stopped (here: during the teardown machine's first wait) recorded its volumes as requested
    and then ended before recording their ids — one volume made, one call never sent. Teardown
    recovers both by their ClientTokens (the second is made by the recovery and deleted too)."""
    from cachewarm_controller.ownership import volume_request

    world.faults["CreateVolumes"] = "before"
    world.faults["Teardown"] = "before"
    body = world.make_input()
    stopped = world.run(body)
    assert stopped.entered()[-1] == "TeardownFailed", stopped.entered()
    arn = stopped.desc["executionArn"]
    world.faults.clear()
    plan = world.deps.s3.load_plan("warms", world.warm_id)
    assert plan is not None and not any(r.volume_id for r in plan.nodes)
    clock_at_start = world.clock()
    created: list[str] = []
    original = world.clock.advance

    def advance(seconds: float) -> None:
        original(seconds)
        if not created:  # the stopped warm's CreateVolumes: intent saved, one call made, no id saved
            late = world.deps.s3.load_plan("warms", world.warm_id)
            late.nodes[0].volume_requested = late.nodes[1].volume_requested = True
            world.deps.s3.save_plan("warms", late)
            request = volume_request(late, late.nodes[0], world.deps.settings.stack_tag)
            created.append(world.ec2.create_volume(**request)["VolumeId"])

    world.clock.advance = advance
    try:
        ex = world.run_teardown(status_change_event(json.dumps(body), execution_arn=arn))
    finally:
        del world.clock.advance
    assert ex.status == "SUCCEEDED", ex.desc
    assert created and world.clock() - clock_at_start >= 330
    gone = world.ec2.describe_volumes(Filters=[{"Name": "volume-id", "Values": created}])["Volumes"]
    assert gone == []
    assert_nothing_left(world)


def test_a_populator_launched_but_never_recorded_is_found_by_its_token(world: Any) -> None:
    """A LaunchPopulators still running when the warm stopped: the node saved as requested, the
    instance launched, its id never saved. The teardown finds it by its ClientToken (DescribeInstances'
    `client-token` filter) and terminates it; nothing else is looked up by tag."""
    from cachewarm_controller.ownership import populator_token

    world.faults["LaunchPopulators"] = "before"
    world.faults["Teardown"] = "before"
    body = world.make_input()
    stopped = world.run(body)
    assert stopped.entered()[-1] == "TeardownFailed", stopped.entered()
    world.faults.clear()
    late = world.deps.s3.load_plan("warms", world.warm_id)
    row = late.nodes[0]
    row.populator_requested = True
    world.deps.s3.save_plan("warms", late)
    made = world.ec2.run_instances(
        LaunchTemplate={"LaunchTemplateId": world.template_id, "Version": "$Latest"},
        MinCount=1,
        MaxCount=1,
        SubnetId=row.subnet_id,
        ClientToken=populator_token(late, row),
    )["Instances"][0]["InstanceId"]
    ex = world.run_teardown(status_change_event(json.dumps(body), execution_arn=stopped.desc["executionArn"]))
    assert ex.status == "SUCCEEDED", ex.desc
    state = world.ec2.describe_instances(InstanceIds=[made])["Reservations"][0]["Instances"][0]["State"]
    assert state["Name"] in ("shutting-down", "terminated")
    assert_nothing_left(world)


def test_a_stopped_auto_scaling_launch_is_torn_down_like_any_warm(world: Any) -> None:
    """The launch rule's input names no warm id: the teardown derives it as ValidateInput did, so the
    owner's agents are cancelled and its S3 objects deleted too, not only its EC2 resources."""
    from cachewarm.contract.warm_ids import asg_warm_id

    from tests.controller.test_one_warm_per_id import asg, launch_event_input

    group = f"Replica-Launch-{world.serial}"
    asg(world, group, deployment="v9")
    world.allow(f"main-a->asg:{group}")
    world.warm_id = asg_warm_id(group, "v9")
    world.agents.store = world.deps.s3
    world.faults["StartAgents"] = "after"
    world.faults["Teardown"] = "before"
    body = {**launch_event_input(world, group), "source": {"replica": "main-a"}}
    ex = world.run(body)
    assert ex.status == "FAILED" and ex.entered()[-1] == "TeardownFailed", ex.entered()
    assert world.status_objects()
    world.faults.clear()
    ex = world.run_teardown(status_change_event(json.dumps(body), "FAILED", ex.desc["executionArn"]))
    assert ex.status == "SUCCEEDED", ex.desc
    running = [
        cid for (role, _), runs in world.agents.sent.items() if role == "populate" for cid, _, _ in runs
    ]
    assert running and set(running) <= set(world.agents.cancelled)
    assert_nothing_left(world)
