"""The S3 transport's bucket: one per warm execution, in the controller's (the source's) region.

Plain functions over a boto3 S3 client (the CreateTransport and Teardown steps call them; tests pass
moto's client). The bucket's name holds a random token the controller draws and records (in the
status bucket's `_controller/`, keyed by the execution: `steps/resources.py`) before it creates the
bucket: nobody can guess it, and teardown finds it from the execution's ARN alone (an EventBridge
event names no bucket) by reading what the controller recorded — never by listing or by tags.

Who reads what (docs/transport-s3.md): a source node writes only under `dumps/<its instance ARN>/`,
and the controller gives it `dumps/<its ARN>/<its populator's ARN>` as its prefix; a populator reads
only keys that name its own ARN below `dumps/<...>/`. The agents' managed policy grants exactly that
with the `${ec2:SourceInstanceARN}` policy variable, and the bucket's own policy denies the same to
every other principal, whatever its role allows: the size of neither grows with the warm.

What the bucket carries, put again on every pass (each call is idempotent):
- SSE-KMS with the stack's key by default encryption (bucket keys on); an upload that names any
  encryption of its own is refused by the policy, so every object is under the stack's key;
- all public access blocked, objects owned by the bucket owner;
- a lifecycle rule: whatever a teardown could not delete expires after `expire_days`, unfinished
  multipart uploads are aborted after a day (S3 bills their parts until then);
- the policy (`bucket_policy`);
- the cachewarm tags (warm id, execution, stack), as on every EC2 resource of the warm.
Every call names the account that must own the bucket (ExpectedBucketOwner): a bucket of that name
in another account answers 403 and is never written to or emptied.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError
from cachewarm.contract import inputs, tags
from cachewarm.contract.status import instance_arn, partition_of

from cachewarm_controller.awsutil import error_code
from cachewarm_controller.errors import TransportError

# Every transport bucket's name starts with the stack's prefix (TRANSPORT_BUCKET_PREFIX, this default
# outside a stack); the stack's IAM scopes the controller's and the agents' S3 rights to
# `arn:aws:s3:::<prefix>*`, and the dump document admits only such a bucket.
BUCKET_PREFIX = "cw-"
# At most 8 characters (S3's 63 = prefix + warm id, cut to fit + "-" + the token).
PREFIX_PATTERN = rf"^{inputs.TRANSPORT_PREFIX_SHAPE}$"
TOKEN_CHARS = inputs.TRANSPORT_TOKEN_CHARS
_TOKEN_ALPHABET = string.ascii_lowercase + string.digits  # 16 characters: ~82 bits
# What the controller's transport records and the documents accept (the stack's prefix aside).
NAME_PATTERN = re.compile(rf"^{inputs.transport_bucket_head()}-[a-z0-9]{{{TOKEN_CHARS}}}$")
# Every object of the transport lives below this.
DUMPS = "dumps"
# Objects deleted per DeleteObjects call (S3's maximum).
DELETE_BATCH = 1000
NO_BUCKET = frozenset({"NoSuchBucket", "404", "NotFound"})
# IAM's policy variable for the instance a request was signed from (instance-profile credentials).
SOURCE_INSTANCE = "${ec2:SourceInstanceARN}"


def new_token() -> str:
    return "".join(secrets.choice(_TOKEN_ALPHABET) for _ in range(TOKEN_CHARS))


def bucket_name(warm_id: str, token: str, prefix: str = BUCKET_PREFIX) -> str:
    """`<prefix><warm id, cut to fit>-<token>`: at most 63 characters, lower case, as S3 requires.
    The token (`new_token`) is what makes it unguessable; the warm id is there for people."""
    room = 63 - len(prefix) - 1 - len(token)
    return f"{prefix}{warm_id[:room].rstrip('-')}-{token}"


def pair_prefix(source_arn: str, populator_arn: str) -> str:
    """The keys of one source node's dump, read by one populator: the source's IAM reaches
    `dumps/<source ARN>/*`, the populator's `dumps/*/<populator ARN>/*`."""
    return f"{DUMPS}/{source_arn}/{populator_arn}"


def node_url(bucket: str, source_arn: str, populator_arn: str) -> str:
    """What the dump agent's `--to-s3` gets: it adds its own node id below."""
    return f"s3://{bucket}/{pair_prefix(source_arn, populator_arn)}"


def node_source_url(bucket: str, source_arn: str, populator_arn: str, node_id: str) -> str:
    """What a populator's `--from-s3` gets: its source node's objects."""
    return f"{node_url(bucket, source_arn, populator_arn)}/{node_id}"


