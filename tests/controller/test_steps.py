"""Each step as a plain function against moto (EC2/SSM/S3) plus the fakes for what moto gets wrong."""

from __future__ import annotations

from typing import Any

import pytest
from cachewarm.contract.inputs import ebs_device_path
from cachewarm_controller.errors import (
    AttachmentLimitError,
    InvalidInputError,
    NotNitroError,
    PlanError,
    ResourceFailedError,
    WaitTimedOutError,
)
from cachewarm_controller.model import (
    GIB,
    parse_input,
    volume_size_gib,
)
from cachewarm_controller.steps.agent_commands import install_agents, start_agents
from cachewarm_controller.steps.common import Warm
from cachewarm_controller.steps.planning import claim, plan, survey, validate
from cachewarm_controller.steps.resources import attach_volumes, create_volumes, launch_populators

from tests.controller.steps_support import (
    EXECUTION,
    finish,
    loop,
    planned,
    tags_of,
    through_agents,
    warm_of,
)
from tests.controller.support import BUCKET

# ---- input -------------------------------------------------------------------------------------------


def test_input_defaults_and_field_named_errors(world: Any) -> None:
    i = warm_of(world).inp
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


# ---- survey / plan -----------------------------------------------------------------------------------


def test_survey_asks_stats_in_one_command_per_50_nodes_and_waits_for_answers(world: Any) -> None:
    w = warm_of(world)
    first = survey(w, {}, world.deps)
    assert first["candidates"] == 3  # (the simulated nodes answer at once)
    probes = [c for c in world.agents.commands.values() if c.document == "cachewarm-memcached-stats"]
    assert len(probes) == 1 and set(probes[0].instance_ids) == set(world.source_ids)
    again = survey(w, {"passes": 1, "waits": 1}, world.deps)
    assert again["ready"]
    assert len([c for c in world.agents.commands.values() if c.document == "cachewarm-memcached-stats"]) == 1


def test_plan_rows_per_node_saved_to_s3(world: Any) -> None:
    w = planned(
        world,
        source={"replica": "main-a", "node_stats": {world.source_ids[0]: {"items": 7, "bytes": 10 * GIB}}},
    )
    p = world.deps.s3.load_plan(w.prefix, w.warm_id)
    assert p.execution_arn == w.execution_arn and p.source_replica == "main-a" and len(p.nodes) == 3
    row = p.node(world.source_ids[0])
    assert (row.items, row.bytes, row.size_gib) == (7, 10 * GIB, 14)
    for r in p.nodes:
        src = world.ec2.describe_instances(InstanceIds=[r.node_id])["Reservations"][0]["Instances"][0]
        assert r.az == src["Placement"]["AvailabilityZone"] and r.subnet_id == src["SubnetId"]
        assert r.private_ip == src["PrivateIpAddress"]


def test_plan_errors_name_the_problem(world: Any) -> None:
    world.allow("nope->main-b")
    with pytest.raises(PlanError, match="no running instance tagged cachewarm:replica=nope"):
        planned(world, source={"replica": "nope"})
    with pytest.raises(PlanError, match="i-00000000deadbeef"):
        planned(world, source={"instance_ids": ["i-00000000deadbeef"]})
    untagged = world.add_source_nodes(None, 1)
    with pytest.raises(PlanError, match=f"{untagged[0]} is not a node of main-a"):
        planned(world, source={"instance_ids": untagged})
    world.ec2.terminate_instances(InstanceIds=untagged)
    with pytest.raises(PlanError, match="launch template"):
        planned(world, populator={"launch_template_name": "missing-template"})
    wrong = {"us-east-1a": world.subnets["us-east-1b"]}
    with pytest.raises(PlanError, match="single-AZ"):
        planned(world, populator={"launch_template_id": world.template_id, "subnet_ids": wrong})
    xen = world.ec2.create_launch_template(
        LaunchTemplateName=f"xen-{world.warm_id}",
        LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "t2.micro"},
    )["LaunchTemplate"]["LaunchTemplateId"]
    with pytest.raises(NotNitroError, match=r"t2\.micro"):
        planned(world, populator={"launch_template_id": xen})


