"""Each step as a plain function against moto (EC2/SSM/S3) plus the fakes for what moto gets wrong."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cachewarm.contract.inputs import ebs_device_path
from cachewarm.contract.status import NodeStatus, Progress
from cachewarm_controller import handlers
from cachewarm_controller.errors import (
    AttachmentLimitError,
    InvalidInputError,
    NodeFailedError,
    NotNitroError,
    PlanError,
    ResourceFailedError,
    VerifyFailedError,
    WaitTimedOutError,
    WarmTimedOutError,
)
from cachewarm_controller.model import (
    GIB,
    NodePlan,
    RoleRun,
    WarmInput,
    parse_input,
    volume_size_gib,
)
from cachewarm_controller.steps.agent_commands import start_agents
from cachewarm_controller.steps.planning import plan, validate
from cachewarm_controller.steps.progress import assess_node, check_progress, verify
from cachewarm_controller.steps.resources import (
    attach_volumes,
    check_populators,
    check_volumes,
    create_volumes,
    launch_populators,
)
from cachewarm_controller.steps.teardown import TeardownTarget, teardown, teardown_target

from tests.controller.support import BUCKET, SimNode


def inp(world: Any, **kw: Any) -> WarmInput:
    return parse_input(world.make_input(**kw))


def through_agents(world: Any, **kw: Any) -> WarmInput:
    """Run the steps up to and including StartAgents."""
    i = inp(world, **kw)
    plan(i, world.deps)
    create_volumes(i, world.deps)
    launch_populators(i, world.deps)
    attach_volumes(i, world.deps)
    start_agents(i, world.deps)
    return i


def finish(world: Any, i: WarmInput) -> None:
    """Teardown passes until complete (the state machine loops the same way)."""
    for attempt in range(10):
        if teardown(i.warm_id, i.status_prefix, attempt, 10, world.deps)["complete"]:
            return
    raise AssertionError("teardown did not complete")


def tags_of(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", [])}


# ---- input -------------------------------------------------------------------------------------------


def test_input_defaults_and_field_named_errors(world: Any) -> None:
    i = inp(world)
    assert i.volume.iops == 5000 and i.populator.mode == "add" and i.polling.max_revives == 2
    with pytest.raises(InvalidInputError, match=r"destination\.endpoints\.1"):
        parse_input(world.make_input(destination={"endpoints": ["10.0.0.1:11211", "x:y"]}))
    with pytest.raises(InvalidInputError, match=r"source\.instance_ids\.0"):
        parse_input(world.make_input(source={"instance_ids": ["i-zzz"]}))
    with pytest.raises(InvalidInputError, match=r"populator\.mode"):
        parse_input(world.make_input(populator={"launch_template_id": world.template_id, "mode": "replace"}))
    with pytest.raises(InvalidInputError, match=r"polling\.interval_seconds"):
        parse_input(world.make_input(polling={"interval_seconds": 0}))


def test_volume_size_has_headroom_overhead_and_io2_floors() -> None:
    assert volume_size_gib(100 * GIB, 1.25, 5000) == 126  # 125 data + 1 overhead
    assert volume_size_gib(0, 1.25, 100) == 4  # io2 minimum
    assert volume_size_gib(1 * GIB, 1.0, 16_000) == 16  # <= 1000 IOPS per GiB
    with pytest.raises(InvalidInputError, match="65536 GiB"):
        volume_size_gib(60_000 * GIB, 1.25, 5000)


def test_device_path_is_the_stable_nvme_name() -> None:
    assert ebs_device_path("vol-0abc") == "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0abc"


# ---- plan --------------------------------------------------------------------------------------------


def test_plan_rows_per_node_saved_to_s3(world: Any) -> None:
    i = inp(
        world,
        source={"replica": "main-a", "node_stats": {world.source_ids[0]: {"items": 7, "bytes": 10 * GIB}}},
    )
    out = plan(i, world.deps)
    assert out["nodes"] == 3 and out["source_replica"] == "main-a"
    warm = world.deps.s3.load_plan(i.status_prefix, i.warm_id)
    row = warm.node(world.source_ids[0])
    assert (row.items, row.bytes, row.size_gib) == (7, 10 * GIB, 14)
    for r in warm.nodes:
        src = world.ec2.describe_instances(InstanceIds=[r.node_id])["Reservations"][0]["Instances"][0]
        assert r.az == src["Placement"]["AvailabilityZone"] and r.subnet_id == src["SubnetId"]


def test_plan_errors_name_the_problem(world: Any) -> None:
    with pytest.raises(PlanError, match="no running instance tagged"):
        plan(inp(world, source={"replica": "nope"}), world.deps)
    with pytest.raises(PlanError, match="i-00000000deadbeef"):
        plan(inp(world, source={"instance_ids": ["i-00000000deadbeef"]}), world.deps)
    with pytest.raises(PlanError, match="launch template"):
        plan(inp(world, populator={"launch_template_name": "missing-template"}), world.deps)
    wrong = {"us-east-1a": world.subnets["us-east-1b"]}
    with pytest.raises(PlanError, match="single-AZ"):
        plan(inp(world, populator={"launch_template_id": world.template_id, "subnet_ids": wrong}), world.deps)
    xen = world.ec2.create_launch_template(
        LaunchTemplateName=f"xen-{world.warm_id}",
        LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "t2.micro"},
    )["LaunchTemplate"]["LaunchTemplateId"]
    with pytest.raises(NotNitroError, match=r"t2\.micro"):
        plan(inp(world, populator={"launch_template_id": xen}), world.deps)


def test_validate_refuses_a_warm_id_in_use(world: Any) -> None:
    i = through_agents(world)
    with pytest.raises(InvalidInputError, match="in use"):
        validate(world.make_input(), world.ec2)
    finish(world, i)


# ---- volumes / populators / attach / agents ----------------------------------------------------------


def test_create_volumes_io2_multi_attach_encrypted_tagged_idempotent(world: Any, monkeypatch: Any) -> None:
    i = inp(world, volume={"iops": 6000, "kms_key_id": "alias/cachewarm"})
    plan(i, world.deps)
    first = create_volumes(i, world.deps)
    again = create_volumes(i, world.deps)  # a retried step
    assert first["created"] == 3 and again["created"] == 0
    vols = world.inventory().volumes
    assert len(vols) == 3
    warm = world.deps.s3.load_plan(i.status_prefix, i.warm_id)
    for v in vols:
        t = tags_of(v)
        row = warm.node(t["cachewarm:node"])
        assert row.volume_id == v["VolumeId"]
        assert (v["VolumeType"], v["Iops"], v["MultiAttachEnabled"], v["Encrypted"]) == (
            "io2",
            6000,
            True,
            True,
        )
        assert v["KmsKeyId"] == "alias/cachewarm"
        assert v["AvailabilityZone"] == row.az and v["Size"] == row.size_gib
        assert t["cachewarm:warm-id"] == i.warm_id and t["cachewarm:managed"] == "true"
    assert check_volumes(i, 0, world.deps)["ready"]
    finish(world, i)


def test_client_tokens_are_stable_per_warm_and_node() -> None:
    from cachewarm_controller.awsutil import client_token

    a = client_token("w1", "i-1", "volume")
    assert a == client_token("w1", "i-1", "volume") and len(a) <= 64
    assert a != client_token("w1", "i-2", "volume") != client_token("w2", "i-1", "volume")


def test_populators_in_the_source_az_tagged_idempotent(world: Any) -> None:
    i = inp(world)
    plan(i, world.deps)
    assert launch_populators(i, world.deps)["launched"] == 3
    assert launch_populators(i, world.deps)["launched"] == 0
    warm = world.deps.s3.load_plan(i.status_prefix, i.warm_id)
    pops = {p["InstanceId"]: p for p in world.inventory().instances}
    assert len(pops) == 3
    for row in warm.nodes:
        p = pops[str(row.populator_id)]
        assert p["Placement"]["AvailabilityZone"] == row.az
        assert tags_of(p)["cachewarm:node"] == row.node_id
    world.agents.offline = set(pops)
    assert not check_populators(i, 0, world.deps)["ready"]
    with pytest.raises(WaitTimedOutError, match="populators"):
        check_populators(i, i.polling.resource_wait_attempts - 1, world.deps)
    world.agents.offline = set()
    assert check_populators(i, 1, world.deps)["ready"]
    world.ec2.terminate_instances(InstanceIds=[next(iter(pops))])
    with pytest.raises(ResourceFailedError, match=r"terminated|shutting-down"):
        check_populators(i, 2, world.deps)
    finish(world, i)


def test_attach_each_volume_to_source_and_populator_idempotent(world: Any) -> None:
    i = inp(world)
    plan(i, world.deps)
    create_volumes(i, world.deps)
    launch_populators(i, world.deps)
    assert attach_volumes(i, world.deps) == {"attachments": 6}
    calls = len(world.attacher.calls)
    attach_volumes(i, world.deps)
    assert len(world.attacher.calls) == calls  # nothing re-attached
    warm = world.deps.s3.load_plan(i.status_prefix, i.warm_id)
    for row in warm.nodes:
        got = {a.instance_id for a in world.attacher.table[str(row.volume_id)].values()}
        assert got == {row.node_id, row.populator_id}
    finish(world, i)


def test_attach_refuses_a_volume_at_the_multi_attach_limit(world: Any) -> None:
    i = inp(world)
    plan(i, world.deps)
    create_volumes(i, world.deps)
    launch_populators(i, world.deps)
    vol = world.inventory().volumes[0]["VolumeId"]
    for n in range(16):
        world.attacher.attach(vol, f"i-0{n:016x}", "/dev/sdf")
    with pytest.raises(AttachmentLimitError, match="16"):
        attach_volumes(i, world.deps)
    world.attacher.table[vol] = {}
    finish(world, i)


def test_start_agents_sends_each_role_once(world: Any) -> None:
    i = through_agents(world)
    assert len(world.agents.command_params) == 6
    assert start_agents(i, world.deps) == {"commands": 0}
    dump = next(c for c in world.agents.command_params if c["document"] == "cachewarm-dump-agent")
    assert dump["memcached"] == "127.0.0.1:11211" and dump["statusBucket"] == BUCKET
    assert dump["device"].startswith("/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol")
    finish(world, i)


# ---- progress ----------------------------------------------------------------------------------------


def status(role: str, state: str, hb_ms: int, attempt: int = 1, error: str | None = None) -> NodeStatus:
    return NodeStatus("w-1", "i-1", role, state, hb_ms, Progress(items=5, files=1), error, attempt)


ROW = NodePlan(
    node_id="i-1",
    az="us-east-1a",
    subnet_id="subnet-1",
    instance_type="r5.large",
    items=1,
    bytes=1,
    size_gib=4,
    dump=RoleRun(command_id="d1", attempt=1, sent_ms=0),
    populate=RoleRun(command_id="p1", attempt=2, sent_ms=900_000),
)
RESENT = 900_000
NOW = 1_000_000
STALE = 600_000
RUNNING = status("populate", "running", NOW)
Expect = tuple[bool, str | None, str]


@pytest.mark.parametrize(
    ("statuses", "commands", "expect"),
    [
        ({"populate": status("populate", "done", NOW)}, {}, (True, None, "")),
        (
            {"dump": status("dump", "running", NOW), "populate": status("populate", "running", NOW)},
            {},
            (False, None, ""),
        ),
        (
            {"dump": status("dump", "done", 0), "populate": status("populate", "running", NOW)},
            {},
            (False, None, ""),
        ),
        ({"dump": status("dump", "failed", NOW, error="disk full")}, {}, (False, "dump", "disk full")),
        ({"dump": status("dump", "running", NOW)}, {"d1": "TimedOut"}, (False, "dump", "TimedOut")),
        ({"dump": status("dump", "running", 100)}, {}, (False, "dump", "heartbeat stale")),
        (
            {"dump": status("dump", "done", 0), "populate": status("populate", "running", NOW)},
            {"p1": "Success"},
            (False, "populate", "without a done status"),
        ),
        # A failure written before the current (resumed) command was sent does not count.
        (
            {"dump": status("dump", "done", 0), "populate": status("populate", "failed", RESENT - 1)},
            {},
            (False, None, ""),
        ),
        (
            {"dump": status("dump", "done", 0), "populate": status("populate", "failed", RESENT + 1)},
            {},
            (False, "populate", "reported failure"),
        ),
    ],
)
def test_assess_node(
    statuses: dict[str, NodeStatus], commands: dict[str, str], expect: tuple[Any, ...]
) -> None:
    v = assess_node(ROW, statuses, {"d1": "InProgress", "p1": "InProgress", **commands}, NOW, STALE)
    assert (v.done, v.revive) == expect[:2]
    assert expect[2] in v.reason


def test_check_progress_revives_then_fails_past_the_budget(world: Any) -> None:
    bad = world.source_ids[2]
    world.agents.nodes[bad] = SimNode(fail_attempts=10)
    i = through_agents(world, polling={"interval_seconds": 60, "max_revives": 1})
    out = check_progress(i, 0, world.deps)
    assert out["revived"] == [
        {"node": bad, "role": "populate", "reason": "populate agent reported failure: injected agent failure"}
    ]
    assert not out["done"] and out["poll"] == 1
    with pytest.raises(NodeFailedError, match=f"{bad}.*max_revives=1"):
        check_progress(i, 1, world.deps)
    finish(world, i)


def test_check_progress_deadline(world: Any) -> None:
    world.agents.default = SimNode(finish_after_s=10 * 3600)
    i = through_agents(world, polling={"interval_seconds": 60, "deadline_hours": 1})
    assert not check_progress(i, 0, world.deps)["done"]
    world.clock.advance(3601)
    with pytest.raises(WarmTimedOutError, match="0/3 nodes done"):
        check_progress(i, 1, world.deps)
    finish(world, i)


def test_check_progress_reads_status_objects_from_s3(world: Any) -> None:
    world.agents.store = world.deps.s3
    i = through_agents(world)
    world.clock.advance(601)
    out = check_progress(i, 0, world.deps)
    assert out["done"] and out["nodes_done"] == 3 and out["items"] == 3000
    key = f"warms/{i.warm_id}/populate/{world.source_ids[0]}.json"
    body = json.loads(world.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    assert body["state"] == "done" and body["role"] == "populate"
    # A corrupt status object is named, not fatal.
    world.s3.put_object(
        Bucket=BUCKET, Key=f"warms/{i.warm_id}/dump/i-0000000000000bad.json", Body=b"{not json"
    )
    world.deps.s3.read_statuses(i.status_prefix, i.warm_id)
    assert world.deps.s3.corrupt == [f"warms/{i.warm_id}/dump/i-0000000000000bad.json"]
    verify(i, world.deps)
    finish(world, i)
    assert world.status_objects() == []


def test_verify_catches_a_populate_that_missed_files(world: Any) -> None:
    i = through_agents(world)
    world.clock.advance(601)
    real = world.agents._status

    def short(role: str, node: str) -> NodeStatus | None:
        st = real(role, node)
        if st and role == "populate" and node == world.source_ids[1]:
            return NodeStatus(
                st.warm_id, node, role, st.state, st.heartbeat_ms, Progress(items=999, files=9), None, 1
            )
        return st

    world.agents._status = short
    with pytest.raises(VerifyFailedError, match=f"{world.source_ids[1]}: populated 9 of 10 files"):
        verify(i, world.deps)
    finish(world, i)


# ---- teardown ----------------------------------------------------------------------------------------


def test_teardown_from_any_stage_and_twice(world: Any) -> None:
    i = through_agents(world)
    world.agents.store = world.deps.s3
    world.agents.read_statuses(i.status_prefix, i.warm_id)  # the agents write their status objects
    assert world.status_objects()
    out = teardown(i.warm_id, i.status_prefix, 0, 5, world.deps)
    # First pass: detach (from source and populator) and terminate; volumes go once detached.
    assert not out["complete"] and out["terminated"] == 3 and out["deleted_volumes"] == 0
    assert all(not atts for atts in world.attacher.table.values())
    assert len(world.agents.cancelled) == 3  # the populate commands still running were cancelled
    # Unmounted on the source nodes (production cache nodes) before the detach.
    assert world.agents.unmounted == [(tuple(sorted(world.source_ids)), f"/mnt/cachewarm/{i.warm_id}")]
    attempt = 1
    while not teardown(i.warm_id, i.status_prefix, attempt, 5, world.deps)["complete"]:
        attempt += 1
    assert world.inventory().empty and world.status_objects() == []
    assert teardown(i.warm_id, i.status_prefix, 0, 5, world.deps)["complete"]  # again: no-op


def test_teardown_gives_up_naming_leftovers(world: Any) -> None:
    i = inp(world)
    plan(i, world.deps)
    create_volumes(i, world.deps)
    vol = world.inventory().volumes[0]["VolumeId"]
    world.attacher.table[vol] = {}
    world.attacher.detach = lambda *a: None  # a detach that never happens
    from cachewarm_controller.attach import Attachment

    world.attacher.table[vol]["i-0123456789abcdef0"] = Attachment(
        vol, "i-0123456789abcdef0", "attached", "/dev/sdf"
    )
    teardown(i.warm_id, i.status_prefix, 0, 3, world.deps)
    with pytest.raises(WaitTimedOutError, match=vol):
        teardown(i.warm_id, i.status_prefix, 2, 3, world.deps)
    world.attacher.table[vol] = {}
    teardown(i.warm_id, i.status_prefix, 0, 3, world.deps)
    assert world.inventory().empty


def test_teardown_target_from_state_or_eventbridge() -> None:
    state = {"warm_id": "w-1", "input": {"warm_id": "w-1", "status_prefix": "p", "mount_dir": "/data"}}
    assert teardown_target(state) == TeardownTarget("w-1", "p", "/data")
    event = {
        "detail-type": "Step Functions Execution Status Change",
        "detail": {"status": "ABORTED", "input": json.dumps({"warm_id": "w-2", "mount_dir": "/x;reboot"})},
    }
    assert teardown_target(event) == TeardownTarget("w-2", "warms", "/mnt/cachewarm")
    with pytest.raises(InvalidInputError):
        teardown_target({"detail": {"input": "{}"}})
    with pytest.raises(InvalidInputError):
        teardown_target({"warm_id": "w-1; rm -rf /"})


# ---- handlers ----------------------------------------------------------------------------------------


def test_handlers_build_no_client_at_import_and_need_their_environment(monkeypatch: Any) -> None:
    handlers.default_deps.cache_clear()
    assert handlers.default_deps.cache_info().currsize == 0
    monkeypatch.delenv("STATUS_BUCKET", raising=False)
    with pytest.raises(RuntimeError, match="STATUS_BUCKET"):
        handlers.settings_from_env()


def test_handler_logs_with_the_warm_id_and_emits_emf(world: Any, capsys: Any) -> None:
    from tests.controller.support import _Context

    with pytest.raises(InvalidInputError):
        handlers.validate_input({"warm_id": "BAD ID"}, _Context("ValidateInput"))
    out = handlers.validate_input(world.make_input(), _Context("ValidateInput"))
    assert out["warm_id"] == world.warm_id and out["input"]["volume"]["iops"] == 5000
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    emf = [line for line in lines if "_aws" in line]
    assert {m["Name"] for e in emf for m in e["_aws"]["CloudWatchMetrics"][0]["Metrics"]} >= {
        "StepFailed",
        "StepSucceeded",
    }
    assert all(e["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "CacheWarm" for e in emf)


def test_destination_endpoints_found_from_the_replica(world: Any) -> None:
    i = inp(world, destination={"replica": "main-b", "port": 11311})
    assert plan(i, world.deps)["destination_endpoints"] == 2
    warm = world.deps.s3.load_plan(i.status_prefix, i.warm_id)
    assert all(e.startswith("10.0.") and e.endswith(":11311") for e in warm.destination_endpoints)
    with pytest.raises(PlanError, match="cannot warm itself"):
        plan(inp(world, destination={"replica": "main-a"}), world.deps)
    with pytest.raises(InvalidInputError, match="give endpoints, or a replica or asg_name"):
        parse_input(world.make_input(destination={"port": 11211}))
    finish(world, i)


@pytest.mark.parametrize("path", ["statemachine/example-input.json", "infra/examples/start-input.json"])
def test_example_inputs_are_valid(path: str) -> None:
    from tests.controller.support import REPO

    parse_input(json.loads((REPO / path).read_text()))


def test_default_clients_retry_adaptively_and_are_built_once(world: Any, monkeypatch: Any) -> None:
    handlers.default_deps.cache_clear()
    try:
        deps = handlers.default_deps()
        assert handlers.default_deps() is deps
        retries = deps.ec2.meta.config.retries
        assert retries["mode"] == "adaptive" and retries["total_max_attempts"] == 11  # 1 + 10 retries
        assert deps.settings.status_bucket == BUCKET
    finally:
        handlers.default_deps.cache_clear()
