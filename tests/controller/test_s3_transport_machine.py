"""The S3 transport (issue 25, controller side) under moto's Step Functions interpreter: the real ASL,
the real handlers, moto's S3 and EC2. A warm with `transport: s3` creates no volume, launches its
populators in `s3.subnet_ids`, creates a bucket of its own (encrypted, lifecycle rule, policy, tags),
starts the agents with the S3 options, and leaves nothing — no object, no unfinished multipart upload,
no bucket — on every way the execution ends."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest
from cachewarm_controller import transport
from cachewarm_controller.awsutil import tag_value

from tests.controller.agent_sim import arn_of
from tests.controller.support import DOCS_DIR, DOCUMENT_NAMES, DUMP_DOC, POPULATE_DOC, REGION
from tests.controller.test_state_machine import assert_nothing_left
from tests.controller.test_teardown_machine import status_change_event

KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
CONTROLLER = "arn:aws:iam::123456789012:role/cachewarm-controller"


@pytest.fixture(autouse=True)
def as_the_stack_sets_it(world: Any) -> None:
    """The S3 transport needs the stack's key and the controller's role (the stack sets both)."""
    world.deps.settings = dataclasses.replace(
        world.deps.settings, kms_key_id=KEY, controller_role_arn=CONTROLLER
    )


@pytest.fixture(autouse=True)
def moto_reads_bucket_policies_as_denies(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto 5.2.5 turns every conditional Deny of a bucket policy into a denial of the request (its
    evaluator fails a condition whose context keys — aws:SecureTransport, aws:PrincipalAccount,
    aws:PrincipalArn — it does not have): the bucket's policy is checked by
    tests/infra/policy_eval.py in test_s3_transport_input.py instead, and moto's S3 ignores it here."""
    from moto.iam.access_control import PermissionResult
    from moto.s3.models import FakeBucket

    monkeypatch.setattr(FakeBucket, "get_permission", lambda self, action, resource: PermissionResult.NEUTRAL)


FAILABLE = [
    "Plan",
    "LaunchPopulators",
    "CreateTransport",
    "InstallAgents",
    "StartAgents",
    "CheckProgress",
    "Verify",
]


def s3_input(world: Any, **s3: Any) -> dict[str, Any]:
    spec = {"subnet_ids": [world.subnets["us-east-1b"]], **s3}
    return world.make_input(transport="s3", s3=spec)


def warm_buckets(world: Any) -> list[str]:
    return [
        b["Name"]
        for b in world.s3.list_buckets()["Buckets"]
        if b["Name"].startswith(f"{transport.BUCKET_PREFIX}{world.warm_id}-")
    ]


def fill_bucket(world: Any) -> None:
    """What the dump agents leave in the bucket: data objects under each node, DONE, and a multipart
    upload that never completed (its parts are billed until aborted)."""
    (name,) = warm_buckets(world)
    for n, node in enumerate(world.source_ids):
        for f in range(3):
            world.s3.put_object(Bucket=name, Key=f"dumps/{node}/data-{f:04d}", Body=b"x" * (n + f + 1))
        world.s3.put_object(Bucket=name, Key=f"dumps/{node}/DONE", Body=b"{}")
    world.s3.create_multipart_upload(Bucket=name, Key=f"dumps/{world.source_ids[0]}/data-9999")


def transport_record(world: Any, execution_arn: str) -> str | None:
    return world.deps.s3.transport_bucket("warms", execution_arn)


def assert_no_bucket(world: Any) -> None:
    assert warm_buckets(world) == []
    assert_nothing_left(world)