def test_stack_subnets_are_the_default_populator_subnets(world: Any) -> None:
    from dataclasses import replace

    b = world.ec2.create_subnet(
        VpcId=world.ec2.describe_subnets(SubnetIds=[world.subnets["us-east-1b"]])["Subnets"][0]["VpcId"],
        CidrBlock="10.0.64.0/20",
        AvailabilityZone="us-east-1b",
    )["Subnet"]["SubnetId"]
    world.deps.settings = replace(world.deps.settings, populator_subnet_ids=(b,))
    w = planned(world)
    rows = world.deps.s3.load_plan(w.prefix, w.warm_id).nodes
    assert {r.subnet_id for r in rows if r.az == "us-east-1b"} == {b}
    assert {r.subnet_id for r in rows if r.az == "us-east-1a"} == {world.subnets["us-east-1a"]}


def test_validate_refuses_input_whose_history_could_overflow(world: Any) -> None:
    ok = validate(world.make_input(), world.deps)
    assert ok.warm_id == world.warm_id
    with pytest.raises(
        InvalidInputError, match=r"polling: .* history events .* interval_seconds of at least"
    ):
        validate(world.make_input(polling={"interval_seconds": 5, "deadline_hours": 240}), world.deps)


def test_the_first_claim_owns_the_warm_id_and_a_retry_keeps_it(world: Any) -> None:
    a, b = warm_of(world), Warm(warm_of(world).inp, EXECUTION + "other")
    assert claim(a, world.deps) == {"owned": True, "owner": a.execution_arn}
    assert claim(a, world.deps) == {"owned": True, "owner": a.execution_arn}  # a retried step
    assert claim(b, world.deps) == {"owned": False, "owner": a.execution_arn}


# ---- volumes / populators / attach / agents ----------------------------------------------------------


def test_create_volumes_io2_multi_attach_encrypted_tagged_idempotent(world: Any) -> None:
    w = planned(world, volume={"iops": 6000, "kms_key_id": "alias/cachewarm"})
    first = loop(create_volumes, w, world.deps)
    again = create_volumes(w, {}, world.deps)  # a retried step
    assert sum(o["created"] for o in first) == 3 and again["created"] == 0 and again["ready"]
    vols = world.inventory().volumes
    assert len(vols) == 3
    p = world.deps.s3.load_plan(w.prefix, w.warm_id)
    for v in vols:
        t = tags_of(v)
        row = p.node(t["cachewarm:node"])
        assert row.volume_id == v["VolumeId"]
        assert (v["VolumeType"], v["Iops"], v["MultiAttachEnabled"], v["Encrypted"]) == (
            "io2",
            6000,
            True,
            True,
        )
        assert v["KmsKeyId"] == "alias/cachewarm"
        assert v["AvailabilityZone"] == row.az and v["Size"] == row.size_gib
        assert t["cachewarm:warm-id"] == w.warm_id and t["cachewarm:managed"] == "true"
        assert t["cachewarm:execution"] == w.execution_arn
    finish(world, w)


def test_client_tokens_are_stable_per_plan_and_node_and_unguessable(world: Any) -> None:
    from cachewarm_controller.ownership import client_token, new_nonce

    nonce = new_nonce()
    a = client_token(nonce, "i-1", "volume")
    assert a == client_token(nonce, "i-1", "volume") and len(a) <= 64
    assert a != client_token(nonce, "i-2", "volume") != client_token(new_nonce(), "i-1", "volume")
    # The nonce is the plan's, made when the plan is first written (128 random bits), and kept: a
    # repeated Plan does not replace it. Nothing public (ARN, warm id, node) gives the tokens.
    w = planned(world)
    first = world.deps.s3.load_plan(w.prefix, w.warm_id)
    assert len(first.nonce) == 32 and first.nonce not in w.execution_arn
    plan(w, world.deps)
    assert world.deps.s3.load_plan(w.prefix, w.warm_id).nonce == first.nonce


def test_populators_in_the_source_az_tagged_idempotent(world: Any) -> None:
    w = planned(world)
    assert sum(o["launched"] for o in loop(launch_populators, w, world.deps)) == 3
    assert launch_populators(w, {}, world.deps)["launched"] == 0
    p = world.deps.s3.load_plan(w.prefix, w.warm_id)
    pops = {i["InstanceId"]: i for i in world.inventory().instances}
    assert len(pops) == 3
    for row in p.nodes:
        pop = pops[str(row.populator_id)]
        assert pop["Placement"]["AvailabilityZone"] == row.az
        assert tags_of(pop)["cachewarm:node"] == row.node_id
    world.agents.offline = set(pops)
    assert not launch_populators(w, {}, world.deps)["ready"]
    limit = w.inp.polling.resource_wait_attempts + 1
    with pytest.raises(WaitTimedOutError, match="populators"):
        launch_populators(w, {"passes": limit, "waits": limit}, world.deps)
    world.agents.offline = set()
    assert launch_populators(w, {"passes": 1}, world.deps)["ready"]
    world.ec2.terminate_instances(InstanceIds=[next(iter(pops))])
    with pytest.raises(ResourceFailedError, match=r"terminated|shutting-down"):
        launch_populators(w, {"passes": 2}, world.deps)
    finish(world, w)


