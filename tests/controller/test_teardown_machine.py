"""statemachine/teardown.asl.json under moto's interpreter: what a stopped (ABORTED) or timed-out
(TIMED_OUT) warm execution leaves behind is torn down from the EventBridge event alone."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.controller.support import ACCOUNT, REGION
from tests.controller.test_state_machine import assert_nothing_left

WARM_MACHINE_ARN = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:cachewarm"


def status_change_event(execution_input: str, status: str = "ABORTED") -> dict[str, Any]:
    """An EventBridge 'Step Functions Execution Status Change' event as the rule delivers it."""
    return {
        "version": "0",
        "id": "315c1398-40ff-a850-213b-158f73e60175",
        "detail-type": "Step Functions Execution Status Change",
        "source": "aws.states",
        "account": ACCOUNT,
        "time": "2026-11-22T07:00:00Z",
        "region": REGION,
        "resources": [f"arn:aws:states:{REGION}:{ACCOUNT}:execution:cachewarm:run-1"],
        "detail": {
            "executionArn": f"arn:aws:states:{REGION}:{ACCOUNT}:execution:cachewarm:run-1",
            "stateMachineArn": WARM_MACHINE_ARN,
            "name": "run-1",
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


def leave_a_running_warm_behind(world: Any) -> dict[str, Any]:
    """What a stopped execution leaves: volumes, populators, attachments, agent commands and status
    objects. A warm that fails after StartAgents and whose own Teardown fails gets there."""
    world.agents.store = world.deps.s3
    world.faults["StartAgents"] = "after"
    world.faults["Teardown"] = "before"
    body = world.make_input(status_prefix="warms", mount_dir="/mnt/cachewarm")
    ex = world.run(body)
    assert ex.status == "FAILED" and ex.entered()[-1] == "TeardownFailed", ex.entered()
    inv = world.inventory()
    assert len(inv.instances) == 3, inv.describe()
    assert len([v for v in inv.volumes if v["VolumeType"] == "io2"]) == 3, inv.describe()
    assert any(world.attacher.table.values())
    assert world.status_objects()  # at least the plan
    world.faults.clear()
    world.invocations.clear()
    return body


@pytest.mark.parametrize("status", ["ABORTED", "TIMED_OUT"])
def test_a_stopped_warm_is_torn_down_from_the_event(world: Any, status: str) -> None:
    body = leave_a_running_warm_behind(world)
    ex = world.run_teardown(status_change_event(json.dumps(body), status))
    assert ex.status == "SUCCEEDED", ex.desc
    entered = ex.entered()
    assert entered[:2] == ["WaitForInFlightSteps", "Teardown"] and entered[-1] == "TornDown"
    assert set(world.invocations) == {"Teardown"}
    passes = ex.outputs("Teardown")
    assert [p["teardown"]["attempt"] for p in passes] == list(range(1, len(passes) + 1))
    assert passes[-1]["teardown"]["complete"] is True
    # The event reached every pass unchanged (the attempt counter rides beside it in $.teardown).
    assert all(p["detail"]["input"] == json.dumps(body) for p in passes)
    # The running populate commands were cancelled (the simulated dumps had finished), the source
    # nodes unmounted, everything else deleted.
    running = [
        cid for (role, _), runs in world.agents.sent.items() if role == "populate" for cid, _, _ in runs
    ]
    assert len(running) == 3 and set(running) <= set(world.agents.cancelled)
    assert world.agents.unmounted and all(
        mp == f"/mnt/cachewarm/{world.warm_id}" for _, mp in world.agents.unmounted
    )
    assert_nothing_left(world)


def test_a_repeated_event_is_harmless(world: Any) -> None:
    """EventBridge delivers at least once: a second event for the same warm finds nothing left,
    makes one pass and succeeds."""
    body = leave_a_running_warm_behind(world)
    event = status_change_event(json.dumps(body))
    assert world.run_teardown(event).status == "SUCCEEDED"
    again = world.run_teardown(event)
    assert again.status == "SUCCEEDED"
    assert again.entered() == ["WaitForInFlightSteps", "Teardown", "TeardownComplete?", "TornDown"]
    assert_nothing_left(world)


@pytest.mark.parametrize(
    ("execution_input", "named"),
    [
        (json.dumps({"warm_id": "Bad Id!"}), "'Bad Id!'"),
        (json.dumps({"source": {"replica": "main-a"}}), "None"),
        ("", "None"),
    ],
)
def test_an_event_without_a_valid_warm_id_fails_naming_it(
    world: Any, execution_input: str, named: str
) -> None:
    ex = world.run_teardown(status_change_event(execution_input))
    assert ex.status == "FAILED"
    failure = ex.failure()
    assert failure["error"] == "InvalidInputError"
    message = json.loads(failure["cause"])["errorMessage"]
    assert "teardown needs a valid warm_id" in message and named in message
    assert ex.entered() == ["WaitForInFlightSteps", "Teardown", "TeardownFailed"]
    assert world.invocations == ["Teardown"]  # bad input is not retried


def test_a_step_still_running_when_the_warm_stopped_is_waited_out(world: Any) -> None:
    """Stopping an execution does not stop a Lambda it invoked: a volume created after the stop
    (during the first wait) is still torn down."""
    body = leave_a_running_warm_behind(world)
    clock_at_start = world.clock()
    created: list[str] = []

    original = world.clock.advance

    def advance(seconds: float) -> None:
        original(seconds)
        if not created:  # the stopped warm's CreateVolumes finishes during the first wait
            created.append(
                world.ec2.create_volume(
                    AvailabilityZone="us-east-1a",
                    Size=4,
                    TagSpecifications=[
                        {
                            "ResourceType": "volume",
                            "Tags": [
                                {"Key": "cachewarm:warm-id", "Value": world.warm_id},
                                {"Key": "cachewarm:managed", "Value": "true"},
                            ],
                        }
                    ],
                )["VolumeId"]
            )

    world.clock.advance = advance
    try:
        ex = world.run_teardown(status_change_event(json.dumps(body)))
    finally:
        del world.clock.advance
    assert ex.status == "SUCCEEDED", ex.desc
    assert created and world.clock() - clock_at_start >= 330
    assert_nothing_left(world)
