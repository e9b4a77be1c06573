"""`cachewarm start|status|watch` against moto (Step Functions + S3)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from cachewarm.cli import main
from cachewarm.contract.status import NodeStatus, Progress, instance_arn, status_key
from cachewarm.operator.aws import Clients
from cachewarm.operator.view import NodeView, WarmView, render, watch_loop
from click.testing import CliRunner
from moto import mock_aws

BUCKET = "cachewarm-status-test"
ROLE = "arn:aws:iam::123456789012:role/sfn"
ACCOUNT = "123456789012"
# The planned nodes: source instance i-0xxx, its populator i-1xxx (PlanWarm's `$.plan`, which is all the
# operator CLI trusts to say whose status object counts).
NODES = ("i-0aaa", "i-0bbb", "i-0ccc", "i-0ddd")
PLAN = {"warm_id": "warm-1", "nodes": [{"node_id": n, "populator_id": "i-1" + n[3:]} for n in NODES]}
PASS = json.dumps(
    {
        "StartAt": "Validate",
        "States": {
            "Validate": {"Type": "Pass", "Next": "Plan"},
            "Plan": {"Type": "Pass", "Result": PLAN, "ResultPath": "$.plan", "End": True},
        },
    }
)


@pytest.fixture
def aws() -> Iterator[Clients]:
    # execute_state_machine: moto runs the (Pass-only) definition, so executions really finish.
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        clients = Clients("us-east-1")
        clients._cache["stepfunctions"] = boto3.client("stepfunctions", region_name="us-east-1")
        clients._cache["s3"] = boto3.client("s3", region_name="us-east-1")
        clients.get("s3").create_bucket(Bucket=BUCKET)
        yield clients


def machine(clients: Clients, tagged: bool = True, definition: str = PASS) -> str:
    tags = [{"key": "cachewarm:status-bucket", "value": BUCKET}] if tagged else []
    return str(
        clients.get("stepfunctions").create_state_machine(
            name="cachewarm", definition=definition, roleArn=ROLE, tags=tags
        )["stateMachineArn"]
    )


def put_status(
    clients: Clients, role: str, node: str, state: str, items: int, warm_id: str = "warm-1", **extra: Any
) -> None:
    body = {
        "warm_id": warm_id,
        "node_id": node,
        "role": role,
        "state": state,
        "heartbeat_ms": 1_700_000_000_000,
        "progress": {
            "items": items,
            "bytes": items * 100,
            "files": 1,
            "keys_listed": extra.pop("keys", items),
        },
        "error": extra.pop("error", None),
        "attempt": 1,
    }
    clients.get("s3").put_object(
        Bucket=BUCKET, Key=status_object(role, node, warm_id), Body=json.dumps(body).encode()
    )


def status_object(role: str, node: str, warm_id: str = "warm-1", writer: str | None = None) -> str:
    """The key the node's expected writer (the node for `dump`, its populator for `populate`) writes."""
    writer = writer or (node if role == "dump" else "i-1" + node[3:])
    return status_key("warms", warm_id, role, node, instance_arn("us-east-1", ACCOUNT, writer))


def invoke(clients: Clients, *args: str) -> Any:
    return CliRunner().invoke(main, list(args), obj=clients)


# The smallest input the schema accepts (statemachine/input.schema.json).
MINIMAL = {"warm_id": "warm-1", "destination": {"endpoints": ["10.0.0.1:11211"]}, "populator": {}}


def write_input(tmp_path: Path, doc: object) -> Path:
    p = tmp_path / "input.json"
    p.write_text(json.dumps(doc))
    return p


def test_start_is_idempotent_by_warm_id(aws: Clients, tmp_path: Path) -> None:
    sm = machine(aws)
    inp = write_input(tmp_path, MINIMAL)
    res = invoke(aws, "start", "--state-machine", sm, "--input", str(inp))
    assert res.exit_code == 0, res.output
    arn = res.output.split()[-1]
    assert res.output.startswith("started ") and arn.endswith(":execution:cachewarm:warm-1")
    ex = aws.get("stepfunctions").describe_execution(executionArn=arn)
    assert json.loads(ex["input"])["destination"] == {"endpoints": ["10.0.0.1:11211"]}
    again = invoke(aws, "start", "--state-machine", sm, "--input", str(inp))
    assert again.exit_code == 0 and again.output.strip() == f"already started: {arn}"


@pytest.mark.parametrize(
    ("content", "message"),
    [("{not json", "not valid JSON"), ("[1]", "must be a JSON object"), ('{"x": 1}', "no warm_id")],
)
def test_start_rejects_bad_input(aws: Clients, tmp_path: Path, content: str, message: str) -> None:
    sm = machine(aws)
    p = tmp_path / "in.json"
    p.write_text(content)
    res = invoke(aws, "start", "--state-machine", sm, "--input", str(p))
    assert res.exit_code == 2 and message in res.output and "--input" in res.output  # a usage error


