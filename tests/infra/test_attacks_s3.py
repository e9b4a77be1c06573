"""One warm, one dump (issue 33): the attack table of the S3 transport and the controller's state,
evaluated against the synthesized policies — the agents' managed policy and the status bucket's
policy from the template, each warm's bucket policy from `transport.bucket_policy` with the
template's own prefix and role ARNs — by tests/infra/policy_eval.py (moto knows neither the policy
variables nor these conditions). Every row is one principal trying one thing; a row passes only if
AWS's rules, as the evaluator models them, refuse it (an unresolved variable never adds a denial).

Principals: a source node (the platform's role, with the managed policy attached — and, in the
"broad" rows, with `s3:*` on `*` besides, as a platform role may have) and a populator (the stack's
role), each of warm A or warm B, each signing with its own instance-profile credentials."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from cachewarm.contract.status import instance_arn
from cachewarm_controller import transport

from tests.infra.policy_eval import ACCOUNT, Request, decide, decide_s3, resolve
from tests.infra.support import Synth, _controller_statements

OTHER_ACCOUNT = "999999999999"
PLATFORM_ROLE = f"arn:aws:iam::{ACCOUNT}:role/platform-cache-node"
DEVELOPER = f"arn:aws:iam::{ACCOUNT}:role/developer"
BROAD = [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]
KEY = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"


@dataclass(frozen=True)
class Instance:
    instance_id: str
    region: str = "us-east-1"

    @property
    def arn(self) -> str:
        return instance_arn(self.region, ACCOUNT, self.instance_id)


@dataclass(frozen=True)
class Warm:
    """One warm's bucket and its two (source, populator) pairs."""

    bucket: str
    sources: tuple[Instance, Instance]
    populators: tuple[Instance, Instance]

    def prefix(self, n: int) -> str:
        """Pair n's prefix, as the controller sends it (`toS3`)."""
        return transport.pair_prefix(self.sources[n].arn, self.populators[n].arn)

    def data(self, n: int) -> str:
        """A data object of pair n, where the dump agent puts it (`<prefix>/<node id>/<file>`)."""
        return f"{self.prefix(n)}/{self.sources[n].instance_id}/data-0001"


@dataclass
class World:
    prefix: str
    agent: list[dict[str, Any]]
    controller: list[dict[str, Any]]
    controller_arn: str
    populator_role: str
    status_policy: list[dict[str, Any]]
    status_bucket: str
    a: Warm
    b: Warm

    def policy(self, warm: Warm) -> list[dict[str, Any]]:
        spec = transport.BucketSpec(
            name=warm.bucket,
            region="us-east-1",
            warm_id="warm",
            execution_arn=f"arn:aws:states:us-east-1:{ACCOUNT}:execution:m:x",
            stack_tag="stack",
            expire_days=3,
            kms_key_id=KEY,
            controller_role_arn=self.controller_arn,
            account=ACCOUNT,
            reader_role_arns=(self.populator_role,),
        )
        return list(transport.bucket_policy(spec)["Statement"])

    def ask(
        self,
        who: Instance | None,
        action: str,
        bucket: str,
        key: str | None = None,
        *,
        role: str | None = None,
        broad: bool = False,
        owner: str = ACCOUNT,
        **context: str,
    ) -> str:
        """What S3 answers `who` (an instance, or None: a principal with no instance credentials)."""
        if role is None:
            role = self.populator_role if who is not None and who in self.populators() else PLATFORM_ROLE
        if role == self.controller_arn:
            identity = self.controller
        else:
            identity = ([] if role == DEVELOPER else self.agent) + (BROAD if broad else [])
        ctx = {
            "aws:SecureTransport": "true",
            "aws:PrincipalAccount": ACCOUNT,
            "s3:ResourceAccount": owner,
            **context,
        }
        if who is not None:
            ctx["ec2:SourceInstanceARN"] = who.arn
        resource = f"arn:aws:s3:::{bucket}" + (f"/{key}" if key is not None else "")
        if bucket == self.status_bucket:
            policy = self.status_policy
        elif bucket in (self.a.bucket, self.b.bucket):
            policy = self.policy(self.a if bucket == self.a.bucket else self.b)
        else:
            policy = []  # another account's bucket: its policy is not ours (the identity side decides)
        return decide_s3(identity, policy, Request(action, resource, role, ctx))

    def populators(self) -> tuple[Instance, ...]:
        return self.a.populators + self.b.populators