def test_s3_warm_creates_a_bucket_no_volume_and_leaves_nothing(world: Any) -> None:
    world.agents.store = world.deps.s3
    seen: dict[str, Any] = {}

    def inspect() -> None:  # before StartAgents: the bucket exists, configured
        (name,) = warm_buckets(world)
        seen["name"] = name
        enc = world.s3.get_bucket_encryption(Bucket=name)["ServerSideEncryptionConfiguration"]["Rules"][0]
        seen["sse"] = enc["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"]
        seen["rule"] = enc["ApplyServerSideEncryptionByDefault"]
        seen["lifecycle"] = world.s3.get_bucket_lifecycle_configuration(Bucket=name)["Rules"][0]
        seen["policy"] = json.loads(world.s3.get_bucket_policy(Bucket=name)["Policy"])
        seen["tags"] = {t["Key"]: t["Value"] for t in world.s3.get_bucket_tagging(Bucket=name)["TagSet"]}
        seen["public"] = world.s3.get_public_access_block(Bucket=name)["PublicAccessBlockConfiguration"]
        seen["populators"] = world.inventory().instances
        fill_bucket(world)

    world.before["StartAgents"] = inspect
    ex = world.run(s3_input(world, expire_days=2))
    assert ex.status == "SUCCEEDED", ex.desc
    entered = ex.entered()
    assert "CreateVolumes" not in entered and "AttachVolumes" not in entered
    assert (
        entered.index("LaunchPopulators") < entered.index("CreateTransport") < entered.index("InstallAgents")
    )
    assert world.attacher.calls == []
    created = ex.outputs("CreateTransport")[0]["transport"]
    assert created["bucket"] == seen["name"] and transport.NAME_PATTERN.fullmatch(seen["name"])
    assert len(seen["name"]) <= 63 and seen["name"].startswith(f"{transport.BUCKET_PREFIX}{world.warm_id}-")
    assert seen["rule"]["KMSMasterKeyID"] == KEY
    # The bucket as CreateTransport left it.
    assert seen["sse"] == "aws:kms"
    assert seen["lifecycle"]["Expiration"]["Days"] == 2
    assert seen["lifecycle"]["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"] == 1
    assert all(seen["public"].values())
    sids = {s["Sid"] for s in seen["policy"]["Statement"]}
    assert {
        "TlsOnly",
        "ThisAccountOnly",
        "InstancesWriteOnlyTheirOwnPrefix",
        "UploadsTakeTheStackKey",
    } <= sids
    assert seen["tags"]["cachewarm:warm-id"] == world.warm_id
    assert seen["tags"]["cachewarm:execution"] == ex.desc["executionArn"]
    # Populators only in the input's subnet, none in the source nodes' own.
    pops = seen["populators"]
    assert len(pops) == 3 and {p["SubnetId"] for p in pops} == {world.subnets["us-east-1b"]}
    # The agents were started with the S3 options, which pass the documents' patterns.
    docs = {n: json.loads((DOCS_DIR / f"{s}.json").read_text()) for s, n in DOCUMENT_NAMES.items()}
    starts = [c for c in world.agents.commands.values() if c.document in (DUMP_DOC, POPULATE_DOC)]
    assert len(starts) == 6
    for cmd in starts:
        for key, value in cmd.parameters.items():
            assert re.fullmatch(docs[cmd.document]["parameters"][key]["allowedPattern"], value), (key, value)
        assert cmd.parameters["device"] == "none"
        assert cmd.parameters["s3Region"] == REGION
        # Each pair's own prefix: dumps/<source ARN>/<its populator's ARN>.
        node = cmd.parameters["nodeId"]
        (pop,) = [p["InstanceId"] for p in pops if tag_value(p, "cachewarm:node") == node]
        pair = f"s3://{seen['name']}/dumps/{arn_of(node)}/{arn_of(pop)}"
        if cmd.document == DUMP_DOC:
            assert cmd.parameters["toS3"] == pair
        else:
            assert cmd.parameters["fromS3"] == f"{pair}/{node}"
    # Teardown emptied the bucket (objects and the unfinished upload) and deleted it, then its record.
    last = ex.outputs("Teardown")[-1]["teardown"]
    assert last["complete"] and sum(p["teardown"]["transport_objects"] for p in ex.outputs("Teardown")) == 12
    assert_no_bucket(world)
    assert transport_record(world, ex.desc["executionArn"]) is None


@pytest.mark.parametrize("state", FAILABLE)
def test_a_failing_s3_warm_leaves_nothing(world: Any, state: str) -> None:
    world.agents.store = world.deps.s3
    if state not in ("Plan", "LaunchPopulators", "CreateTransport"):
        world.before["InstallAgents"] = lambda: fill_bucket(world)
    world.faults[state] = "after"
    ex = world.run(s3_input(world))
    assert ex.status == "FAILED", ex.desc
    assert ex.entered()[-1] == "WarmFailed", ex.entered()
    assert_no_bucket(world)