def test_attach_each_volume_to_source_and_populator_idempotent(world: Any) -> None:
    w = planned(world)
    loop(create_volumes, w, world.deps)
    loop(launch_populators, w, world.deps)
    outs = loop(attach_volumes, w, world.deps)
    assert outs[-1]["attachments"] == 6 and sum(o["attached"] for o in outs) == 6
    calls = len(world.attacher.calls)
    assert attach_volumes(w, {}, world.deps)["attached"] == 0
    assert len(world.attacher.calls) == calls  # nothing re-attached
    p = world.deps.s3.load_plan(w.prefix, w.warm_id)
    for row in p.nodes:
        got = {a.instance_id for a in world.attacher.table[str(row.volume_id)].values()}
        assert got == {row.node_id, row.populator_id}
    finish(world, w)


def test_attach_refuses_a_volume_at_the_multi_attach_limit(world: Any) -> None:
    w = planned(world)
    loop(create_volumes, w, world.deps)
    loop(launch_populators, w, world.deps)
    vol = world.inventory().volumes[0]["VolumeId"]
    for n in range(16):
        world.attacher.attach(vol, f"i-0{n:016x}", "/dev/sdf")
    with pytest.raises(AttachmentLimitError, match="16"):
        attach_volumes(w, {}, world.deps)
    world.attacher.table[vol] = {}
    finish(world, w)


def test_install_agents_on_every_instance_50_per_command(world: Any) -> None:
    w = planned(world)
    for step in (create_volumes, launch_populators, attach_volumes):
        loop(step, w, world.deps)
    p = world.deps.s3.load_plan(w.prefix, w.warm_id)
    bad = str(p.nodes[0].populator_id)
    world.agents.install_exit[bad] = 1
    from cachewarm_controller.errors import AgentInstallError

    assert not install_agents(w, {}, world.deps)["ready"]  # sent; results next pass
    with pytest.raises(AgentInstallError, match=f"{bad} failed"):
        install_agents(w, {"passes": 1}, world.deps)
    installs = [c for c in world.agents.commands.values() if c.document == "cachewarm-install-agent"]
    assert len(installs) == 1 and len(installs[0].instance_ids) == 6 and installs[0].parameters == {}
    del world.agents.install_exit[bad]
    assert install_agents(w, {}, world.deps)["ready"]
    assert len([c for c in world.agents.commands.values() if c.document == "cachewarm-install-agent"]) == 1
    finish(world, w)


def test_start_agents_sends_each_role_once(world: Any) -> None:
    w = through_agents(world)
    assert len(world.agents.command_params) == 6
    assert start_agents(w, {}, world.deps)["commands"] == 0
    dump = next(c for c in world.agents.command_params if c["document"] == "cachewarm-dump-agent")
    assert dump["memcached"] == "127.0.0.1:11211" and dump["statusBucket"] == BUCKET
    assert dump["device"].startswith("/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol")
    finish(world, w)


def test_a_send_whose_response_was_lost_is_adopted_not_repeated(world: Any) -> None:
    """StartAgents records each send before making it: after a lost response the retry finds the
    command by its comment and sends nothing twice."""
    w = planned(world)
    for step in (create_volumes, launch_populators, attach_volumes, install_agents):
        loop(step, w, world.deps)
    world.agents.lost_sends = 1
    from cachewarm_controller.errors import TransientError

    with pytest.raises(TransientError):
        start_agents(w, {}, world.deps)
    assert start_agents(w, {}, world.deps)["ready"]  # the retry
    assert len(world.agents.command_params) == 6
    p = world.deps.s3.load_plan(w.prefix, w.warm_id)
    assert all(r.dump.command_id and r.populate.command_id for r in p.nodes)
    assert {(r.dump.attempt, r.populate.attempt) for r in p.nodes} == {(1, 1)}
    finish(world, w)