def test_status_shows_each_node(aws: Clients, tmp_path: Path) -> None:
    sm = machine(aws)
    arn = invoke(aws, "start", "--state-machine", sm, "--input", str(write_input(tmp_path, MINIMAL)))
    arn = arn.output.split()[-1]
    put_status(aws, "dump", "i-0aaa", "done", 1000)
    put_status(aws, "populate", "i-0aaa", "done", 1000)
    put_status(aws, "dump", "i-0bbb", "running", 400, keys=2000)
    put_status(aws, "populate", "i-0bbb", "running", 500)
    put_status(aws, "dump", "i-0ccc", "failed", 10, error="the dumper failed: SERVER_ERROR")
    torn = status_object("populate", "i-0ddd")
    aws.get("s3").put_object(Bucket=BUCKET, Key=torn, Body=b"{torn")
    aws.get("s3").put_object(Bucket=BUCKET, Key="warms/warm-1/controller/plan.json", Body=b"{}")
    res = invoke(aws, "status", arn)
    assert res.exit_code == 0, res.output
    out = res.output
    assert "warm warm-1: SUCCEEDED" in out and "1/4 nodes done" in out and "1,500 items populated" in out
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln.startswith("i-0")}
    assert "done" in lines["i-0aaa"] and "100.0%" in lines["i-0aaa"]
    assert "populating" in lines["i-0bbb"] and " 25.0%" in lines["i-0bbb"]  # 500 of 2000 keys listed
    assert "dump failed" in lines["i-0ccc"]
    assert "dump (attempt 1): the dumper failed: SERVER_ERROR" in out
    assert f"unreadable status object: {torn}" in out
    assert "waiting" in lines["i-0ddd"]
    assert "entered Validate" in out


def test_status_trusts_only_the_planned_writers_objects(aws: Clients, tmp_path: Path) -> None:
    """Anyone who may write under the status prefix (one node's credentials) can name any node in an
    object's key and body; the CLI shows only what each planned node's own writer wrote, as the
    controller reads it, and never lists (a flood of objects costs it nothing)."""
    sm = machine(aws)
    arn = invoke(aws, "start", "--state-machine", sm, "--input", str(write_input(tmp_path, MINIMAL)))
    arn = arn.output.split()[-1]
    put_status(aws, "populate", "i-0aaa", "running", 10)
    forged = {"warm_id": "warm-1", "node_id": "i-0aaa", "role": "populate", "state": "done",
              "heartbeat_ms": 1, "progress": {"items": 10**9, "bytes": 1, "files": 1, "keys_listed": 1},
              "error": None, "attempt": 1}  # fmt: skip
    s3 = aws.get("s3")
    # i-0bbb's populator claims to be i-0aaa's, and names a node nobody planned.
    s3.put_object(
        Bucket=BUCKET, Key=status_object("populate", "i-0aaa", writer="i-1bbb"), Body=json.dumps(forged)
    )
    s3.put_object(Bucket=BUCKET, Key=status_object("populate", "i-0zzz"), Body=json.dumps(forged))
    # The expected key of i-0bbb, written by its writer, but its body names another node.
    s3.put_object(Bucket=BUCKET, Key=status_object("populate", "i-0bbb"), Body=json.dumps(forged))
    for i in range(300):
        s3.put_object(Bucket=BUCKET, Key=f"warms/warm-1/populate/x{i}/y.json", Body=b"{}")
    res = invoke(aws, "status", arn, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    nodes = {n["node_id"]: n for n in doc["nodes"]}
    assert sorted(nodes) == list(NODES) and doc["planned"] is True
    assert nodes["i-0aaa"]["state"] == "populating" and nodes["i-0aaa"]["populated"] == 10
    assert nodes["i-0bbb"]["state"] == "waiting" and doc["nodes_done"] == 0
    assert doc["unreadable"] == [status_object("populate", "i-0bbb")]


def test_status_before_the_plan_shows_no_node(aws: Clients, tmp_path: Path) -> None:
    sm = machine(
        aws,
        definition=json.dumps({"StartAt": "Validate", "States": {"Validate": {"Type": "Pass", "End": True}}}),
    )
    arn = invoke(aws, "start", "--state-machine", sm, "--input", str(write_input(tmp_path, MINIMAL)))
    arn = arn.output.split()[-1]
    put_status(aws, "dump", "i-0aaa", "done", 10)
    res = invoke(aws, "status", arn)
    assert res.exit_code == 0, res.output
    assert "no plan yet" in res.output and "i-0aaa" not in res.output


def test_status_without_bucket_tag_names_the_fix(aws: Clients, tmp_path: Path) -> None:
    sm = machine(aws, tagged=False)
    arn = invoke(aws, "start", "--state-machine", sm, "--input", str(write_input(tmp_path, MINIMAL)))
    arn = arn.output.split()[-1]
    res = invoke(aws, "status", arn)
    assert res.exit_code == 1 and "--status-bucket" in res.output
    put_status(aws, "populate", "i-0aaa", "done", 5)
    res = invoke(aws, "status", arn, "--status-bucket", BUCKET)
    assert res.exit_code == 0 and "i-0aaa" in res.output


def test_status_of_an_auto_scaling_launch(aws: Clients) -> None:
    """The launch rule's input names only the destination group: the warm id is the one ValidateInput
    derives from the group (contract.warm_ids), and a group that is gone is named."""
    from cachewarm.contract.warm_ids import asg_warm_id

    ec2, asg = (
        boto3.client("ec2", region_name="us-east-1"),
        boto3.client("autoscaling", region_name="us-east-1"),
    )
    aws._cache["autoscaling"] = asg
    template = ec2.create_launch_template(
        LaunchTemplateName="replica",
        LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "t3.micro"},
    )["LaunchTemplate"]["LaunchTemplateId"]
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    asg.create_auto_scaling_group(
        AutoScalingGroupName="Replica-B",
        LaunchTemplate={"LaunchTemplateId": template},
        MinSize=0,
        MaxSize=0,
        DesiredCapacity=0,
        VPCZoneIdentifier=subnet,
        Tags=[{"ResourceId": "Replica-B", "ResourceType": "auto-scaling-group", "Key": "cachewarm:deployment",
               "Value": "v7", "PropagateAtLaunch": False}],
    )  # fmt: skip
    sfn = aws.get("stepfunctions")
    doc = {"destination": {"asg_name": "Replica-B"}}
    arn = sfn.start_execution(stateMachineArn=machine(aws), name="launch-1", input=json.dumps(doc))
    warm_id = asg_warm_id("Replica-B", "v7")
    put_status(aws, "populate", "i-0aaa", "done", 7, warm_id=warm_id)
    res = invoke(aws, "status", arn["executionArn"])
    assert res.exit_code == 0 and f"warm {warm_id}:" in res.output and "i-0aaa" in res.output, res.output
    asg.delete_auto_scaling_group(AutoScalingGroupName="Replica-B", ForceDelete=True)
    res = invoke(aws, "status", arn["executionArn"])
    assert res.exit_code == 1 and "'Replica-B' no longer exists" in res.output, res.output