def pair_urls(
    bucket: str, region: str, account: str, node_id: str, populator_id: str, populator_region: str | None
) -> tuple[str, str]:
    """(`toS3`, `fromS3`) of one node: the source in the controller's region, its populator in
    `populator_region` (another region's, cross-region) or the same."""
    source = instance_arn(region, account, node_id)
    populator = instance_arn(populator_region or region, account, populator_id)
    return node_url(bucket, source, populator), node_source_url(bucket, source, populator, node_id)


@dataclass(frozen=True)
class BucketSpec:
    name: str
    region: str
    warm_id: str
    execution_arn: str
    stack_tag: str | None
    expire_days: int
    # The stack's key: the bucket's default encryption, and the only one its policy admits.
    kms_key_id: str
    # The controller's role: the only principal besides the warm's instances that reaches objects.
    controller_role_arn: str
    # The account that owns the bucket (ExpectedBucketOwner on every call) and its principals.
    account: str
    # Roles that only read (the populators' instance roles, both regions).
    reader_role_arns: Sequence[str] = ()


def _tags(spec: BucketSpec) -> list[dict[str, str]]:
    out = [
        {"Key": tags.WARM_ID, "Value": spec.warm_id},
        {"Key": tags.EXECUTION, "Value": spec.execution_arn},
        {"Key": tags.MANAGED, "Value": "true"},
    ]
    if spec.stack_tag:
        out.append({"Key": tags.STACK, "Value": spec.stack_tag})
    return out


def _deny(sid: str, conditions: dict[str, Any] | None = None, **elements: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"Sid": sid, "Effect": "Deny", "Principal": "*", **elements}
    if conditions:
        out["Condition"] = conditions
    return out


def bucket_policy(spec: BucketSpec) -> dict[str, Any]:
    """Denies only (the roles' own policies allow): whatever another policy grants a principal of
    this account, only the controller and the instances' own keys are reachable.

    - TLS only; no principal of another account;
    - objects and listings: the controller's role, or a request signed with EC2 instance-profile
      credentials (`ec2:SourceInstanceARN` present), nobody else;
    - an instance writes only below `dumps/<its ARN>/`, reads only there and below
      `dumps/*/<its ARN>/`, lists only those prefixes; versions and unfinished uploads are listed
      by the controller alone;
    - the populators' role never writes;
    - an upload names no encryption of its own (the default, the stack's key, applies), no SSE-C."""
    if not spec.controller_role_arn:
        raise TransportError("the controller's role ARN is unknown (CONTROLLER_ROLE_ARN): no bucket policy")
    bucket = f"arn:{partition_of(spec.region)}:s3:::{spec.name}"
    objects = f"{bucket}/*"
    own = f"{bucket}/{DUMPS}/{SOURCE_INSTANCE}/*"
    paired = f"{bucket}/{DUMPS}/*/{SOURCE_INSTANCE}/*"
    not_controller = {"ArnNotEquals": {"aws:PrincipalArn": spec.controller_role_arn}}
    no_instance = {**not_controller, "Null": {"ec2:SourceInstanceARN": "true"}}
    statements: list[dict[str, Any]] = [
        _deny(
            "TlsOnly", {"Bool": {"aws:SecureTransport": "false"}}, Action="s3:*", Resource=[bucket, objects]
        ),
        _deny(
            "ThisAccountOnly",
            {"StringNotEquals": {"aws:PrincipalAccount": spec.account}},
            Action="s3:*",
            Resource=[bucket, objects],
        ),
        _deny("ObjectsOnlyForTheControllerAndInstances", no_instance, Action="s3:*", Resource=objects),
        _deny(
            "ListingOnlyForTheControllerAndInstances", no_instance, Action="s3:ListBucket", Resource=bucket
        ),
        _deny(
            "InstancesWriteOnlyTheirOwnPrefix",
            not_controller,
            NotAction=["s3:GetObject", "s3:GetObjectVersion", "s3:GetObjectAttributes"],
            NotResource=[bucket, own],
        ),
        _deny(
            "InstancesReadOnlyTheirDumps",
            not_controller,
            Action=["s3:GetObject*"],
            NotResource=[own, paired],
        ),
        _deny(
            "InstancesListOnlyTheirDumps",
            {
                **not_controller,
                "Null": {"ec2:SourceInstanceARN": "false"},
                "StringNotLike": {
                    "s3:prefix": [f"{DUMPS}/{SOURCE_INSTANCE}/*", f"{DUMPS}/*/{SOURCE_INSTANCE}/*"]
                },
            },
            Action="s3:ListBucket",
            Resource=bucket,
        ),
        # Whatever a node's own role allows (source nodes' roles are the platform's): no instance
        # changes the bucket's policy, encryption, lifecycle or anything else of it.
        _deny(
            "InstancesNeverConfigureTheBucket",
            {**not_controller, "Null": {"ec2:SourceInstanceARN": "false"}},
            NotAction="s3:ListBucket",
            Resource=bucket,
        ),
        _deny(
            "OnlyTheControllerListsVersionsAndUploads",
            not_controller,
            Action=["s3:ListBucketVersions", "s3:ListBucketMultipartUploads"],
            Resource=bucket,
        ),
        _deny(
            "UploadsTakeTheStackKey",
            {"Null": {"s3:x-amz-server-side-encryption": "false"}},
            Action="s3:PutObject",
            Resource=objects,
        ),
        _deny(
            "NoCustomerKeys",
            {"Null": {"s3:x-amz-server-side-encryption-customer-algorithm": "false"}},
            Action="s3:PutObject",
            Resource=objects,
        ),
    ]
    if spec.reader_role_arns:
        statements.append(
            _deny(
                "PopulatorsReadOnly",
                {"ArnEquals": {"aws:PrincipalArn": list(spec.reader_role_arns)}},
                NotAction=["s3:GetObject", "s3:GetObjectVersion", "s3:GetObjectAttributes"],
                Resource=objects,
            )
        )
    return {"Version": "2012-10-17", "Statement": statements}


