"""transport.py against moto's S3: the bucket is made once and adopted after, and emptying a big
bucket takes several bounded passes — unfinished uploads, every object, then the bucket."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from cachewarm_controller import transport
from cachewarm_controller.errors import TransportError
from moto import mock_aws

from tests.s3_owner import OwnerCheck

ARN = "arn:aws:states:eu-west-1:123456789012:execution:cachewarm:run-1"


@pytest.fixture
def s3() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("s3", region_name="eu-west-1")


ACCOUNT = "123456789012"
NAME = transport.bucket_name("warm-1", "0123456789abcdef")


def spec() -> transport.BucketSpec:
    return transport.BucketSpec(
        name=NAME,
        region="eu-west-1",
        warm_id="warm-1",
        execution_arn=ARN,
        stack_tag="stack",
        expire_days=3,
        kms_key_id="arn:aws:kms:eu-west-1:123456789012:key/abc",
        controller_role_arn="arn:aws:iam::123456789012:role/controller",
        account=ACCOUNT,
    )


def test_made_once_then_adopted_outside_us_east_1(s3: Any) -> None:
    assert transport.ensure_bucket(s3, spec()) is True
    assert transport.ensure_bucket(s3, spec()) is False
    loc = s3.get_bucket_location(Bucket=spec().name)["LocationConstraint"]
    assert loc == "eu-west-1"
    rule = s3.get_bucket_encryption(Bucket=spec().name)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert rule["ApplyServerSideEncryptionByDefault"]["KMSMasterKeyID"].endswith("key/abc")
    assert transport.find_buckets(s3, NAME, ACCOUNT) == [NAME]
    assert transport.find_buckets(s3, None, ACCOUNT) == []  # nothing recorded: nothing to find
    assert transport.find_buckets(s3, transport.bucket_name("warm-1", "f" * 16), ACCOUNT) == []


def test_a_big_bucket_is_emptied_over_bounded_passes(s3: Any) -> None:
    name = spec().name
    transport.ensure_bucket(s3, spec())
    s3.delete_bucket_policy(Bucket=name)  # moto would deny on its conditions (see the machine tests)
    for i in range(2500):
        s3.put_object(Bucket=name, Key=f"dumps/i-0aaaaaaaaaaaaaaaa/data-{i:05d}", Body=b"x")
    for i in range(3):
        s3.create_multipart_upload(Bucket=name, Key=f"dumps/i-0aaaaaaaaaaaaaaaa/part-{i}")
    passes = []
    while True:
        one = transport.delete_bucket(s3, name, max_calls=2, account=ACCOUNT)
        assert one.calls <= 2
        passes.append(one)
        if one.gone:
            break
        assert one.left == [f"s3://{name}"] and len(passes) < 10
    assert sum(p.uploads for p in passes) == 3
    assert sum(p.objects for p in passes) == 2500
    assert transport.find_buckets(s3, name, ACCOUNT) == []
    # Again: nothing there, nothing to do, gone.
    assert transport.delete_bucket(s3, name, max_calls=5, account=ACCOUNT).gone


def test_every_call_names_the_owner_and_another_accounts_bucket_is_refused(s3: Any) -> None:
    """S3's bucket owner condition (tests/s3_owner.py: moto ignores it): the controller's every call
    on a transport bucket names this account; a bucket of the recorded name that another account
    owns is neither configured nor emptied — the step fails naming it."""
    check = OwnerCheck(ACCOUNT).install(s3)
    assert transport.ensure_bucket(s3, spec()) is True
    assert transport.ensure_bucket(s3, spec()) is False
    assert check.unchecked == [] and check.refused == []
    s3.delete_bucket_policy(Bucket=NAME)  # moto would deny on its conditions (see the machine tests)
    s3.put_object(Bucket=NAME, Key="dumps/x/y/i-0aaaaaaaaaaaaaaaa/data-0001", Body=b"x")
    s3.create_multipart_upload(Bucket=NAME, Key="dumps/x/y/i-0aaaaaaaaaaaaaaaa/data-0002")
    check.unchecked.clear()  # the test's own calls above
    emptied = transport.delete_bucket(s3, NAME, max_calls=10, account=ACCOUNT)
    assert emptied.gone and emptied.objects == 1 and emptied.uploads == 1
    assert check.unchecked == [] and check.refused == []
    # The same name, owned by another account.
    s3.create_bucket(Bucket=NAME, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    s3.put_object(Bucket=NAME, Key="theirs", Body=b"x")
    check.owners = {NAME: "999999999999"}
    with pytest.raises(TransportError, match=f"{NAME} exists but is not this account's"):
        transport.ensure_bucket(s3, spec())
    with pytest.raises(TransportError, match="not this account's"):
        transport.find_buckets(s3, NAME, ACCOUNT)
    assert check.refused == ["HeadBucket", "HeadBucket"]
    check.owners = {}
    assert s3.list_objects_v2(Bucket=NAME)["KeyCount"] == 1  # untouched
    assert "Policy" not in str(s3.list_buckets())  # nothing configured on it


def test_the_status_store_names_its_owner_on_every_call(s3: Any) -> None:
    from cachewarm_controller.plan import TeardownState, WarmPlan
    from cachewarm_controller.store import S3Store

    s3.create_bucket(Bucket="status", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    check = OwnerCheck(ACCOUNT).install(s3)
    store = S3Store(s3, "status", owner=ACCOUNT)
    plan = WarmPlan(
        warm_id="warm-1", nonce="0" * 32, source_replica="a", started_ms=1, destination_endpoints=[], nodes=[]
    )
    store.save_plan("warms", plan)
    assert store.load_plan("warms", "warm-1") == plan
    assert store.claim("warms", "warm-1", {"execution_arn": ARN}) and store.read_claim("warms", "warm-1")
    assert store.record_transport("warms", ARN, NAME) == NAME
    assert store.record_transport("warms", ARN, "another") == NAME  # the first record stays
    assert store.transport_bucket("warms", ARN) == NAME
    store.save_teardown("warms", "warm-1", TeardownState())
    store.read_statuses("warms", "warm-1", {})
    store.forget_transport("warms", ARN)
    assert store.transport_bucket("warms", ARN) is None
    store.delete_warm("warms", "warm-1")
    assert check.unchecked == [] and check.refused == []
    # The status bucket's name taken by another account (the stack's deleted): nothing is written.
    check.owners = {"status": "999999999999"}
    with pytest.raises(ClientError, match="AccessDenied"):
        store.save_plan("warms", plan)
