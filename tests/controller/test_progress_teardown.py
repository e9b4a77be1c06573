"""CheckProgress, Verify, Teardown and the handlers as plain functions against moto plus the fakes."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from cachewarm.contract.status import NodeStatus, Progress
from cachewarm_controller import handlers
from cachewarm_controller.errors import (
    InvalidInputError,
    NodeFailedError,
    VerifyFailedError,
    WaitTimedOutError,
    WarmTimedOutError,
)
from cachewarm_controller.model import parse_input
from cachewarm_controller.plan import NodePlan, RoleRun
from cachewarm_controller.steps.progress import assess_node, check_progress
from cachewarm_controller.steps.teardown import TeardownTarget, teardown, teardown_target
from cachewarm_controller.steps.verification import verify

from tests.controller.agent_sim import arn_of
from tests.controller.steps_support import finish, loop, planned, target, through_agents
from tests.controller.support import BUCKET, SimNode

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
    w = through_agents(world, polling={"interval_seconds": 60, "max_revives": 1})
    out = check_progress(w, 0, world.deps)
    assert out["revived"] == [
        {"node": bad, "role": "populate", "reason": "populate agent reported failure: injected agent failure"}
    ]
    assert not out["done"] and out["poll"] == 1
    with pytest.raises(NodeFailedError, match=f"{bad}.*max_revives=1"):
        check_progress(w, 1, world.deps)
    finish(world, w)


def test_check_progress_deadline(world: Any) -> None:
    world.agents.default = SimNode(finish_after_s=10 * 3600)
    w = through_agents(world, polling={"interval_seconds": 60, "deadline_hours": 1})
    assert not check_progress(w, 0, world.deps)["done"]
    world.clock.advance(3601)
    with pytest.raises(WarmTimedOutError, match="0/3 nodes done"):
        check_progress(w, 1, world.deps)
    finish(world, w)


def test_check_progress_reads_status_objects_from_s3(world: Any) -> None:
    world.agents.store = world.deps.s3
    w = through_agents(world)
    world.clock.advance(601)
    out = check_progress(w, 0, world.deps)
    assert out["done"] and out["nodes_done"] == 3 and out["items"] == 3000
    plan = world.deps.s3.load_plan(w.prefix, w.warm_id)
    row = plan.node(world.source_ids[0])
    # The populate object is written by the node's populator, under its instance ARN.
    key = f"warms/{w.warm_id}/populate/{row.node_id}/{arn_of(str(row.populator_id))}.json"
    body = json.loads(world.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    assert body["state"] == "done" and body["role"] == "populate"
    # A corrupt status object is named, not fatal.
    bad = f"warms/{w.warm_id}/dump/{row.node_id}/{arn_of(row.node_id)}.json"
    world.s3.put_object(Bucket=BUCKET, Key=bad, Body=b"{not json")
    world.deps.s3.read_statuses(w.prefix, w.warm_id, plan.status_writers())
    assert world.deps.s3.corrupt == [bad]
    assert loop(verify, w, world.deps)[-1]["sampled"] == 3
    finish(world, w)
    assert world.status_objects() == []


def test_check_progress_asks_ssm_only_about_quiet_agents(world: Any) -> None:
    """Only this warm's commands, by id, and only for agents whose status objects say too little."""
    w = through_agents(world)
    asked: list[list[str]] = []
    real = world.agents.command_states
    world.agents.command_states = lambda ids: asked.append(list(ids)) or real(ids)  # type: ignore[func-returns-value]
    check_progress(w, 0, world.deps)
    assert asked == [[]]  # every agent heartbeats: nothing to ask
    quiet = world.source_ids[1]
    world.agents.nodes[quiet] = SimNode(silent_attempts=5)
    # The silent node's populate was sent at the same time; only its command is asked about.
    world.agents.sent[("populate", quiet)] = world.agents.sent[("populate", quiet)][:1]
    world.agents.sent[("populate", quiet)] = [(c, 1, t) for c, _, t in world.agents.sent[("populate", quiet)]]
    world.clock.advance(120)
    check_progress(w, 1, world.deps)
    p = world.deps.s3.load_plan(w.prefix, w.warm_id)
    assert asked[-1] == [p.node(quiet).populate.command_id]
    finish(world, w)