@pytest.fixture(scope="module")
def world(synth: Synth) -> World:
    t = synth.template
    env = next(iter(synth.resources("AWS::Lambda::Function").values()))["Properties"]["Environment"]
    prefix = env["Variables"]["TRANSPORT_BUCKET_PREFIX"]
    [agent] = [
        p
        for k, p in synth.resources("AWS::IAM::ManagedPolicy").items()
        if k.startswith("CacheWarmerAgentPolicy")
    ]
    [controller_role] = [
        k for k in synth.resources("AWS::IAM::Role") if k.startswith("CacheWarmerControllerRole")
    ]
    [populator_role] = [
        k for k in synth.resources("AWS::IAM::Role") if k.startswith("CacheWarmerPopulatorRole")
    ]
    [status] = [k for k in synth.resources("AWS::S3::Bucket") if k.startswith("CacheWarmerStatusBucket")]
    [status_policy] = [
        p
        for p in synth.resources("AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": status}
    ]

    def warm(n: int, token: str) -> Warm:
        ids = [f"i-0{n}{k}{'0' * 14}" for k in range(4)]
        return Warm(
            bucket=transport.bucket_name(f"warm-{n}", token, prefix),
            sources=(Instance(ids[0]), Instance(ids[1])),
            # Warm B's populators run in another region (a cross-region warm).
            populators=(Instance(ids[2], "us-east-1" if n == 1 else "us-west-2"), Instance(ids[3])),
        )

    return World(
        prefix=prefix,
        agent=resolve(agent["Properties"]["PolicyDocument"]["Statement"], t),
        controller=resolve(list(_controller_statements(synth).values()), t),
        controller_arn=f"arn:aws:iam::{ACCOUNT}:role/{controller_role}",
        populator_role=f"arn:aws:iam::{ACCOUNT}:role/{populator_role}",
        status_policy=resolve(status_policy["Properties"]["PolicyDocument"]["Statement"], t),
        status_bucket=f"ref-{status}".lower(),
        a=warm(1, "a" * 16),
        b=warm(2, "b" * 16),
    )


def refused(answer: str) -> bool:
    return answer in ("Deny", "ImplicitDeny")


# ---- what the warm itself needs (the table below would pass vacuously without it) -------------------


def test_each_pair_reaches_its_own_dump(world: World) -> None:
    a = world.a
    src, pop = a.sources[0], a.populators[0]
    for broad in (False, True):
        for action in (
            "s3:PutObject",
            "s3:GetObject",
            "s3:AbortMultipartUpload",
            "s3:ListMultipartUploadParts",
        ):
            assert world.ask(src, action, a.bucket, a.data(0), broad=broad) == "Allow", (action, broad)
        assert world.ask(pop, "s3:GetObject", a.bucket, a.data(0)) == "Allow"
        listing = {"s3:prefix": f"{a.prefix(0)}/{src.instance_id}/"}
        assert world.ask(src, "s3:ListBucket", a.bucket, broad=broad, **listing) == "Allow"
        assert world.ask(pop, "s3:ListBucket", a.bucket, **listing) == "Allow"
    # The controller empties and deletes the bucket at teardown.
    for action in ("s3:DeleteObject", "s3:DeleteObjectVersion", "s3:AbortMultipartUpload"):
        assert world.ask(None, action, a.bucket, a.data(0), role=world.controller_arn) == "Allow", action
    for action in ("s3:ListBucketVersions", "s3:ListBucketMultipartUploads", "s3:DeleteBucket"):
        assert world.ask(None, action, a.bucket, role=world.controller_arn) == "Allow", action


# ---- the attack table ------------------------------------------------------------------------------

OBJECT_ACTIONS = (
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:DeleteObjectVersion",
    "s3:PutObjectAcl",
)


@pytest.mark.parametrize("attacker", ["source", "source-with-a-broad-platform-role", "populator"])
def test_one_warms_instance_cannot_get_put_or_list_another_warms_dump(world: World, attacker: str) -> None:
    a, b = world.a, world.b
    who = a.populators[0] if attacker == "populator" else a.sources[0]
    broad = attacker.endswith("role")  # the populators' role is the stack's: the managed policy only
    for n in (0, 1):
        for action in OBJECT_ACTIONS:
            assert refused(world.ask(who, action, b.bucket, b.data(n), broad=broad)), (action, n)
        for prefix in (f"{b.prefix(n)}/", "dumps/", "", f"dumps/{b.sources[n].arn}/"):
            assert refused(world.ask(who, "s3:ListBucket", b.bucket, broad=broad, **{"s3:prefix": prefix})), (
                prefix
            )
        assert refused(world.ask(who, "s3:ListBucket", b.bucket, broad=broad))  # no prefix at all
    for action in ("s3:ListBucketVersions", "s3:ListBucketMultipartUploads", "s3:PutBucketPolicy"):
        assert refused(world.ask(who, action, b.bucket, broad=broad)), action


