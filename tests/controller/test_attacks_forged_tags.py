"""The attack table: a principal of the same account who can `CreateTags`, `StartExecution` (either
machine) or `PutEvents` must not make the controller touch what it did not create, nor warm a pair
of replicas the stack's configuration does not allow. Tags label; the plan (ids recorded when
created, ClientTokens from a secret nonce) and the configuration decide.

Each attack, what must hold, and the test that shows it:

- Every tag the controller used to trust (`cachewarm:managed`, `:stack`, `:execution`, `:warm-id`,
  `:node`, `:role`, with the right values and the execution's ARN predicted) on a foreign instance and
  volume made before a warm: a successful warm never terminates, deletes, detaches, attaches, commands
  or adopts them (`test_forged_before_a_successful_warm`).
- The same made during the warm (the running execution's ARN, every source node's id, and an instance
  launched with the ClientToken the old scheme derived from public values): neither the warm (that
  succeeds or fails and tears down) nor the teardown machine touches them (`test_forged_during_a_warm`,
  `test_forged_resources_survive_the_teardown_machine`).
- A production volume attached to a source host, tagged like the warm's own volume of that node: never
  unmounted, detached or deleted (`test_a_production_volume_tagged_like_the_warms_is_never_detached`).
- A foreign instance tagged `cachewarm:replica` of the source or of the destination (not in the
  replicas' security group): the warm is refused naming it, before any command, attachment or write
  reaches it (`test_a_node_by_tag_alone_is_refused_before_anything_touches_it`).
- The teardown machine given a RUNNING execution of the warm machine, or an execution of another state
  machine: refused (InvalidInputError), nothing touched
  (`test_the_teardown_machine_refuses_a_running_execution`,
  `test_the_teardown_machine_refuses_another_machines_execution`).
- A status-change event naming a stopped warm but carrying another warm's input: only the named
  execution is torn down, from the input DescribeExecution gives
  (`test_a_forged_event_input_cannot_redirect_the_teardown`).
- StartExecution pairing replicas the configuration does not allow, naming no replica, or with no pair
  configured at all: refused at ValidateInput, nothing created
  (`test_a_start_with_a_pair_not_configured_is_refused`, `test_with_no_pair_configured_nothing_is_warmed`).
- PutEvents pairing replicas the configuration does not allow: no rule on the bus matches, so no
  execution starts (tests/infra/test_triggers.py: `test_documented_event_starts_a_valid_warm`,
  `test_every_replica_pair_has_its_own_rule_and_none_starts_nothing`).
- `volume.kms_key_id` not the stack's key (or any key when the stack has none): refused at
  ValidateInput, nothing created (`test_a_volume_key_other_than_the_stacks_is_refused_before_anything`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import pytest
from cachewarm.contract import tags

from tests.controller.support import ACCOUNT, AMI, BUCKET, REGION
from tests.controller.test_state_machine import assert_nothing_left, snapshot
from tests.controller.test_teardown_machine import leave_a_running_warm_behind, status_change_event

STACK_TAG = "cachewarm-test"  # readable in the template: a forger knows it
EXECUTIONS = f"arn:aws:states:{REGION}:{ACCOUNT}:execution:cachewarm:"


def forged_tags(world: Any, execution_arn: str, node: str, role: str) -> list[dict[str, str]]:
    """Every tag the controller puts on what it creates, with the right values."""
    return tags.resource_tags(world.warm_id, node, role, execution_arn, STACK_TAG)


def forge_instance(world: Any, tag_list: list[dict[str, str]], az: str = "us-east-1a", **kw: Any) -> str:
    return str(
        world.ec2.run_instances(
            ImageId=AMI,
            InstanceType="m5.large",
            MinCount=1,
            MaxCount=1,
            SubnetId=world.subnets[az],
            TagSpecifications=[
                {"ResourceType": "instance", "Tags": tag_list},
                {"ResourceType": "volume", "Tags": tag_list},
            ],
            **kw,
        )["Instances"][0]["InstanceId"]
    )


def forge_volume(world: Any, tag_list: list[dict[str, str]], az: str = "us-east-1a") -> str:
    return str(
        world.ec2.create_volume(
            AvailabilityZone=az,
            Size=4,
            VolumeType="io2",
            Iops=100,
            MultiAttachEnabled=True,
            TagSpecifications=[{"ResourceType": "volume", "Tags": tag_list}],
        )["VolumeId"]
    )


def forge_all(world: Any, execution_arn: str) -> tuple[list[str], list[str]]:
    """A populator-looking instance and a volume-looking volume for every source node, in its AZ."""
    instances, volumes = [], []
    for node in world.source_ids:
        az = world.ec2.describe_instances(InstanceIds=[node])["Reservations"][0]["Instances"][0]["Placement"][
            "AvailabilityZone"
        ]
        instances.append(forge_instance(world, forged_tags(world, execution_arn, node, "populator"), az))
        volumes.append(forge_volume(world, forged_tags(world, execution_arn, node, "volume"), az))
    return instances, volumes


def predicted_arn(world: Any) -> str:
    """The ARN of the next execution World.run starts (its name is predictable, as EventBridge's
    or an operator's often are)."""
    return f"{EXECUTIONS}run-{world.serial + 1}"


def untouched(world: Any, instances: list[str], volumes: list[str]) -> None:
    """Still there as made; never attached to, detached from, commanded or recorded in a plan."""
    found = world.ec2.describe_instances(InstanceIds=instances)["Reservations"]
    assert {i["InstanceId"]: i["State"]["Name"] for r in found for i in r["Instances"]} == dict.fromkeys(
        instances, "running"
    )
    if volumes:
        vols = world.ec2.describe_volumes(VolumeIds=volumes)["Volumes"]
        assert {v["VolumeId"] for v in vols if v["State"] != "deleted"} == set(volumes)
    touched = {x for _, vol, iid in world.attacher.calls for x in (vol, iid)}
    assert not touched & {*instances, *volumes}, world.attacher.calls
    commanded = {i for cmd in world.agents.commands.values() for i in cmd.instance_ids}
    assert not commanded & set(instances)


def cleanup(world: Any, instances: list[str], volumes: list[str]) -> None:
    """The test removes its forgeries (the moto world is shared by the module's tests)."""
    if instances:
        world.ec2.terminate_instances(InstanceIds=instances)
    for v in volumes:
        world.ec2.delete_volume(VolumeId=v)


def recorded(world: Any) -> set[str]:
    plan = world.deps.s3.load_plan("warms", world.warm_id)
    return set() if plan is None else {x for r in plan.nodes for x in (r.volume_id, r.populator_id) if x}


# ---- forged tags ------------------------------------------------------------------------------------


def test_forged_before_a_successful_warm(world: Any) -> None:
    arn = predicted_arn(world)
    instances, volumes = forge_all(world, arn)
    # And a replica tag of a replica no pair names, on one more forged populator.
    labelled = [
        *forged_tags(world, arn, world.source_ids[0], "populator"),
        {"Key": tags.REPLICA, "Value": "main-c"},
    ]
    instances.append(forge_instance(world, labelled))
    seen: dict[str, set[str]] = {}
    world.before["InstallAgents"] = lambda: seen.setdefault("plan", recorded(world))
    try:
        ex = world.run(world.make_input())
        assert ex.status == "SUCCEEDED", ex.desc
        assert ex.desc["executionArn"] == arn
        assert len(seen["plan"]) == 6 and not seen["plan"] & {*instances, *volumes}  # nothing adopted
        untouched(world, instances, volumes)
    finally:
        cleanup(world, instances, volumes)
    assert_nothing_left(world)


def _forge_during(world: Any, made: dict[str, list[str]]) -> None:
    """Before CreateVolumes, with the running execution's ARN (its claim names it): what `_adopt`
    used to take, plus an instance launched with the ClientToken the old scheme derived from the ARN."""
    claim = json.loads(
        world.s3.get_object(Bucket=BUCKET, Key=f"_controller/warms/_claims/{world.warm_id}.json")[
            "Body"
        ].read()
    )
    arn = claim["execution_arn"]
    made["instances"], made["volumes"] = forge_all(world, arn)
    node = world.source_ids[0]
    old_token = "cw-populato-" + hashlib.sha256(f"{arn}|{node}|populator".encode()).hexdigest()[:48]
    made["instances"].append(
        forge_instance(world, forged_tags(world, arn, node, "populator"), ClientToken=old_token)
    )


@pytest.mark.parametrize("outcome", ["fails", "succeeds"])
def test_forged_during_a_warm(world: Any, outcome: str) -> None:
    made: dict[str, list[str]] = {}
    world.before["CreateVolumes"] = lambda: _forge_during(world, made)
    if outcome == "fails":
        world.faults["StartAgents"] = "after"
    try:
        ex = world.run(world.make_input())
        expected = ("FAILED", "WarmFailed") if outcome == "fails" else ("SUCCEEDED", "WarmSucceeded")
        assert (ex.status, ex.entered()[-1]) == expected, ex.entered()[-4:]
        untouched(world, made["instances"], made["volumes"])
    finally:
        cleanup(world, made.get("instances", []), made.get("volumes", []))
    assert_nothing_left(world)


def test_forged_resources_survive_the_teardown_machine(world: Any) -> None:
    made: dict[str, list[str]] = {}
    world.before["CreateVolumes"] = lambda: _forge_during(world, made)
    try:
        body, arn = leave_a_running_warm_behind(world)
        ex = world.run_teardown(status_change_event(json.dumps(body), "ABORTED", arn))
        assert ex.status == "SUCCEEDED", ex.desc
        untouched(world, made["instances"], made["volumes"])
    finally:
        cleanup(world, made.get("instances", []), made.get("volumes", []))
    assert_nothing_left(world)


def test_a_production_volume_tagged_like_the_warms_is_never_detached(world: Any) -> None:
    """A source host's own data volume, tagged as this warm's volume of that node (and attached to it
    before the warm): the warm attaches its own volume beside it; no teardown unmounts, detaches or
    deletes the production one."""
    node = world.source_ids[0]
    az = world.ec2.describe_instances(InstanceIds=[node])["Reservations"][0]["Instances"][0]["Placement"][
        "AvailabilityZone"
    ]
    arn = predicted_arn(world)
    prod = forge_volume(
        world, [*forged_tags(world, arn, node, "volume"), {"Key": tags.REPLICA, "Value": "main-a"}], az
    )
    world.attacher.table[prod] = {}
    from cachewarm_controller.attach import Attachment

    world.attacher.table[prod][node] = Attachment(prod, node, "attached", "/dev/sdz")
    try:
        body, stopped = leave_a_running_warm_behind(world)
        assert stopped == arn
        ex = world.run_teardown(status_change_event(json.dumps(body), "FAILED", stopped))
        assert ex.status == "SUCCEEDED", ex.desc
        assert world.attacher.table[prod] == {node: Attachment(prod, node, "attached", "/dev/sdz")}
        assert not [c for c in world.attacher.calls if c[1] == prod]
        assert world.ec2.describe_volumes(VolumeIds=[prod])["Volumes"][0]["State"] == "available"
    finally:
        world.attacher.table.pop(prod, None)
        cleanup(world, [], [prod])
    assert_nothing_left(world)


@pytest.mark.parametrize("role", ["source", "destination"])
def test_a_node_by_tag_alone_is_refused_before_anything_touches_it(world: Any, role: str) -> None:
    """An instance tagged `cachewarm:replica` of the source (it would be dumped and get the volume) or
    of the destination (it would be written the source's data), but not in the replicas' security
    group: the warm is refused naming it, before a command reaches it or anything is created."""
    replica = "main-a" if role == "source" else "main-b"
    foreign = forge_instance(world, [{"Key": tags.REPLICA, "Value": replica}])
    try:
        before = snapshot(world)
        ex = world.run(world.make_input())
        assert ex.status == "FAILED"
        failure = ex.failure()
        assert foreign in failure["cause"] and "security group" in failure["cause"], failure
        assert "CreateVolumes" not in world.invocations
        assert snapshot(world)[:2] == (before[0], before[1])  # no volume, no instance
        untouched(world, [foreign], [])
    finally:
        cleanup(world, [foreign], [])
    assert_nothing_left(world)


# ---- the teardown machine ---------------------------------------------------------------------------


def _state_of(world: Any) -> tuple[Any, ...]:
    """Everything a teardown could change."""
    plan = world.deps.s3.load_plan("warms", world.warm_id)
    return (
        snapshot(world),
        len(world.attacher.calls),
        list(world.agents.cancelled),
        list(world.agents.unmounted),
        None if plan is None else plan.model_dump_json(),
    )


def test_the_teardown_machine_refuses_a_running_execution(world: Any) -> None:
    body = world.make_input()
    seen: dict[str, Any] = {}

    def tear_down_the_running_warm() -> None:
        claim = world.s3.get_object(Bucket=BUCKET, Key=f"_controller/warms/_claims/{world.warm_id}.json")
        arn = json.loads(claim["Body"].read())["execution_arn"]
        assert world.sfn.describe_execution(executionArn=arn)["status"] == "RUNNING"
        before = _state_of(world)
        seen["teardown"] = world.run_teardown(status_change_event(json.dumps(body), "ABORTED", arn))
        seen["unchanged"] = _state_of(world) == before

    world.before["AttachVolumes"] = tear_down_the_running_warm  # volumes and populators exist
    ex = world.run(body)
    refused = seen["teardown"]
    assert refused.status == "FAILED" and refused.entered()[-1] == "TeardownFailed"
    failure = refused.failure()
    assert failure["error"] == "InvalidInputError"
    assert "is RUNNING" in json.loads(failure["cause"])["errorMessage"]
    assert seen["unchanged"]
    assert ex.status == "SUCCEEDED", ex.desc  # the warm went on, and tore itself down
    assert_nothing_left(world)


def test_the_teardown_machine_refuses_another_machines_execution(world: Any) -> None:
    body, arn = leave_a_running_warm_behind(world)
    other = world.sfn.create_state_machine(
        name="impostor",
        definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}),
        roleArn=f"arn:aws:iam::{ACCOUNT}:role/sfn",
    )["stateMachineArn"]
    impostor = world.execute(other, body, 30).desc["executionArn"]
    before = _state_of(world)
    for forged in (impostor, arn.replace(":cachewarm:", ":impostor:")):
        ex = world.run_teardown(status_change_event(json.dumps(body), "ABORTED", forged))
        assert ex.status == "FAILED" and ex.failure()["error"] == "InvalidInputError"
        assert "not an execution of this stack's warm machine" in ex.failure()["cause"]
    assert _state_of(world) == before
    assert world.run_teardown(status_change_event(json.dumps(body), "ABORTED", arn)).status == "SUCCEEDED"
    assert_nothing_left(world)