def test_a_node_that_heartbeats_without_progress_is_revived_once_then_fails(world: Any) -> None:
    frozen = world.source_ids[0]
    world.agents.nodes[frozen] = SimNode(frozen_attempts=5, finish_after_s=10_000)
    world.agents.default = SimNode(finish_after_s=10_000)
    w = through_agents(
        world, polling={"interval_seconds": 300, "stalled_after_seconds": 900, "max_revives": 5}
    )
    revived: list[dict[str, Any]] = []
    with pytest.raises(NodeFailedError, match=f"{frozen}: stalled, no progress for .* after a revive"):
        for poll in range(20):
            world.clock.advance(300)
            revived += check_progress(w, poll, world.deps)["revived"]
    assert [(r["node"], r["role"]) for r in revived] == [(frozen, "populate")]
    assert "stalled: no progress" in revived[0]["reason"]
    finish(world, w)


def test_an_agent_of_another_version_fails_the_node_without_revives(world: Any) -> None:
    bad = world.source_ids[2]
    world.agents.version_exit[bad] = 126
    w = through_agents(world)
    world.clock.advance(120)
    with pytest.raises(NodeFailedError, match=f"{bad}: .* cannot run: exit 126"):
        check_progress(w, 0, world.deps)
    assert len(world.agents.sent[("populate", bad)]) == 1  # no revive
    finish(world, w)


def test_check_progress_logs_one_line_per_node_with_the_dashboard_fields(world: Any) -> None:
    w = through_agents(world)
    lines: list[dict[str, Any]] = []
    check_progress(w, 0, world.deps, log=lines.append)
    assert sorted(line["node_id"] for line in lines) == sorted(world.source_ids)
    assert set(lines[0]) >= {"node_id", "populate_state", "items", "bytes", "files", "still_s"}
    finish(world, w)


def test_check_progress_reports_the_dumpers_pace(world: Any) -> None:
    """Running dumps' items/s are summed and those backing off counted (the dashboard's metrics); each
    node's line carries its own pace."""
    w = through_agents(world)
    real = world.agents._status
    slow = world.source_ids[0]

    def pacing(role: str, node: str) -> NodeStatus | None:
        st = real(role, node)
        if role != "dump" or st is None:
            return st
        pace = Progress(items=10, items_per_s=20_000, limit_items_per_s=0)
        if node == slow:
            pace = Progress(
                items=10,
                items_per_s=5_000,
                limit_items_per_s=6_000,
                backing_off=True,
                probe_p99_us=450,
                probe_baseline_us=300,
                backed_off_ms=1200,
            )
        return dataclasses.replace(st, state="running", progress=pace)

    world.agents._status = pacing
    lines: list[dict[str, Any]] = []
    out = check_progress(w, 0, world.deps, log=lines.append)
    n = len(world.source_ids)
    assert (out["dump_items_per_s"], out["dumps_backing_off"]) == (5_000 + 20_000 * (n - 1), 1)
    mine = {line["node_id"]: line for line in lines}
    assert [mine[slow][f] for f in ("dump_items_per_s", "dump_limit_items_per_s", "dump_backing_off")] == [
        5_000,
        6_000,
        1,
    ]
    # Issue 22: what the source's clients feel, per node.
    harm = ("dump_probe_p99_us", "dump_probe_baseline_us", "dump_backed_off_ms")
    assert [mine[slow][f] for f in harm] == [450, 300, 1200]
    world.agents._status = real
    out = check_progress(w, 1, world.deps)
    assert (out["dump_items_per_s"], out["dumps_backing_off"]) == (0, 0)  # done dumps have no pace
    finish(world, w)


def test_the_dumpers_protection_reaches_the_dump_document(world: Any) -> None:
    """Adaptive on and recency order by default; the input's settings as the document's strings."""
    w = through_agents(world)
    [first] = [c for c in world.agents.command_params if c["document"].endswith("dump-agent")][:1]
    assert (first["adaptive"], first["order"], first["crawlSleepUs"], first["maxBytesPerSecond"]) == (
        "on",
        "recency",
        "server",
        "0",
    )
    finish(world, w)


