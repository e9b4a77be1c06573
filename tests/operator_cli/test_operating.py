"""Operating a warm on AWS from the CLI (issue 27): `list`, `stop`, `status`/`watch` by warm id or
ARN with `--json`, `start` checking its input offline, the region from the ARN or AWS_REGION — against
moto (Step Functions + S3)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import jsonschema
import pytest
from cachewarm.cli import main
from cachewarm.operator.aws import Clients, pick_region, region_of
from cachewarm.operator.input_check import input_schema, problems
from click.testing import CliRunner
from moto import mock_aws

from tests.operator_cli.test_operator import BUCKET, MINIMAL, PASS, ROLE, put_status, write_input

REPO = Path(__file__).resolve().parents[2]
# A state machine that stays RUNNING: moto without execute_state_machine never runs the definition.
WAIT = json.dumps({"StartAt": "W", "States": {"W": {"Type": "Wait", "Seconds": 3600, "End": True}}})


def machine(sfn: Any, name: str = "cachewarm", definition: str = PASS, tagged: bool = True) -> str:
    tags = [{"key": "cachewarm:status-bucket", "value": BUCKET}] if tagged else []
    return str(
        sfn.create_state_machine(name=name, definition=definition, roleArn=ROLE, tags=tags)["stateMachineArn"]
    )


@pytest.fixture
def finishing() -> Iterator[Clients]:
    """Executions run to their end (a Pass state): SUCCEEDED at once."""
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        yield _clients("us-east-1")


@pytest.fixture
def running() -> Iterator[Clients]:
    """Executions stay RUNNING until stopped."""
    with mock_aws():
        yield _clients("us-east-1")


def _clients(region: str) -> Clients:
    c = Clients(region)
    c._cache["stepfunctions"] = boto3.client("stepfunctions", region_name=region)
    c._cache["s3"] = boto3.client("s3", region_name=region)
    where = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
    c.get("s3").create_bucket(Bucket=BUCKET, **where)
    return c


def invoke(clients: Clients | None, *args: str) -> Any:
    return CliRunner().invoke(main, list(args), obj=clients)


def start(clients: Clients, sm: str, tmp_path: Path, warm_id: str = "warm-1") -> str:
    res = invoke(
        clients,
        "start",
        "--state-machine",
        sm,
        "--input",
        str(write_input(tmp_path, {**MINIMAL, "warm_id": warm_id})),
    )
    assert res.exit_code == 0, res.output
    return str(res.output.split()[-1])


# ---- status / watch by warm id, --json ------------------------------------------------------------


def test_status_by_warm_id_and_json(finishing: Clients, tmp_path: Path) -> None:
    sm = machine(finishing.get("stepfunctions"))
    machine(finishing.get("stepfunctions"), "teardown", tagged=False)  # not a warm machine: ignored
    arn = start(finishing, sm, tmp_path)
    put_status(finishing, "dump", "i-0aaa", "done", 10)
    put_status(finishing, "populate", "i-0aaa", "done", 10)
    by_id = invoke(finishing, "status", "warm-1")
    by_arn = invoke(finishing, "status", arn)
    assert by_id.exit_code == by_arn.exit_code == 0, by_id.output

    # The two looks are a moment apart: a heartbeat's age may differ by a second.
    def aged(out: str) -> str:
        return re.sub(r"\d+s ago", "Ns ago", out)

    assert aged(by_id.output) == aged(by_arn.output) and "warm warm-1: SUCCEEDED" in by_id.output
    res = invoke(finishing, "status", "warm-1", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert (doc["warm_id"], doc["status"], doc["execution_arn"], doc["nodes_done"]) == (
        "warm-1",
        "SUCCEEDED",
        arn,
        1,
    )
    node = doc["nodes"][0]
    assert (
        node["node_id"] == "i-0aaa"
        and node["state"] == "done"
        and node["populate"]["progress"]["items"] == 10
    )


def test_status_of_an_unknown_warm_id_is_a_usage_error(finishing: Clients) -> None:
    machine(finishing.get("stepfunctions"))
    res = invoke(finishing, "status", "nope")
    assert res.exit_code == 2
    assert (
        "error: no warm 'nope' in arn:aws:states:us-east-1:123456789012:stateMachine:cachewarm" in res.output
    )
    assert "`cachewarm list`" in res.output


def test_status_by_warm_id_of_an_event_started_execution(finishing: Clients) -> None:
    """The Replica Deployed rule names executions itself: the warm id is found in the input."""
    sfn = finishing.get("stepfunctions")
    sm = machine(sfn)
    arn = sfn.start_execution(stateMachineArn=sm, name="evt-123", input=json.dumps(MINIMAL))["executionArn"]
    res = invoke(finishing, "status", "warm-1", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["execution_arn"] == arn


def test_watch_json_is_one_line_per_look_with_a_time(finishing: Clients, tmp_path: Path) -> None:
    sm = machine(finishing.get("stepfunctions"))
    start(finishing, sm, tmp_path)
    res = invoke(finishing, "watch", "warm-1", "--json", "--interval", "0")
    assert res.exit_code == 0, res.output
    events = [json.loads(ln) for ln in res.output.splitlines()]
    assert events and all(e["event"] == "warm_status" and e["time"].endswith("Z") for e in events)
    assert events[-1]["status"] == "SUCCEEDED"


# ---- list, stop ----------------------------------------------------------------------------------


def test_list_shows_the_warms_newest_first(finishing: Clients, tmp_path: Path) -> None:
    sm = machine(finishing.get("stepfunctions"))
    a = start(finishing, sm, tmp_path, "warm-a")
    b = start(finishing, sm, tmp_path, "warm-b")
    res = invoke(finishing, "list")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].split()[:3] == ["warm", "id", "status"]
    assert {ln.split()[0] for ln in lines[1:]} == {"warm-a", "warm-b"}
    assert all("SUCCEEDED" in ln for ln in lines[1:])
    rows = json.loads(invoke(finishing, "list", "--json").output)
    assert {r["execution_arn"] for r in rows} == {a, b}
    assert rows[0]["started"] >= rows[1]["started"]
    assert json.loads(invoke(finishing, "list", "--json", "--status", "RUNNING").output) == []


def test_list_without_a_warm_machine_names_the_fix(finishing: Clients) -> None:
    res = invoke(finishing, "list")
    assert res.exit_code == 2 and "--state-machine" in res.output


def test_stop_by_warm_id(running: Clients, tmp_path: Path) -> None:
    sfn = running.get("stepfunctions")
    sm = machine(sfn, definition=WAIT)
    arn = start(running, sm, tmp_path)
    assert sfn.describe_execution(executionArn=arn)["status"] == "RUNNING"
    res = invoke(running, "stop", "warm-1", "--cause", "wrong source")
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"stopped {arn}\n") and "new warm_id" in res.output
    assert sfn.describe_execution(executionArn=arn)["status"] == "ABORTED"
    again = invoke(running, "stop", "warm-1")
    assert again.exit_code == 0 and again.output.strip() == f"already ended ABORTED: {arn}"


def test_starting_a_stopped_warm_again_names_a_new_warm_id(running: Clients, tmp_path: Path) -> None:
    sm = machine(running.get("stepfunctions"), definition=WAIT)
    start(running, sm, tmp_path)
    invoke(running, "stop", "warm-1")
    res = invoke(running, "start", "--state-machine", sm, "--input", str(write_input(tmp_path, MINIMAL)))
    assert res.exit_code == 1
    assert "warm warm-1 already ran and ended ABORTED" in res.output and "(e.g. warm-1-2)" in res.output


# ---- start checks its input offline --------------------------------------------------------------


def test_start_checks_the_input_against_the_schema_before_any_aws_call(tmp_path: Path) -> None:
    """No AWS at all here (no mock, no credentials needed): the input fails first, exit 2."""
    bad = {**MINIMAL, "populator": {"mode": "clobber"}, "volume": {"iops": 5}, "extra": 1}
    p = write_input(tmp_path, bad)
    res = invoke(
        None,
        "start",
        "--state-machine",
        "arn:aws:states:us-east-1:123456789012:stateMachine:x",
        "--input",
        str(p),
    )
    assert res.exit_code == 2, res.output
    assert "does not match statemachine/input.schema.json" in res.output
    assert "input.populator.mode: 'clobber' is not one of ['add', 'set']" in res.output
    assert "input.volume.iops: 5 is less than the minimum of 100" in res.output
    assert "input: Additional properties are not allowed ('extra' was unexpected)" in res.output


def test_the_wheel_carries_the_current_schema() -> None:
    assert input_schema() == json.loads((REPO / "statemachine" / "input.schema.json").read_text())


@pytest.mark.parametrize(
    "doc",
    [
        json.loads((REPO / "statemachine" / "example-input.json").read_text()),
        json.loads((REPO / "infra" / "examples" / "start-input.json").read_text()),
        MINIMAL,
        {**MINIMAL, "warm_id": "A B"},
        {**MINIMAL, "destination": {"endpoints": []}},
        {**MINIMAL, "destination": {"endpoints": ["10.0.0.1:11211"], "port": 0}},
        {**MINIMAL, "populator": {"max_items_per_second": "fast"}},
        {**MINIMAL, "populator": {"max_items_per_second": True}},
        {**MINIMAL, "verify": {"sample_nodes": 1.5}},
        {**MINIMAL, "source": {"node_stats": {"i-0123456789abcdef0": {"items": 1, "bytes": 2}}}},
        {**MINIMAL, "source": {"node_stats": {"i-0123456789abcdef0": {"items": -1}}}},
        {"warm_id": "abc"},
        [],
    ],
)
def test_the_offline_check_agrees_with_jsonschema(doc: object) -> None:
    schema = json.loads((REPO / "statemachine" / "input.schema.json").read_text())
    valid = jsonschema.Draft202012Validator(schema).is_valid(doc)
    assert (problems(doc, schema) == []) == valid, problems(doc, schema)


# ---- the region ----------------------------------------------------------------------------------


def test_the_region_of_an_arn_and_aws_region(monkeypatch: pytest.MonkeyPatch) -> None:
    arn = "arn:aws:states:eu-west-2:123456789012:execution:cachewarm:warm-1"
    assert region_of(arn) == "eu-west-2"
    assert region_of("warm-1") is None
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    assert pick_region(None, arn) == "eu-west-2"
    assert pick_region("us-east-2", arn) == "us-east-2"
    assert pick_region(None, "warm-1", None) == "ap-south-1"
    monkeypatch.delenv("AWS_REGION")
    assert pick_region(None, "warm-1") is None


def test_status_finds_the_region_in_the_arn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The CLI's own clients (none injected), no AWS_DEFAULT_REGION: the ARN's region is used."""
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        clients = _clients("eu-west-2")
        arn = start(clients, machine(clients.get("stepfunctions")), tmp_path)
        monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
        monkeypatch.delenv("AWS_REGION", raising=False)
        res = invoke(None, "status", arn)
        assert res.exit_code == 0, res.output
        monkeypatch.setenv("AWS_REGION", "eu-west-2")
        res = invoke(None, "status", "warm-1")  # a warm id: AWS_REGION
        assert res.exit_code == 0, res.output
        assert "warm warm-1: SUCCEEDED" in res.output
