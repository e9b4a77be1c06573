"""Storage: the KMS key, the status bucket the agents write heartbeats to, its access-log bucket."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Annotations, Aws, Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct


@dataclass(frozen=True)
class Storage:
    key: kms.IKey
    access_logs: s3.Bucket
    status_bucket: s3.Bucket


def build_storage(scope: Construct, kms_key: kms.IKey | None) -> Storage:
    """The given key (or a new rotating one) and the two buckets, created in `scope`."""
    key = kms_key or kms.Key(
        scope,
        "Key",
        description="cachewarm: EBS volumes, populator root disks, status bucket",
        enable_key_rotation=True,
        removal_policy=RemovalPolicy.RETAIN,
    )
    # S3 server access logs can only be delivered to an SSE-S3 bucket.
    access_logs = s3.Bucket(
        scope,
        "AccessLogs",
        encryption=s3.BucketEncryption.S3_MANAGED,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        # No ACLs: S3 delivers the logs under a bucket-policy grant (construct.py sets the flag).
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(90))],
        removal_policy=RemovalPolicy.RETAIN,
    )
    status = s3.Bucket(
        scope,
        "StatusBucket",
        encryption=s3.BucketEncryption.KMS,
        encryption_key=key,
        bucket_key_enabled=True,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        server_access_logs_bucket=access_logs,
        server_access_logs_prefix="status-bucket/",
        # Versioned: an overwritten plan or status object can be recovered for a post-mortem.
        versioned=True,
        # Status objects matter during a warm and for a post-mortem, not forever.
        lifecycle_rules=[
            s3.LifecycleRule(expiration=Duration.days(30), noncurrent_version_expiration=Duration.days(30))
        ],
        removal_policy=RemovalPolicy.RETAIN,
    )
    return Storage(key=key, access_logs=access_logs, status_bucket=status)


# The services that encrypt with the key on the stack's behalf: EventBridge writes undeliverable
# events to the (encrypted) trigger DLQ, CloudWatch publishes alarms to the (encrypted) alarm topic.
# Each may use it only for a resource of this account and region (its rules, its alarms): the
# confused-deputy conditions AWS documents for these grants (aws:SourceAccount, aws:SourceArn).
KEY_SERVICES = {
    "events.amazonaws.com": "events:{region}:{account}:rule/*",
    "cloudwatch.amazonaws.com": "cloudwatch:{region}:{account}:alarm:*",
}


def admit_services_to_key(key: kms.IKey) -> None:
    """Key policy: let EventBridge and CloudWatch use the key for the DLQ and the alarm topic —
    without it EventBridge cannot dead-letter an event and an alarm cannot notify — on behalf of this
    account's rules and alarms only; and CloudWatch Logs for this account's log groups. An imported
    key's policy is not ours to change: a warning says what to add."""
    added = [
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid=f"Admit{service.split('.')[0].capitalize()}",
                principals=[iam.ServicePrincipal(service)],
                actions=["kms:Decrypt", "kms:GenerateDataKey"],
                resources=["*"],
                conditions={
                    "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                    "ArnLike": {
                        "aws:SourceArn": f"arn:{Aws.PARTITION}:"
                        + source.format(region=Aws.REGION, account=Aws.ACCOUNT_ID)
                    },
                },
            )
        ).statement_added
        for service, source in KEY_SERVICES.items()
    ]
    if not (all(added) and admit_logs_to_key(key)):
        Annotations.of(key).add_warning(
            "cachewarm: the imported KMS key's policy must allow kms:Decrypt and kms:GenerateDataKey to "
            f"{' and '.join(KEY_SERVICES)} (trigger DLQ, alarm topic) for this account's rules and "
            "alarms, and CloudWatch Logs to use it for this account's log groups, else dead letters, "
            "alarm notifications and logs are lost"
        )


def admit_logs_to_key(key: kms.IKey) -> bool:
    """Key policy: CloudWatch Logs encrypts the stack's log groups (execution data, agent output) with
    the key, only for log groups of this account and region. False: the key's policy is not ours."""
    log_groups = f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:*"
    return key.add_to_resource_policy(
        iam.PolicyStatement(
            sid="AdmitCloudWatchLogs",
            principals=[iam.ServicePrincipal(f"logs.{Aws.REGION}.amazonaws.com")],
            actions=[
                "kms:Encrypt*",
                "kms:Decrypt*",
                "kms:ReEncrypt*",
                "kms:GenerateDataKey*",
                "kms:Describe*",
            ],
            resources=["*"],
            conditions={"ArnLike": {"kms:EncryptionContext:aws:logs:arn": log_groups}},
        )
    ).statement_added