def test_the_inputs_protection_settings_reach_the_documents(world: Any) -> None:
    dumper = {"adaptive": False, "order": "crawl", "crawl_sleep_us": 250, "max_bytes_per_second": 64 << 20}
    populator = {"launch_template_id": world.template_id, "max_bytes_per_second": 32 << 20}
    w = through_agents(world, dumper=dumper, populator=populator)
    dump = next(c for c in world.agents.command_params if c["document"].endswith("dump-agent"))
    pop = next(c for c in world.agents.command_params if c["document"].endswith("populate-agent"))
    assert (dump["adaptive"], dump["order"], dump["crawlSleepUs"]) == ("off", "crawl", "250")
    assert (dump["maxBytesPerSecond"], pop["maxBytesPerSecond"]) == (str(64 << 20), str(32 << 20))
    finish(world, w)
    with pytest.raises(InvalidInputError):
        parse_input(world.make_input(dumper={"crawl_sleep_us": 1_000_001}))
    with pytest.raises(InvalidInputError):
        parse_input(world.make_input(dumper={"adaptive_target": 1.0}))


def test_the_adaptive_threshold_rides_in_the_adaptive_parameter() -> None:
    """The dump document's one `adaptive` parameter: off, on (the default threshold) or the
    threshold, always in the form its allowedPattern takes."""
    from cachewarm.contract import inputs
    from cachewarm_controller.steps.agent_commands import adaptive_parameter

    cases = {(False, 1.2): "off", (True, 1.5): "on", (True, 1.2): "1.2", (True, 2.0): "2"}
    cases |= {(True, 100.0): "100", (True, 1.999): "2", (True, 1.054): "1.05", (True, 12.346): "12.35"}
    for (on, ratio), want in cases.items():
        got = adaptive_parameter(on, ratio)
        assert got == want and inputs.matches(inputs.ADAPTIVE, got), (on, ratio, got)


def test_verify_catches_a_populate_that_missed_files(world: Any) -> None:
    w = through_agents(world)
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
        verify(w, {}, world.deps)
    finish(world, w)


def test_verify_runs_the_real_comparison_on_the_populators_and_judges_it(world: Any) -> None:
    bad = world.source_ids[0]
    world.agents.nodes[bad] = SimNode(verify_differences=5)
    w = through_agents(world, verify={"sample_keys": 500, "max_difference_ratio": 0.001})
    world.clock.advance(601)
    with pytest.raises(VerifyFailedError, match=f"{bad}: 5 of 500 sampled keys differ"):
        loop(verify, w, world.deps)
    sent = [c for c in world.agents.command_params if c["document"] == "cachewarm-verify-agent"]
    p = world.deps.s3.load_plan(w.prefix, w.warm_id)
    assert {(c["instance"], c["nodeId"]) for c in sent} == {(str(r.populator_id), r.node_id) for r in p.nodes}
    assert {c["source"] for c in sent} == {f"{r.private_ip}:11211" for r in p.nodes}
    assert all(c["sampleKeys"] == "500" and c["to"] == ",".join(p.destination_endpoints) for c in sent)
    finish(world, w)


# ---- teardown ----------------------------------------------------------------------------------------


def test_teardown_unmounts_both_hosts_before_it_detaches_and_runs_twice(world: Any) -> None:
    w = through_agents(world)
    world.agents.store = world.deps.s3
    plan = world.deps.s3.load_plan(w.prefix, w.warm_id)
    world.agents.read_statuses(w.prefix, w.warm_id, plan.status_writers())  # the agents write theirs
    assert world.status_objects()
    first = teardown(target(w), {}, world.deps)
    # First pass: cancel, unmount everywhere; nothing is detached until the unmounts answered.
    assert not first["complete"] and first["deleted_volumes"] == 0
    assert len(world.agents.cancelled) == 3  # the populate commands still running were cancelled
    hosts = {i for batch, _ in world.agents.unmounted for i in batch}
    assert set(world.source_ids) <= hosts and len(hosts) == 6
    assert all(mp == f"/mnt/cachewarm/{w.warm_id}" for _, mp in world.agents.unmounted)
    assert not [c for c in world.attacher.calls if c[0] == "detach"]
    outs = finish(world, w)
    assert outs[-1]["complete"] and world.inventory().empty and world.status_objects() == []
    assert teardown(target(w), {}, world.deps)["complete"]  # again: no-op


def test_a_busy_source_mount_is_never_detached(world: Any) -> None:
    """The unmount on a source node keeps failing (a process holds the file system): the volume stays
    attached there — no detach, forced or not — and teardown finally gives up naming the node."""
    w = through_agents(world)
    busy = world.source_ids[0]
    world.agents.busy[busy] = 10**6
    state: dict[str, Any] = {}
    with pytest.raises(WaitTimedOutError, match=f"on source {busy}: failed .*still busy"):
        for _ in range(500):
            state = teardown(target(w), state, world.deps)
    assert (
        "detach",
        next(v for v, t in world.attacher.table.items() if busy in t),
        busy,
    ) not in world.attacher.calls
    assert any(busy in t for t in world.attacher.table.values())
    world.agents.busy.clear()
    finish(world, w)


