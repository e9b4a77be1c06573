"""The real ASL file executed by moto's Step Functions interpreter, its Lambda tasks dispatched
in-process to the real handlers. Assertions are on the executed history as well as the end state."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.controller.support import (
    BUCKET,
    DOCS_DIR,
    DOCUMENT_NAMES,
    DUMP_DOC,
    POPULATE_DOC,
    STATS_DOC,
    VERIFY_DOC,
    SimNode,
)

TASKS_BEFORE_POLL = [
    "SurveyReplicas",
    "Plan",
    "CreateVolumes",
    "LaunchPopulators",
    "AttachVolumes",
    "InstallAgents",
    "StartAgents",
]
# Every Task after the claim: a failure there tears down what this execution created.
ALL_FAILABLE = [*TASKS_BEFORE_POLL, "CheckProgress", "Verify"]


def first_entries(entered: list[str]) -> list[str]:
    """States in the order they were first entered (loops collapsed)."""
    seen: list[str] = []
    for name in entered:
        if name not in seen:
            seen.append(name)
    return seen


def assert_nothing_left(world: Any) -> None:
    inv = world.inventory()
    assert inv.empty, inv.describe()
    assert world.status_objects() == []
    assert all(not atts for atts in world.attacher.table.values()), world.attacher.table


def test_success_path(world: Any) -> None:
    world.agents.store = world.deps.s3  # agents' status objects go through moto's S3 and back
    ex = world.run(world.make_input())
    assert ex.status == "SUCCEEDED", ex.desc
    entered = ex.entered()
    tasks = [n for n in first_entries(entered) if n in (*TASKS_BEFORE_POLL, "ClaimWarmId", "ValidateInput")]
    assert tasks == ["ValidateInput", "ClaimWarmId", *TASKS_BEFORE_POLL]
    assert entered[-3:] == ["TeardownComplete?", "WarmOutcome", "WarmSucceeded"]
    assert entered.index("Verify") < entered.index("Teardown")
    assert "WarmFailed" not in entered and "InputRejected" not in entered
    # Polls at replica level: one CheckProgress per interval until every node is done (600 s / 120 s).
    progress = ex.outputs("CheckProgress")
    assert [p["progress"]["done"] for p in progress] == [False] * (len(progress) - 1) + [True]
    assert progress[-1]["progress"]["nodes_done"] == 3
    assert len(progress) == 5
    plan = ex.outputs("Plan")[0]["plan"]
    assert plan["nodes"] == 3 and plan["source_replica"] == "main-a"
    assert ex.outputs("CreateVolumes")[0]["volumes"]["created"] == 3
    assert ex.outputs("AttachVolumes")[0]["attach"]["attachments"] == 6
    assert ex.outputs("StartAgents")[0]["agents"]["commands"] == 6
    assert ex.outputs("Verify")[-1]["verify"]["sampled"] == 3
    assert ex.outputs("Verify")[-1]["verify"]["checked_keys"] == 3 * 1000
    # Each volume went to its source node and its populator; everything is gone afterwards.
    attached = [(v, i) for op, v, i in world.attacher.calls if op == "attach"]
    assert {i for _, i in attached} >= set(world.source_ids)
    assert_nothing_left(world)
    assert ex.types()[-1] == "ExecutionSucceeded"


# Parameters the stack fills in as document defaults (infra/cachewarm_infra/compute.py), never sent.
STACK_FILLED = {
    "agentVersion",
    "installScriptUrl",
    "installScriptSha256",
    "agentBundleUrl",
    "agentBundleSha256",
    "dumperTarballUrl",
    "dumperTarballSha256",
}


def test_every_command_matches_its_ssm_document(world: Any) -> None:
    ex = world.run(world.make_input())
    assert ex.status == "SUCCEEDED"
    by_name = {
        name: json.loads((DOCS_DIR / f"{stem}.json").read_text()) for stem, name in DOCUMENT_NAMES.items()
    }
    sent = world.agents.commands
    assert {c.document for c in sent.values()} == set(DOCUMENT_NAMES.values())
    populators = {i["InstanceId"] for i in ex_instances(world, "populator")}
    for cmd in sent.values():
        doc = by_name[cmd.document]
        # Every parameter the controller sends exists in the document and passes its allowedPattern.
        for key, value in cmd.parameters.items():
            assert key in doc["parameters"], (cmd.document, key)
            assert re.fullmatch(doc["parameters"][key]["allowedPattern"], value), (key, value)
        required = {k for k, p in doc["parameters"].items() if "default" not in p} - STACK_FILLED
        assert required <= cmd.parameters.keys(), cmd.document
        targets = set(cmd.instance_ids)
        if cmd.document in (DUMP_DOC, STATS_DOC):
            assert targets <= set(world.source_ids), cmd.document
        elif cmd.document in (POPULATE_DOC, VERIFY_DOC):
            assert targets <= populators, cmd.document
        if cmd.document == DUMP_DOC:
            assert cmd.instance_ids == (cmd.parameters["nodeId"],)
    # The commands really reached SSM (moto) with those parameters.
    listed = [c for c in world.ssm.list_commands()["Commands"] if world.warm_id + " " in c["Comment"]]
    assert len(listed) == len(sent)
    dump = next(c for c in listed if c["DocumentName"] == DUMP_DOC)
    assert dump["Parameters"]["statusBucket"] == [BUCKET]


def ex_instances(world: Any, role: str) -> list[dict[str, Any]]:
    """Every instance of this warm with the role tag, whatever its state (teardown terminated them)."""
    flt = [
        {"Name": "tag:cachewarm:warm-id", "Values": [world.warm_id]},
        {"Name": "tag:cachewarm:role", "Values": [role]},
    ]
    return [i for r in world.ec2.describe_instances(Filters=flt)["Reservations"] for i in r["Instances"]]


# "before": the step fails without doing anything; "after": it did its work (created, attached or
# started things) and then failed — the hard case for teardown.
@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("stage", ALL_FAILABLE)
def test_failure_at_every_stage_tears_down(world: Any, stage: str, when: str) -> None:
    world.faults[stage] = when
    ex = world.run(world.make_input())
    assert ex.status == "FAILED"
    failure = ex.failure()
    assert failure["error"] == "InjectedFault"
    assert stage in failure["cause"]
    entered = ex.entered()
    failed_at = entered.index(stage)
    assert "Teardown" in entered[failed_at + 1 :], entered
    assert entered[-1] == "WarmFailed"
    # The injected fault is not retried (only throttling/transient errors are).
    assert world.invocations.count(stage) == 1
    # Nothing after the failing stage ran.
    later = ALL_FAILABLE[ALL_FAILABLE.index(stage) + 1 :]
    assert not set(later) & set(world.invocations)
    assert_nothing_left(world)


def test_transient_error_is_retried_with_backoff(world: Any) -> None:
    world.faults["CreateVolumes"] = "transient"
    ex = world.run(world.make_input())
    assert ex.status == "SUCCEEDED"
    assert world.invocations.count("CreateVolumes") == 2
    create_events = [e["type"] for e in ex.events if e["type"].startswith("LambdaFunction")]
    assert "LambdaFunctionFailed" in create_events
    assert ex.outputs("CreateVolumes")[0]["volumes"]["volumes"] == 3
    assert_nothing_left(world)


@pytest.mark.parametrize("stage", ["CreateVolumes", "LaunchPopulators", "AttachVolumes", "StartAgents"])
def test_a_retried_step_does_not_duplicate_its_work(world: Any, stage: str) -> None:
    """The step's work is done but its response is lost; the ASL retries it: nothing is created,
    attached or started twice (a repeated create call carries the same ClientToken and EC2 returns
    the same resource; commands are adopted by the plan)."""
    world.faults[stage] = "transient-after"
    ex = world.run(world.make_input())
    assert ex.status == "SUCCEEDED", ex.desc
    assert world.invocations.count(stage) == 2
    assert ex.outputs("CreateVolumes")[0]["volumes"]["volumes"] == 3
    assert [e["type"] for e in ex.events].count("LambdaFunctionFailed") == 1  # the lost response
    assert len([c for op, *c in world.attacher.calls if op == "attach"]) == 6
    assert len([c for c in world.agents.command_params if c["document"] != VERIFY_DOC]) == 6
    steps_out = {
        "CreateVolumes": ("volumes", "created"),
        "LaunchPopulators": ("populators", "launched"),
        "StartAgents": ("agents", "commands"),
    }
    if stage in steps_out:
        key, field = steps_out[stage]
        assert ex.outputs(stage)[0][key][field] == 0  # the retry found everything done
    assert_nothing_left(world)


def test_stale_node_is_revived_and_the_warm_completes(world: Any) -> None:
    stale = world.source_ids[1]
    world.agents.nodes[stale] = SimNode(silent_attempts=1)  # first populate never heartbeats
    world.agents.store = world.deps.s3
    ex = world.run(world.make_input())
    assert ex.status == "SUCCEEDED", ex.desc
    revived = [r for p in ex.outputs("CheckProgress") for r in p["progress"]["revived"]]
    assert len(revived) == 1
    assert revived[0]["node"] == stale and revived[0]["role"] == "populate"
    assert "heartbeat stale" in revived[0]["reason"]
    runs = world.agents.sent[("populate", stale)]
    assert [attempt for _, attempt, _ in runs] == [1, 2]
    assert runs[0][0] in world.agents.cancelled  # the hung command was cancelled before the resume
    assert_nothing_left(world)


def test_node_failing_past_revive_limit_fails_the_warm(world: Any) -> None:
    bad = world.source_ids[0]
    world.agents.nodes[bad] = SimNode(fail_attempts=10)
    ex = world.run(world.make_input())
    assert ex.status == "FAILED"
    failure = ex.failure()
    assert failure["error"] == "NodeFailedError"
    assert bad in failure["cause"] and "max_revives=2" in failure["cause"]
    assert len(world.agents.sent[("populate", bad)]) == 3  # first run + 2 revives
    assert ex.entered()[-3:] == ["TeardownComplete?", "WarmOutcome", "WarmFailed"]
    assert_nothing_left(world)


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"warm_id": "warm-test-1"}, "destination"),
        ({"warm_id": "Bad Id!", "destination": {"endpoints": ["a:1"]}}, "warm_id"),
        ("hello", "input must be a JSON object"),
        ([1, 2], "input must be a JSON object"),
        ("HOSTILE", "destination.endpoints.0"),
        ("NO_TEMPLATE", "populator"),
        ("TWO_SOURCES", "source"),
        ("UNKNOWN_FIELD", "volumes"),
        ("IOPS", "volume.iops"),
    ],
)
def test_bad_input_is_rejected_before_anything_is_created(world: Any, raw: Any, named: str) -> None:
    if raw == "HOSTILE":
        raw = world.make_input(destination={"endpoints": ["10.0.0.1:11211; rm -rf /"]})
    elif raw == "NO_TEMPLATE":
        raw = world.make_input(populator={})
    elif raw == "TWO_SOURCES":
        raw = world.make_input(source={"replica": "main-a", "instance_ids": [world.source_ids[0]]})
    elif raw == "UNKNOWN_FIELD":
        raw = world.make_input(volumes={"iops": 5000})
    elif raw == "IOPS":
        raw = world.make_input(volume={"iops": 10})
    before = snapshot(world)
    ex = world.run(raw)
    assert ex.status == "FAILED"
    failure = ex.failure()
    assert failure["error"] == "InvalidInputError"
    assert named in json.loads(failure["cause"])["errorMessage"]
    assert ex.entered() == ["ValidateInput", "InputRejected"]
    assert world.invocations == ["ValidateInput"]
    assert snapshot(world) == before  # no volume, instance, command or object created


def snapshot(world: Any) -> tuple[int, int, int, int]:
    """Counts of everything that could be created (across all warms in the shared moto world)."""
    vols = len(world.ec2.describe_volumes()["Volumes"])
    insts = sum(len(r["Instances"]) for r in world.ec2.describe_instances()["Reservations"])
    cmds = len(world.ssm.list_commands()["Commands"])
    objs = world.s3.list_objects_v2(Bucket=BUCKET).get("KeyCount", 0)
    return vols, insts, cmds, objs


def test_a_warm_id_claimed_by_another_execution_ends_cleanly(world: Any) -> None:
    """The claim, not a tag search, decides: a second execution for a claimed warm id ends as a
    duplicate before it creates, writes or deletes anything — the owner's resources are untouched."""
    other = "arn:aws:states:us-east-1:123456789012:execution:cachewarm:the-owner"
    world.s3.put_object(
        Bucket=BUCKET,
        Key=f"_controller/warms/_claims/{world.warm_id}.json",
        Body=json.dumps({"warm_id": world.warm_id, "execution_arn": other}),
    )
    vol = world.ec2.create_volume(
        AvailabilityZone="us-east-1a",
        Size=4,
        TagSpecifications=[
            {"ResourceType": "volume", "Tags": [{"Key": "cachewarm:warm-id", "Value": world.warm_id}]}
        ],
    )["VolumeId"]
    before = snapshot(world)
    ex = world.run(world.make_input())
    assert ex.status == "SUCCEEDED"
    assert ex.entered() == ["ValidateInput", "ClaimWarmId", "WarmIdClaimed?", "AlreadyClaimed"]
    assert ex.outputs("ClaimWarmId")[0]["claim"] == {"owned": False, "owner": other}
    assert world.invocations == ["ValidateInput", "ClaimWarmId"]
    assert snapshot(world) == before
    assert [v["VolumeId"] for v in world.inventory().volumes] == [vol]
    world.ec2.delete_volume(VolumeId=vol)
    world.s3.delete_object(Bucket=BUCKET, Key=f"_controller/warms/_claims/{world.warm_id}.json")


def test_non_nitro_source_fails_in_plan_before_creating_anything(world: Any) -> None:
    old = world.add_source_nodes("old-nodes", 2, instance_type="t2.micro")
    world.allow("old-nodes->main-b")
    before = snapshot(world)
    ex = world.run(world.make_input(source={"instance_ids": old}))
    assert ex.status == "FAILED"
    failure = ex.failure()
    assert failure["error"] == "NotNitroError"
    assert "t2.micro" in failure["cause"] and "Nitro" in failure["cause"]
    assert "CreateVolumes" not in world.invocations
    assert snapshot(world)[:2] == before[:2]  # no volume, no instance (the survey asked for stats)
    assert_nothing_left(world)


def test_source_picked_by_most_items_when_not_given(world: Any) -> None:
    body = world.make_input()
    del body["source"]
    ex = world.run(body)
    assert ex.status == "SUCCEEDED"
    # main-b is the destination; main-a is the only candidate left, asked for its stats via SSM.
    assert ex.outputs("Plan")[0]["plan"]["source_replica"] == "main-a"
