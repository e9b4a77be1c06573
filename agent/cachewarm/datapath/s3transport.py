"""S3 as the transport between a dump and a populator in another region: the local slice. What both
sides share is here (the object layout, the part sizes, the client, the errors, deleting a prefix);
the upload is `s3upload.py`'s (on the source node), the download `s3download.py`'s (on a populator),
and the one-machine warm through S3 `s3warm.py`'s.

Key layout: `<prefix>/<node>/<data file name>` and `<prefix>/<node>/DONE` — one prefix per source node,
so that hundreds of nodes never share one (S3 scales request rates per prefix; docs/transport-s3.md).
A data object's metadata carries its xxh3 (XXH3_META), which its name carries too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

MIB = 1024 * 1024


# S3's smallest part but the last; a part is all the uploader or downloader holds of a file.
MIN_PART_SIZE = 5 * MIB


DEFAULT_PART_SIZE = 8 * MIB


MAX_PART_SIZE = 64 * MIB


# The object metadata that names a data object's xxh3 (a resumed upload compares it).
XXH3_META = "cachewarm-xxh3"


class S3TransportError(RuntimeError):
    """The transport failed; the message names the object and the problem."""


class DamagedObject(S3TransportError):
    """An object's fetched bytes do not match the xxh3 its name carries: bad data, never sent."""


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # no leading or trailing "/"; may be empty

    @classmethod
    def parse(cls, url: str) -> S3Location:
        """`s3://BUCKET[/PREFIX]`; anything else is a ValueError naming the problem."""
        if not url.startswith("s3://"):
            raise ValueError(f"{url!r} is not an s3://BUCKET/PREFIX URL")
        bucket, _, prefix = url[len("s3://") :].partition("/")
        if not bucket:
            raise ValueError(f"{url!r} names no bucket")
        return cls(bucket, prefix.strip("/"))

    def node_prefix(self, node: str) -> str:
        """Where one source node's objects go (ends with "/")."""
        return f"{self.prefix}/{node}/" if self.prefix else f"{node}/"

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def make_client(endpoint_url: str | None = None, max_attempts: int = 10, region: str | None = None) -> Any:
    """An S3 client with botocore's standard retry mode: 503 SlowDown, 500s and connection errors are
    retried with exponential back-off and jitter, up to `max_attempts` tries per request (or
    AWS_MAX_ATTEMPTS). With no
    `endpoint_url`, boto3 honours AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL (a local S3)."""
    import boto3
    from botocore.config import Config

    # AWS_MAX_ATTEMPTS, botocore's own setting, still wins (an explicit Config would hide it).
    attempts = int(os.environ.get("AWS_MAX_ATTEMPTS", max_attempts))
    cfg = Config(retries={"mode": "standard", "max_attempts": attempts})
    return boto3.client("s3", endpoint_url=endpoint_url, config=cfg, region_name=region)


def error_code(e: Exception) -> str:
    return str(getattr(e, "response", {}).get("Error", {}).get("Code", ""))


def owner_args(owner: str | None) -> dict[str, str]:
    """ExpectedBucketOwner on every call when the owner is known (the node agents: their own account):
    a bucket of that name in another account answers 403 and never gets or gives a byte."""
    return {"ExpectedBucketOwner": owner} if owner else {}


def delete_prefix(client: Any, loc: S3Location, owner: str | None = None) -> int:
    """Delete every object and abort every multipart upload under `loc`'s prefix; returns objects deleted."""
    prefix = f"{loc.prefix}/" if loc.prefix else ""
    owned = owner_args(owner)
    deleted = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=loc.bucket, Prefix=prefix, **owned):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            r = client.delete_objects(Bucket=loc.bucket, Delete={"Objects": keys, "Quiet": True}, **owned)
            if errors := r.get("Errors"):
                raise S3TransportError(f"deleting under {loc}: {errors[0]}")
            deleted += len(keys)
    for page in client.get_paginator("list_multipart_uploads").paginate(
        Bucket=loc.bucket, Prefix=prefix, **owned
    ):
        for u in page.get("Uploads", []):
            client.abort_multipart_upload(Bucket=loc.bucket, Key=u["Key"], UploadId=u["UploadId"], **owned)
    return deleted