def test_a_transient_error_after_the_bucket_was_made_adopts_it(world: Any) -> None:
    world.faults["CreateTransport"] = "transient-after"
    ex = world.run(s3_input(world))
    assert ex.status == "SUCCEEDED", ex.desc
    outs = ex.outputs("CreateTransport")
    assert len(outs) == 1 and outs[0]["transport"]["created"] is False  # the retry found it
    assert_no_bucket(world)


def test_a_stopped_s3_warm_is_torn_down_from_the_event(world: Any) -> None:
    world.agents.store = world.deps.s3
    world.before["InstallAgents"] = lambda: fill_bucket(world)
    world.faults["StartAgents"] = "after"
    world.faults["Teardown"] = "before"
    body = s3_input(world)
    ex = world.run(body)
    assert ex.status == "FAILED" and ex.entered()[-1] == "TeardownFailed", ex.entered()
    assert len(warm_buckets(world)) == 1
    world.faults.clear()
    ev = status_change_event(json.dumps(body), "ABORTED", ex.desc["executionArn"])
    torn = world.run_teardown(ev)
    assert torn.status == "SUCCEEDED", torn.desc
    assert_no_bucket(world)


def test_teardown_without_a_warm_id_finds_the_bucket_by_the_execution(world: Any) -> None:
    """An event whose input has no valid warm id: the bucket is still found by the execution's ARN,
    through the record the controller made before it created the bucket."""
    world.before["InstallAgents"] = lambda: fill_bucket(world)
    world.faults["StartAgents"] = "after"
    world.faults["Teardown"] = "before"
    ex = world.run(s3_input(world))
    assert ex.status == "FAILED"
    world.faults.clear()
    torn = world.run_teardown(status_change_event("{}", "ABORTED", ex.desc["executionArn"]))
    assert torn.status == "SUCCEEDED", torn.desc
    assert warm_buckets(world) == []


def test_an_s3_warm_into_a_region_the_stack_does_not_name_is_refused(world: Any) -> None:
    """Only the stack's destination regions (its IAM reaches no other): refused at ValidateInput
    (test_s3_transport_cross_region.py runs a cross-region warm)."""
    ex = world.run(s3_input(world, destination_region="eu-west-1"))
    assert ex.status == "FAILED"
    assert "eu-west-1" in ex.failure()["cause"] and ex.failure()["error"] == "InvalidInputError"
    assert "destinationRegions" in ex.failure()["cause"]
    assert_no_bucket(world)


def test_an_unknown_s3_subnet_fails_at_plan_naming_it(world: Any) -> None:
    ex = world.run(s3_input(world, subnet_ids=["subnet-0123456789abcdef0"]))
    assert ex.status == "FAILED"
    assert "subnet-0123456789abcdef0" in ex.failure()["cause"]
    assert_no_bucket(world)


@pytest.mark.parametrize("key", ["alias/aws/s3", "arn:aws:kms:us-east-1:999999999999:key/other"])
def test_a_transport_key_not_the_stacks_is_refused_before_anything_is_created(world: Any, key: str) -> None:
    """`s3.kms_key_id` naming S3's own key (readable to anyone with s3:GetObject on the bucket) or any
    other: refused at ValidateInput — no claim, no instance, no bucket, no record."""
    ex = world.run(s3_input(world, kms_key_id=key))
    assert ex.status == "FAILED" and ex.entered()[-1] == "InputRejected", ex.entered()
    assert ex.failure()["error"] == "InvalidInputError" and "s3.kms_key_id" in ex.failure()["cause"]
    assert world.inventory().instances == [] and world.inventory().volumes == []
    assert_no_bucket(world)
    assert transport_record(world, ex.desc["executionArn"]) is None
    listed = world.s3.list_objects_v2(Bucket=world.deps.s3.bucket).get("Contents", [])
    assert [
        o["Key"] for o in listed if world.warm_id + "/" in o["Key"] or world.warm_id + "." in o["Key"]
    ] == []