def test_status_of_unknown_execution(aws: Clients) -> None:
    res = invoke(aws, "status", "arn:aws:states:us-east-1:123456789012:execution:cachewarm:nope")
    assert res.exit_code == 1 and "cannot describe" in res.output


def test_watch_until_the_end(aws: Clients, tmp_path: Path) -> None:
    sm = machine(aws)
    arn = invoke(aws, "start", "--state-machine", sm, "--input", str(write_input(tmp_path, MINIMAL)))
    arn = arn.output.split()[-1]
    put_status(aws, "dump", "i-0aaa", "done", 10)
    put_status(aws, "populate", "i-0aaa", "done", 10)
    res = invoke(aws, "watch", arn, "--interval", "0")
    assert res.exit_code == 0, res.output
    assert "warm warm-1: SUCCEEDED" in res.output


def test_watch_exit_code_for_a_stopped_warm() -> None:
    with mock_aws():  # no execution: the run stays RUNNING until stopped
        clients = Clients("us-east-1")
        sfn = clients.get("stepfunctions")
        clients.get("s3").create_bucket(Bucket=BUCKET)
        sm = sfn.create_state_machine(
            name="cm",
            definition=PASS,
            roleArn=ROLE,
            tags=[{"key": "cachewarm:status-bucket", "value": BUCKET}],
        )["stateMachineArn"]
        arn = sfn.start_execution(stateMachineArn=sm, name="warm-1", input='{"warm_id": "warm-1"}')[
            "executionArn"
        ]
        sfn.stop_execution(executionArn=arn, error="Operator", cause="stopped by hand")
        res = CliRunner().invoke(main, ["watch", arn, "--interval", "0"], obj=clients)
        assert res.exit_code == 1
        assert "warm warm-1: ABORTED" in res.output  # (moto keeps no error/cause for a stop)


def test_watch_loop_polls_until_terminal() -> None:
    def view(status: str, populated: int) -> WarmView:
        dump = NodeStatus("warm-1", "i-0aaa", "dump", "done", 0, Progress(items=100))
        state = "done" if populated == 100 else "running"
        pop = NodeStatus("warm-1", "i-0aaa", "populate", state, 0, Progress(items=populated))
        return WarmView("arn", status, "warm-1", None, None, [NodeView("i-0aaa", dump, pop)])

    views = iter([view("RUNNING", 10), view("RUNNING", 60), view("SUCCEEDED", 100)])
    sleeps: list[float] = []
    stream = io.StringIO()
    last = watch_loop(lambda: next(views), 7.0, 20, sleep=sleeps.append, stream=stream)
    assert last.status == "SUCCEEDED" and sleeps == [7.0, 7.0]
    assert "i-0aaa" in stream.getvalue() and "100/100" in stream.getvalue()


def test_render_node_without_dump_has_no_percentage() -> None:
    v = WarmView("arn", "RUNNING", "w", None, None, [NodeView("i-1", None, None)])
    text = render(v, now_ms=0)
    assert "waiting" in text and "    -" in text
