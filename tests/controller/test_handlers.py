"""The handlers' Powertools side: events parsed into their models (a malformed one is an
InvalidInputError, counted), and EMF metrics with the aggregate (service, Step) dimensions the alarms
watch plus a (service, Step, WarmId) set that tells two warms apart."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cachewarm_controller import handlers
from cachewarm_controller.errors import InvalidInputError
from cachewarm_controller.events import StepEvent, TeardownEvent, parse_event

from tests.controller.support import _Context

ARN = "arn:aws:states:us-east-1:123456789012:execution:CacheWarm:run-1"


def _emf(capsys: Any) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    return [line for line in lines if "_aws" in line]


def _dimension_sets(record: dict[str, Any]) -> list[set[str]]:
    return [set(d) for d in record["_aws"]["CloudWatchMetrics"][0]["Dimensions"]]


def test_metrics_carry_the_aggregate_and_the_per_warm_dimensions(world: Any, capsys: Any) -> None:
    capsys.readouterr()
    for warm_id in ("warm-aaa-1", "warm-bbb-2"):
        handlers.validate_input(
            {"input": world.make_input(warm_id=warm_id), "execution_arn": ARN}, _Context("ValidateInput")
        )
    records = _emf(capsys)
    assert [r["WarmId"] for r in records] == ["warm-aaa-1", "warm-bbb-2"]
    for r in records:
        assert _dimension_sets(r) == [{"service", "Step"}, {"service", "Step", "WarmId"}]
        assert (r["service"], r["Step"]) == ("cachewarm", "validate_input")
        assert "StepSucceeded" in r


def test_a_warm_without_an_id_yet_emits_the_aggregate_only(world: Any, capsys: Any) -> None:
    capsys.readouterr()
    with pytest.raises(InvalidInputError):
        handlers.validate_input({"input": {"warm_id": "BAD ID"}, "execution_arn": ARN}, _Context("V"))
    [record] = _emf(capsys)
    assert _dimension_sets(record) == [{"service", "Step"}] and "WarmId" not in record
    assert record["StepFailed"] == [1.0]


def test_a_malformed_step_event_is_invalid_input_and_counted(world: Any, capsys: Any) -> None:
    capsys.readouterr()
    good = {"warm_id": world.warm_id, "execution_arn": ARN, "input": world.make_input()}
    for bad in (
        {**good, "warm_id": "another-warm"},  # not the input's
        {**good, "execution_arn": "w-1; reboot"},
        {k: v for k, v in good.items() if k != "input"},
        {**good, "volumes": {"passes": -1}},
    ):
        with pytest.raises(InvalidInputError, match="invalid StepEvent"):
            handlers.create_volumes(bad, _Context("CreateVolumes"))
    assert all(r["StepFailed"] == [1.0] for r in _emf(capsys))
    parsed = parse_event(
        {**good, "claim": {"owned": True}, "volumes": {"passes": 2, "ready": False}}, StepEvent
    )
    assert parsed.loop("volumes") == {"passes": 2, "waits": 0} and parsed.loop("attach") == {}


def test_teardown_of_a_stopped_warm_is_dimensioned_by_the_warm_in_the_event(world: Any, capsys: Any) -> None:
    capsys.readouterr()
    event = {
        "source": "aws.states",
        "detail-type": "Step Functions Execution Status Change",
        "detail": {"status": "ABORTED", "executionArn": ARN, "input": json.dumps(world.make_input())},
    }
    assert parse_event(event, TeardownEvent).warm_id == world.warm_id
    out = handlers.teardown(event, _Context("Teardown"))
    assert out["complete"]
    [record] = _emf(capsys)
    assert record["WarmId"] == world.warm_id and record["TeardownLeftovers"] == [0.0]
    assert _dimension_sets(record)[1] == {"service", "Step", "WarmId"}