def test_teardown_of_one_execution_never_touches_another_executions_resources(world: Any) -> None:
    """Same warm id, two executions (as before the claim existed, or a claim lost to expiry):
    tearing down the second finds nothing of its own and leaves the first's alone."""
    w = through_agents(world)
    other = TeardownTarget(w.execution_arn + "-duplicate", w.warm_id, w.prefix, w.inp.mount_dir)
    out = teardown(other, {}, world.deps)
    assert out["complete"] and out["deleted_objects"] == 0
    volumes = [
        v for v in world.inventory().volumes if {"Key": "cachewarm:role", "Value": "volume"} in v["Tags"]
    ]
    assert len(world.inventory().instances) == 3 and len(volumes) == 3
    assert world.status_objects() and not world.agents.cancelled and not world.agents.unmounted
    finish(world, w)


def test_teardown_target_from_state_or_eventbridge() -> None:
    arn = "arn:aws:states:us-east-1:1:execution:m:e"
    state = {
        "execution_arn": arn,
        "input": {"warm_id": "w-1", "status_prefix": "pp", "mount_dir": "/mnt/cachewarm/data"},
    }
    assert teardown_target(state) == TeardownTarget(arn, "w-1", "pp", "/mnt/cachewarm/data")
    event = {
        "detail-type": "Step Functions Execution Status Change",
        "detail": {
            "status": "FAILED",
            "executionArn": arn,
            "input": json.dumps({"warm_id": "w-2", "mount_dir": "/x;reboot"}),
        },
    }
    assert teardown_target(event) == TeardownTarget(arn, "w-2", "warms", "/mnt/cachewarm")
    bad_input = {"detail": {"executionArn": arn, "input": "{not json"}}
    assert teardown_target(bad_input) == TeardownTarget(arn, None, "warms", "/mnt/cachewarm")
    with pytest.raises(InvalidInputError):
        teardown_target({"detail": {"input": "{}"}})
    with pytest.raises(InvalidInputError):
        teardown_target({"execution_arn": "w-1; rm -rf /"})


# ---- handlers ----------------------------------------------------------------------------------------


def test_handlers_build_no_client_at_import_and_need_their_environment(monkeypatch: Any) -> None:
    handlers.default_deps.cache_clear()
    assert handlers.default_deps.cache_info().currsize == 0
    monkeypatch.delenv("STATUS_BUCKET", raising=False)
    with pytest.raises(RuntimeError, match="STATUS_BUCKET"):
        handlers.settings_from_env()


def test_handler_logs_with_the_warm_id_and_emits_emf(world: Any, capsys: Any) -> None:
    from tests.controller.support import _Context

    arn = "arn:aws:states:us-east-1:1:execution:m:e"
    with pytest.raises(InvalidInputError):
        handlers.validate_input(
            {"input": {"warm_id": "BAD ID"}, "execution_arn": arn}, _Context("ValidateInput")
        )
    out = handlers.validate_input(
        {"input": world.make_input(), "execution_arn": arn}, _Context("ValidateInput")
    )
    assert out["execution_arn"] == arn
    assert out["warm_id"] == world.warm_id and out["input"]["volume"]["iops"] == 5000
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    emf = [line for line in lines if "_aws" in line]
    assert {m["Name"] for e in emf for m in e["_aws"]["CloudWatchMetrics"][0]["Metrics"]} >= {
        "StepFailed",
        "StepSucceeded",
    }
    assert all(e["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "CacheWarm" for e in emf)


def test_destination_endpoints_found_from_the_replica(world: Any) -> None:
    w = planned(world, destination={"replica": "main-b", "port": 11311})
    p = world.deps.s3.load_plan(w.prefix, w.warm_id)
    assert len(p.destination_endpoints) == 2
    assert all(e.startswith("10.0.") and e.endswith(":11311") for e in p.destination_endpoints)
    # A replica cannot warm itself: no configuration can pair it with itself.
    world.warm_id = f"{world.warm_id}-itself"
    with pytest.raises(InvalidInputError, match="main-a -> destination main-a is not one of"):
        planned(world, destination={"replica": "main-a"})
    with pytest.raises(InvalidInputError, match="give endpoints, or a replica or asg_name"):
        parse_input(world.make_input(destination={"port": 11211}))


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
