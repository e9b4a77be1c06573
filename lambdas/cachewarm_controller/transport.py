"""The S3 transport's bucket: one per warm execution, in the controller's (the source's) region.

Plain functions over a boto3 S3 client (the CreateTransport and Teardown steps call them; tests pass
moto's client). The bucket's name is derived from the warm id and the execution's ARN, so a retried
or repeated pass finds the bucket an earlier one created, and teardown finds it from the ARN alone
(an EventBridge event names no bucket).

What the bucket carries, put again on every pass (each call is idempotent):
- SSE-KMS by default encryption (the stack's key, the input's, or S3's aws/s3 key), bucket keys on;
- all public access blocked, objects owned by the bucket owner;
- a lifecycle rule: whatever a teardown could not delete expires after `expire_days`, unfinished
  multipart uploads are aborted after a day (S3 bills their parts until then);
- a policy: TLS only, no principal of another account, and the populators' roles read only;
- the cachewarm tags (warm id, execution, stack), as on every EC2 resource of the warm.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError
from cachewarm.contract import tags

from cachewarm_controller.awsutil import error_code
from cachewarm_controller.errors import TransportError

# Every transport bucket's name starts with the stack's prefix (TRANSPORT_BUCKET_PREFIX, this default
# outside a stack); the stack's IAM scopes the controller's and the agents' S3 rights to
# `arn:aws:s3:::<prefix>*`.
BUCKET_PREFIX = "cw-"
# At most 8 characters, so that prefix + a 48-character warm id + "-" + the hash fit S3's 63.
PREFIX_PATTERN = r"^[a-z0-9][a-z0-9-]{0,6}-$"
# The execution's part of the name: hex of the ARN's sha256. Two executions of one warm id never
# run at once (the claim), so 24 bits only have to tell a leftover from the current one.
_HASH_CHARS = 6
# Objects deleted per DeleteObjects call (S3's maximum).
DELETE_BATCH = 1000
NO_BUCKET = frozenset({"NoSuchBucket", "404", "NotFound"})


def execution_hash(execution_arn: str) -> str:
    return hashlib.sha256(execution_arn.encode()).hexdigest()[:_HASH_CHARS]


def bucket_name(warm_id: str, execution_arn: str, prefix: str = BUCKET_PREFIX) -> str:
    """`<prefix><warm id>-<6 hex of the execution ARN>`: at most 8 + 48 + 1 + 6 = 63 characters,
    lower case, as S3 requires; two executions of one warm id get two buckets."""
    return f"{prefix}{warm_id}-{execution_hash(execution_arn)}"


def node_url(bucket: str) -> str:
    """What the dump agent's `--to-s3` gets: it adds its own node id below."""
    return f"s3://{bucket}/dumps"


def node_source_url(bucket: str, node_id: str) -> str:
    """What a populator's `--from-s3` gets: its source node's prefix."""
    return f"{node_url(bucket)}/{node_id}"


@dataclass(frozen=True)
class BucketSpec:
    name: str
    region: str
    warm_id: str
    execution_arn: str
    stack_tag: str | None
    expire_days: int
    kms_key_id: str | None = None
    # Roles that only read (the populators' instance roles, both regions).
    reader_role_arns: Sequence[str] = ()
    account: str | None = None


def _tags(spec: BucketSpec) -> list[dict[str, str]]:
    out = [
        {"Key": tags.WARM_ID, "Value": spec.warm_id},
        {"Key": tags.EXECUTION, "Value": spec.execution_arn},
        {"Key": tags.MANAGED, "Value": "true"},
    ]
    if spec.stack_tag:
        out.append({"Key": tags.STACK, "Value": spec.stack_tag})
    return out