@pytest.mark.parametrize("broad", [False, True], ids=["managed-policy", "broad-platform-role"])
def test_a_source_node_cannot_read_or_poison_another_nodes_dump_in_its_own_warm(
    world: World, broad: bool
) -> None:
    a = world.a
    me, other = a.sources[0], a.sources[1]
    for action in OBJECT_ACTIONS:
        assert refused(world.ask(me, action, a.bucket, a.data(1), broad=broad)), action
    listing = {"s3:prefix": f"{a.prefix(1)}/{other.instance_id}/"}
    assert refused(world.ask(me, "s3:ListBucket", a.bucket, broad=broad, **listing))
    # Writing a key that names the other pair's populator, outside its own prefix: refused.
    forged = f"dumps/{other.arn}/{a.populators[1].arn}/{other.instance_id}/DONE"
    assert refused(world.ask(me, "s3:PutObject", a.bucket, forged, broad=broad))


def test_a_populator_reads_only_its_own_source_nodes_dump_and_never_writes(world: World) -> None:
    a = world.a
    pop = a.populators[0]
    for action in ("s3:GetObject", "s3:PutObject"):
        assert refused(world.ask(pop, action, a.bucket, a.data(1))), action
    for action in ("s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:PutObjectAcl"):
        assert refused(world.ask(pop, action, a.bucket, a.data(0))), action
    # Not even under a prefix that names itself first (its own "source" prefix).
    assert refused(world.ask(pop, "s3:PutObject", a.bucket, f"dumps/{pop.arn}/x/DONE"))


@pytest.mark.parametrize(
    "key",
    [
        "_controller/warms/w-1/plan.json",
        "_controller/warms/_claims/w-1.json",
        "_controller/warms/_transport/ab.json",
    ],
)
def test_no_agent_reads_or_deletes_the_controllers_state_or_its_versions(world: World, key: str) -> None:
    src = world.a.sources[0]
    for action in (
        "s3:GetObject",
        "s3:GetObjectVersion",
        "s3:PutObject",
        "s3:DeleteObject",
        "s3:DeleteObjectVersion",
        "s3:PutObjectAcl",
        "s3:PutObjectTagging",
        "s3:RestoreObject",
    ):
        for broad in (False, True):
            assert refused(world.ask(src, action, world.status_bucket, key, broad=broad)), (action, broad)
        # Nor any principal of the account that is not the controller.
        assert world.ask(None, action, world.status_bucket, key, role=DEVELOPER, broad=True) == "Deny", action
    for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
        assert world.ask(None, action, world.status_bucket, key, role=world.controller_arn) == "Allow", action


@pytest.mark.parametrize("who", ["source", "controller"])
def test_a_bucket_of_the_same_name_in_another_account_is_refused(world: World, who: str) -> None:
    """`s3:ResourceAccount` on every grant: the same name owned by another account (the names are
    global) is never read, written, listed or emptied with this stack's credentials."""
    a = world.a
    if who == "source":
        src = a.sources[0]
        for action in ("s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload"):
            assert world.ask(src, action, a.bucket, a.data(0), owner=OTHER_ACCOUNT) == "ImplicitDeny", action
        listing = {"s3:prefix": f"{a.prefix(0)}/"}
        assert world.ask(src, "s3:ListBucket", a.bucket, owner=OTHER_ACCOUNT, **listing) == "ImplicitDeny"
        status_key = f"warms/w-1/dump/{src.instance_id}/{src.arn}.json"
        assert (
            world.ask(src, "s3:PutObject", world.status_bucket, status_key, owner=OTHER_ACCOUNT)
            == "ImplicitDeny"
        )
    else:
        role = world.controller_arn
        for action in (
            "s3:PutBucketPolicy",
            "s3:PutEncryptionConfiguration",
            "s3:ListBucketVersions",
            "s3:DeleteBucket",
        ):
            assert world.ask(None, action, a.bucket, role=role, owner=OTHER_ACCOUNT) == "ImplicitDeny", action
        for action in ("s3:DeleteObject", "s3:DeleteObjectVersion"):
            assert (
                world.ask(None, action, a.bucket, a.data(0), role=role, owner=OTHER_ACCOUNT) == "ImplicitDeny"
            )
        plan = "_controller/warms/w-1/plan.json"
        assert (
            world.ask(None, "s3:GetObject", world.status_bucket, plan, role=role, owner=OTHER_ACCOUNT)
            == "ImplicitDeny"
        )


def test_a_foreign_bucket_is_refused_by_iam_whatever_toS3_says(world: World) -> None:
    """A command naming another bucket (any name, this or another account): the agent's credentials
    write only to this stack's transport buckets of this account."""
    src = world.a.sources[0]
    key = f"dumps/{src.arn}/x/{src.instance_id}/data-0001"
    # Any other bucket, of this account or another; this stack's name pattern in another account.
    for bucket, owner in (
        ("attacker-bucket", OTHER_ACCOUNT),
        ("attacker-bucket", ACCOUNT),
        (f"{world.prefix}warm-1-{'c' * 16}", OTHER_ACCOUNT),
    ):
        assert world.ask(src, "s3:PutObject", bucket, key, owner=owner) == "ImplicitDeny", (bucket, owner)