def ensure_bucket(s3: Any, spec: BucketSpec) -> bool:
    """Create the warm's bucket (or adopt it: an earlier pass of this execution made it) and put its
    encryption, public access block, lifecycle rule, policy and tags. True if it was created now."""
    # Asked first: us-east-1 answers a second CreateBucket of one's own bucket with 200, not
    # BucketAlreadyOwnedByYou. The name holds the token this execution recorded before creating
    # it: a bucket of that name this account owns is this execution's own, made by an earlier pass.
    owner = {"ExpectedBucketOwner": spec.account}
    created = not _exists(s3, spec.name, spec.account)
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
    rule: dict[str, Any] = {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": spec.kms_key_id}
    s3.put_bucket_encryption(
        Bucket=spec.name,
        ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": rule, "BucketKeyEnabled": True}]
        },
        **owner,
    )
    s3.put_public_access_block(
        Bucket=spec.name,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": True,
            "RestrictPublicBuckets": True,
        },
        **owner,
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
        **owner,
    )
    s3.put_bucket_policy(Bucket=spec.name, Policy=json.dumps(bucket_policy(spec)), **owner)
    s3.put_bucket_tagging(Bucket=spec.name, Tagging={"TagSet": _tags(spec)}, **owner)
    return created


def _exists(s3: Any, name: str, account: str) -> bool:
    """True if `account` has the bucket; 403 (another account's, or not readable) raises, naming it."""
    try:
        s3.head_bucket(Bucket=name, ExpectedBucketOwner=account)
    except ClientError as exc:
        if error_code(exc) in NO_BUCKET:
            return False
        if error_code(exc) in ("403", "AccessDenied", "Forbidden"):
            raise TransportError(
                f"S3 bucket {name} exists but is not this account's ({account}) or not readable"
            ) from exc
        raise
    return True


def recorded_bucket(name: object, prefix: str) -> str | None:
    """The bucket name a transport record holds, if it is one this stack's controller makes (the
    record is the controller's own; the check keeps a damaged one from naming any other bucket)."""
    if isinstance(name, str) and name.startswith(prefix) and NAME_PATTERN.fullmatch(name):
        return name
    return None


def find_buckets(s3: Any, name: str | None, account: str) -> list[str]:
    """The execution's transport bucket (the name its record holds) if it still exists."""
    return [name] if name is not None and _exists(s3, name, account) else []


@dataclass
class Emptied:
    """One pass of deleting a bucket: what it deleted and whether the bucket is gone."""

    gone: bool = False
    objects: int = 0
    uploads: int = 0
    calls: int = 0
    left: list[str] = field(default_factory=list)


def delete_bucket(s3: Any, name: str, max_calls: int, account: str) -> Emptied:
    """Abort every unfinished multipart upload, delete every object (every version, should
    versioning ever be on), then the bucket; at most `max_calls` mutating calls, so a big bucket
    takes several teardown passes. `gone` once the bucket no longer exists. Only `account`'s."""
    owner = {"ExpectedBucketOwner": account}
    out = Emptied()
    try:
        while out.calls < max_calls:
            uploads = s3.list_multipart_uploads(Bucket=name, **owner).get("Uploads", [])
            for u in uploads:
                if out.calls >= max_calls:
                    break
                s3.abort_multipart_upload(Bucket=name, Key=u["Key"], UploadId=u["UploadId"], **owner)
                out.calls += 1
                out.uploads += 1
            if not uploads:
                break
        while out.calls < max_calls:
            page = s3.list_object_versions(Bucket=name, MaxKeys=DELETE_BATCH, **owner)
            keys = [
                {"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
            ]
            if not keys:
                break
            resp = s3.delete_objects(Bucket=name, Delete={"Objects": keys, "Quiet": True}, **owner)
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
            s3.delete_bucket(Bucket=name, **owner)
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
