"""transport.py against moto's S3: the bucket is made once and adopted after, and emptying a big
bucket takes several bounded passes — unfinished uploads, every object, then the bucket."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from cachewarm_controller import transport
from moto import mock_aws

ARN = "arn:aws:states:eu-west-1:123456789012:execution:cachewarm:run-1"


@pytest.fixture
def s3() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("s3", region_name="eu-west-1")


def spec() -> transport.BucketSpec:
    return transport.BucketSpec(
        name=transport.bucket_name("warm-1", ARN),
        region="eu-west-1",
        warm_id="warm-1",
        execution_arn=ARN,
        stack_tag="stack",
        expire_days=3,
        kms_key_id="arn:aws:kms:eu-west-1:123456789012:key/abc",
    )


def test_made_once_then_adopted_outside_us_east_1(s3: Any) -> None:
    assert transport.ensure_bucket(s3, spec()) is True
    assert transport.ensure_bucket(s3, spec()) is False
    loc = s3.get_bucket_location(Bucket=spec().name)["LocationConstraint"]
    assert loc == "eu-west-1"
    rule = s3.get_bucket_encryption(Bucket=spec().name)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert rule["ApplyServerSideEncryptionByDefault"]["KMSMasterKeyID"].endswith("key/abc")
    assert transport.find_buckets(s3, ARN, "warm-1") == [spec().name]
    assert transport.find_buckets(s3, ARN, None) == [spec().name]  # by the execution's hash
    assert transport.find_buckets(s3, ARN + "x", None) == []


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
        one = transport.delete_bucket(s3, name, max_calls=2)
        assert one.calls <= 2
        passes.append(one)
        if one.gone:
            break
        assert one.left == [f"s3://{name}"] and len(passes) < 10
    assert sum(p.uploads for p in passes) == 3
    assert sum(p.objects for p in passes) == 2500
    assert transport.find_buckets(s3, ARN, "warm-1") == []
    # Again: nothing there, nothing to do, gone.
    assert transport.delete_bucket(s3, name, max_calls=5).gone