def test_a_forged_event_input_cannot_redirect_the_teardown(world: Any) -> None:
    """The event names a stopped warm but carries another (running) warm's input: the teardown reads
    the named execution's own input from DescribeExecution, so only that warm is torn down."""
    body, arn = leave_a_running_warm_behind(world)
    stopped_warm = world.warm_id
    other = {**body, "warm_id": "someone-elses-warm"}
    ex = world.run_teardown(status_change_event(json.dumps(other), "ABORTED", arn))
    assert ex.status == "SUCCEEDED", ex.desc
    world.warm_id = stopped_warm
    assert_nothing_left(world)


# ---- what may start a warm ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (
            {"source": {"replica": "main-b"}, "destination": {"replica": "main-a"}},
            "main-b -> destination main-a",
        ),
        ({"source": {}, "destination": {"replica": "sessions"}}, "no source is paired with it"),
        ({"source": {"asg_name": "main-a"}}, "asg:main-a -> destination main-b"),
        ({"destination": {"endpoints": ["10.0.16.5:11211"]}}, "destination: name the replica"),
        ({"destination": {"asg_name": "memcached-unpaired"}}, "destination asg:memcached-unpaired"),
    ],
)
def test_a_start_with_a_pair_not_configured_is_refused(
    world: Any, overrides: dict[str, Any], named: str
) -> None:
    before = snapshot(world)
    ex = world.run(world.make_input(**overrides))
    assert ex.status == "FAILED" and ex.entered() == ["ValidateInput", "InputRejected"]
    assert ex.failure()["error"] == "InvalidInputError"
    assert named in json.loads(ex.failure()["cause"])["errorMessage"]
    assert snapshot(world) == before  # no claim, volume, instance, command or object


def test_with_no_pair_configured_nothing_is_warmed(world: Any) -> None:
    world.deps.settings = dataclasses.replace(world.deps.settings, replica_pairs=())
    before = snapshot(world)
    ex = world.run(world.make_input())
    assert ex.entered() == ["ValidateInput", "InputRejected"]
    assert "replicaPairs is empty" in ex.failure()["cause"]
    assert snapshot(world) == before


@pytest.mark.parametrize("stack_key", [None, "arn:aws:kms:us-east-1:123456789012:key/1111-2222"])
def test_a_volume_key_other_than_the_stacks_is_refused_before_anything(
    world: Any, stack_key: str | None
) -> None:
    world.deps.settings = dataclasses.replace(world.deps.settings, kms_key_id=stack_key)
    before = snapshot(world)
    for key in ("alias/aws/ebs", "arn:aws:kms:us-east-1:999999999999:key/1111-2222"):
        ex = world.run(world.make_input(volume={"kms_key_id": key}))
        assert ex.entered() == ["ValidateInput", "InputRejected"]
        message = json.loads(ex.failure()["cause"])["errorMessage"]
        assert message.startswith(f"volume.kms_key_id: {key}") and (
            "not this stack's key" in message or "no key" in message
        )
    assert snapshot(world) == before