def bucket_policy(spec: BucketSpec) -> dict[str, Any]:
    bucket = f"arn:aws:s3:::{spec.name}"
    everything = [bucket, f"{bucket}/*"]
    statements: list[dict[str, Any]] = [
        {
            "Sid": "TlsOnly",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": everything,
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        }
    ]
    if spec.account:
        statements.append(
            {
                "Sid": "ThisAccountOnly",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": everything,
                "Condition": {"StringNotEquals": {"aws:PrincipalAccount": spec.account}},
            }
        )
    if spec.reader_role_arns:
        statements.append(
            {
                "Sid": "PopulatorsReadOnly",
                "Effect": "Deny",
                "Principal": "*",
                "Action": ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
                "Resource": [f"{bucket}/*"],
                "Condition": {"ArnEquals": {"aws:PrincipalArn": list(spec.reader_role_arns)}},
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}


def ensure_bucket(s3: Any, spec: BucketSpec) -> bool:
    """Create the warm's bucket (or adopt it: an earlier pass of this execution made it) and put its
    encryption, public access block, lifecycle rule, policy and tags. True if it was created now."""
    # Asked first: us-east-1 answers a second CreateBucket of one's own bucket with 200, not
    # BucketAlreadyOwnedByYou. The name holds this execution's hash: a bucket of that name this
    # account can see is this execution's own, made by an earlier pass.
    created = not _exists(s3, spec.name)
    if created:
        kwargs: dict[str, Any] = {"Bucket": spec.name, "ObjectOwnership": "BucketOwnerEnforced"}
        if spec.region != "us-east-1":  # S3's one region that refuses a LocationConstraint
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": spec.region}
        try:
            s3.create_bucket(**kwargs)
        except ClientError as exc:
            if error_code(exc) == "BucketAlreadyExists":
                raise TransportError(
                    f"S3 bucket name {spec.name} is taken by another account (names are global); "
                    "start the warm again (a new execution, a new name)"
                ) from exc
            if error_code(exc) != "BucketAlreadyOwnedByYou":
                raise
            created = False
    rule: dict[str, Any] = {"SSEAlgorithm": "aws:kms"}
    if spec.kms_key_id:
        rule["KMSMasterKeyID"] = spec.kms_key_id
    s3.put_bucket_encryption(
        Bucket=spec.name,
        ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": rule, "BucketKeyEnabled": True}]
        },
    )
    s3.put_public_access_block(
        Bucket=spec.name,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": True,
            "RestrictPublicBuckets": True,
        },
    )
    s3.put_bucket_lifecycle_configuration(
        Bucket=spec.name,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": "cachewarm-leftovers",
                    "Status": "Enabled",
                    "Filter": {"Prefix": ""},
                    "Expiration": {"Days": spec.expire_days},
                    "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
                }
            ]
        },
    )
    s3.put_bucket_policy(Bucket=spec.name, Policy=json.dumps(bucket_policy(spec)))
    s3.put_bucket_tagging(Bucket=spec.name, Tagging={"TagSet": _tags(spec)})
    return created


def _exists(s3: Any, name: str) -> bool:
    """True if this account has the bucket; 403 (another account's) raises, naming it."""
    try:
        s3.head_bucket(Bucket=name)
    except ClientError as exc:
        if error_code(exc) in NO_BUCKET:
            return False
        if error_code(exc) in ("403", "AccessDenied", "Forbidden"):
            raise TransportError(
                f"S3 bucket {name} exists but is not this account's (or not readable)"
            ) from exc
        raise
    return True


def find_buckets(s3: Any, execution_arn: str, warm_id: str | None, prefix: str = BUCKET_PREFIX) -> list[str]:
    """The transport buckets of this execution: by name when the warm id is known, else every
    `<prefix>*-<hash>` bucket of the account (an execution whose input never named a valid warm id)."""
    if warm_id is not None:
        name = bucket_name(warm_id, execution_arn, prefix)
        return [name] if _exists(s3, name) else []
    suffix = "-" + execution_hash(execution_arn)
    return [
        b["Name"]
        for b in s3.list_buckets().get("Buckets", [])
        if b["Name"].startswith(prefix) and b["Name"].endswith(suffix)
    ]


@dataclass
class Emptied:
    """One pass of deleting a bucket: what it deleted and whether the bucket is gone."""

    gone: bool = False
    objects: int = 0
    uploads: int = 0
    calls: int = 0
    left: list[str] = field(default_factory=list)


def delete_bucket(s3: Any, name: str, max_calls: int) -> Emptied:
    """Abort every unfinished multipart upload, delete every object (every version, should
    versioning ever be on), then the bucket; at most `max_calls` mutating calls, so a big bucket
    takes several teardown passes. `gone` once the bucket no longer exists."""
    out = Emptied()
    try:
        while out.calls < max_calls:
            uploads = s3.list_multipart_uploads(Bucket=name).get("Uploads", [])
            for u in uploads:
                if out.calls >= max_calls:
                    break
                s3.abort_multipart_upload(Bucket=name, Key=u["Key"], UploadId=u["UploadId"])
                out.calls += 1
                out.uploads += 1
            if not uploads:
                break
        while out.calls < max_calls:
            page = s3.list_object_versions(Bucket=name, MaxKeys=DELETE_BATCH)
            keys = [
                {"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
            ]
            if not keys:
                break
            resp = s3.delete_objects(Bucket=name, Delete={"Objects": keys, "Quiet": True})
            out.calls += 1
            errors = resp.get("Errors", [])
            if errors:
                e = errors[0]
                raise RuntimeError(
                    f"deleting {len(errors)} objects of s3://{name} failed, e.g. {e.get('Key')}: "
                    f"{e.get('Code')} {e.get('Message')}"
                )
            out.objects += len(keys)
        if out.calls < max_calls:
            out.calls += 1
            s3.delete_bucket(Bucket=name)
            out.gone = True
    except ClientError as exc:
        code = error_code(exc)
        if code in NO_BUCKET:
            out.gone = True
        elif code != "BucketNotEmpty":  # a cancelled agent's last part landed: the next pass again
            raise
    if not out.gone:
        out.left.append(f"s3://{name}")
    return out