def test_only_the_stack_key_encrypts_an_upload(world: World) -> None:
    a = world.a
    src = a.sources[0]
    enc = "s3:x-amz-server-side-encryption"
    for ctx in (
        {enc: "AES256"},
        {
            enc: "aws:kms",
            "s3:x-amz-server-side-encryption-aws-kms-key-id": "arn:aws:kms:us-east-1:1:key/other",
        },
        {enc: "aws:kms"},  # no key named: S3 would take aws/s3
        {enc: "aws:kms:dsse"},
        {"s3:x-amz-server-side-encryption-customer-algorithm": "AES256"},
    ):
        assert world.ask(src, "s3:PutObject", a.bucket, a.data(0), broad=True, **ctx) == "Deny", ctx
    assert world.ask(src, "s3:PutObject", a.bucket, a.data(0)) == "Allow"  # the default: the stack's key


def test_no_principal_without_instance_credentials_but_the_controller_reaches_a_dump(world: World) -> None:
    a = world.a
    for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
        assert world.ask(None, action, a.bucket, a.data(0), role=DEVELOPER, broad=True) == "Deny", action
    assert world.ask(None, "s3:ListBucket", a.bucket, role=DEVELOPER, broad=True) == "Deny"
    # Another account's principal, whatever it is granted.
    other = {"aws:PrincipalAccount": OTHER_ACCOUNT}
    assert world.ask(None, "s3:GetObject", a.bucket, a.data(0), role=DEVELOPER, broad=True, **other) == "Deny"


def test_no_instance_reconfigures_a_transport_bucket(world: World) -> None:
    a = world.a
    for action in (
        "s3:PutBucketPolicy",
        "s3:DeleteBucketPolicy",
        "s3:PutEncryptionConfiguration",
        "s3:PutLifecycleConfiguration",
        "s3:PutBucketAcl",
        "s3:DeleteBucket",
    ):
        for who in (a.sources[0], a.populators[0]):
            assert refused(world.ask(who, action, a.bucket, broad=True)), action
        assert world.ask(None, action, a.bucket, role=world.controller_arn) != "Deny", action


def test_the_bucket_policy_does_not_grow_with_the_warm(world: World) -> None:
    """S3 bucket policies hold at most 20 KB: the same policy for 1 node or 1,000."""
    import json

    size = len(json.dumps({"Version": "2012-10-17", "Statement": world.policy(world.a)}))
    assert size < 8_000, size


def test_the_deployed_documents_admit_only_this_stacks_transport_buckets(synth: Synth, world: World) -> None:
    import re

    docs = synth.resources("AWS::SSM::Document")
    [dump] = [d for k, d in docs.items() if k.startswith("CacheWarmerDumpAgentDocument")]
    [populate] = [d for k, d in docs.items() if k.startswith("CacheWarmerPopulateAgentDocument")]
    to_s3 = dump["Properties"]["Content"]["parameters"]["toS3"]["allowedPattern"]
    from_s3 = populate["Properties"]["Content"]["parameters"]["fromS3"]["allowedPattern"]
    a = world.a
    src = a.sources[0]
    ours = f"s3://{a.bucket}/{a.prefix(0)}"
    assert re.fullmatch(to_s3, ours) and re.fullmatch(to_s3, "none")
    assert re.fullmatch(from_s3, f"{ours}/{src.instance_id}")
    another_stack = f"s3://cw00000-warm-1-{'a' * 16}/{a.prefix(0)}"
    for foreign in (
        f"s3://attacker-bucket/{a.prefix(0)}",
        another_stack,
        f"s3://{a.bucket}/elsewhere",
        f"s3://{a.bucket}/dumps/{src.arn}",  # no populator: not a pair's prefix
        f"s3://{a.bucket}/{a.prefix(0)}/extra",
    ):
        assert not re.fullmatch(to_s3, foreign), foreign
        assert not re.fullmatch(from_s3, f"{foreign}/{src.instance_id}"), foreign


def test_agents_list_nothing_in_the_status_bucket(world: World) -> None:
    """The flood finding's IAM half: an agent may write keys ending in its own ARN anywhere under the
    status prefix, but may list nothing; the controller never lists what agents write for its
    progress (tests/controller/test_status_flood.py)."""
    src = world.a.sources[0]
    for prefix in ("warms/", "warms/w-1/dump/", ""):
        ctx = {"s3:prefix": prefix}
        assert refused(world.ask(src, "s3:ListBucket", world.status_bucket, **ctx)), prefix
    assert decide(world.agent, Request("s3:ListAllMyBuckets", "*", PLATFORM_ROLE, {})) == "ImplicitDeny"
