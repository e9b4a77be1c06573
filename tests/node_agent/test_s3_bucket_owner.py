"""The agents name the bucket's owner on every S3 call (ExpectedBucketOwner; moto ignores it, so
tests/s3_owner.py answers as S3 does): the transport's upload and download and the status objects.
The owner is the account of the instance's own ARN (IMDS), never a command parameter: a command
that points an agent at a bucket of the same name in another account moves no byte there."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from cachewarm.contract.status import StatusLocation
from cachewarm.datapath.s3download import S3Downloader
from cachewarm.datapath.s3transport import S3Location, S3TransportError, delete_prefix
from cachewarm.datapath.s3upload import S3Uploader
from cachewarm.datapath.writer import DirWriter
from cachewarm.node_agent import identity
from cachewarm.node_agent.status import StatusPublisher
from cachewarm.testing.populating import records
from moto import mock_aws

from tests.s3_owner import OwnerCheck

ACCOUNT, OTHER = "123456789012", "999999999999"
BUCKET = f"cw-warm-1-{'a' * 16}"
NODE = "i-0123456789abcdef0"
SOURCE = f"arn:aws:ec2:us-east-1:{ACCOUNT}:instance/{NODE}"
POPULATOR = f"arn:aws:ec2:us-west-2:{ACCOUNT}:instance/i-0fedcba9876543210"
LOC = S3Location(BUCKET, f"dumps/{SOURCE}/{POPULATOR}")


@pytest.fixture
def s3() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def dump(tmp_path: Path) -> Path:
    w = DirWriter(tmp_path / "dump")
    for i in range(2):
        w.write(i, 0, records(50, prefix=b"f%d:" % i, size=200))
    w.done()
    return tmp_path / "dump"


def keys(s3: Any) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]


def test_the_upload_and_the_download_name_the_owner_on_every_call(s3: Any, tmp_path: Path) -> None:
    check = OwnerCheck(ACCOUNT).install(s3)
    up = S3Uploader(s3, dump(tmp_path), LOC, NODE, owner=ACCOUNT)
    up.step()
    up.finish()
    again = S3Uploader(s3, tmp_path / "dump", LOC, NODE, owner=ACCOUNT).finish()  # a resumed run
    assert again.skipped == 2 and again.done_already
    staging = tmp_path / "staging"
    down = S3Downloader(s3, LOC, NODE, staging, tmp_path / "state.json", owner=ACCOUNT)
    assert down.run().files == 2
    assert sorted(p.name for p in staging.iterdir()) == sorted(
        p.name for p in (tmp_path / "dump").iterdir() if p.is_file()
    )
    assert delete_prefix(s3, LOC, owner=ACCOUNT) == 3
    assert check.unchecked == [] and check.refused == []


def test_a_bucket_of_that_name_in_another_account_gets_no_byte(s3: Any, tmp_path: Path) -> None:
    check = OwnerCheck(ACCOUNT, {BUCKET: OTHER}).install(s3)
    with pytest.raises(ClientError, match="AccessDenied"):
        S3Uploader(s3, dump(tmp_path), LOC, NODE, owner=ACCOUNT).finish()
    down = S3Downloader(s3, LOC, NODE, tmp_path / "staging", tmp_path / "state.json", owner=ACCOUNT)
    with pytest.raises(ClientError, match="AccessDenied"):
        down.run()
    assert check.refused and check.unchecked == []
    check.owners = {}
    assert keys(s3) == [] and s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []
    assert not any((tmp_path / "staging").iterdir())


def test_a_done_of_another_writer_is_refused_not_overwritten(s3: Any, tmp_path: Path) -> None:
    """Unchanged by the owner check: DONE stays If-None-Match."""
    OwnerCheck(ACCOUNT).install(s3)
    s3.put_object(
        Bucket=BUCKET, Key=f"{LOC.prefix}/{NODE}/DONE", Body=b"someone else's", ExpectedBucketOwner=ACCOUNT
    )
    with pytest.raises(S3TransportError, match="published by another writer"):
        S3Uploader(s3, dump(tmp_path), LOC, NODE, owner=ACCOUNT).finish()


def test_status_objects_name_the_writers_own_account(s3: Any) -> None:
    check = OwnerCheck(ACCOUNT).install(s3)
    where = StatusLocation(BUCKET, "warms", "warm-1", "dump", NODE, SOURCE)
    pub = StatusPublisher(s3, where, interval_s=3600)
    pub.publish()
    assert check.unchecked == [] and check.refused == []
    check.owners = {BUCKET: OTHER}
    with pytest.raises(Exception, match="AccessDenied"):
        StatusPublisher(s3, where, interval_s=3600)


def test_the_owner_is_this_instances_account(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(identity.ARN_ENV, POPULATOR)
    assert identity.this_account() == ACCOUNT
