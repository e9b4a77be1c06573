"""Fixtures for the controller tests (the harness is in support.py)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from cachewarm.contract.replicas import parse_pairs
from cachewarm_controller import handlers
from cachewarm_controller.steps.common import Deps, Documents, Settings
from cachewarm_controller.store import S3Store
from moto import mock_aws

from tests.controller.ec2_tokens import patch_client_tokens
from tests.controller.support import (
    AMI,
    BUCKET,
    DOCS_DIR,
    DOCUMENT_NAMES,
    DUMP_DOC,
    INSTALL_DOC,
    MOTO_CONFIG,
    POPULATE_DOC,
    REGION,
    STATS_DOC,
    UNMOUNT_DOC,
    VERIFY_DOC,
    AgentSim,
    FakeAttacher,
    FakeClock,
    World,
    dispatcher,
)

# The pairs every test may warm (tests needing another add it with World.allow).
WORLD_PAIRS = "main-a->main-b"

ENV = {
    "AWS_DEFAULT_REGION": REGION,
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "STATUS_BUCKET": BUCKET,
    "DUMP_DOCUMENT_NAME": DUMP_DOC,
    "POPULATE_DOCUMENT_NAME": POPULATE_DOC,
    "VERIFY_DOCUMENT_NAME": VERIFY_DOC,
    "INSTALL_DOCUMENT_NAME": INSTALL_DOC,
    "UNMOUNT_DOCUMENT_NAME": UNMOUNT_DOC,
    "MEMCACHED_STATS_DOCUMENT_NAME": STATS_DOC,
    "STACK_TAG": "cachewarm-test",
    "POWERTOOLS_SERVICE_NAME": "cachewarm",
    "POWERTOOLS_METRICS_NAMESPACE": "CacheWarm",
    "POWERTOOLS_LOG_LEVEL": "WARNING",
}


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Lambda environment, for tests that build their own moto world."""
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("KMS_KEY_ID", raising=False)


def _indexed_get_tags(self: Any) -> list[dict[str, str]]:
    """moto scans every tag in the region for each resource's tags (O(n^2) for 600 instances, minutes
    for the 300-node test); look them up by resource id instead — the same result."""
    from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix

    rid = getattr(self, "id", None)
    if not rid:
        return []
    kind = EC2_PREFIX_TO_RESOURCE.get(get_prefix(rid), "")
    tags = self.ec2_backend.tags.get(rid, {})
    return [{"resource_id": rid, "key": k, "value": v, "resource_type": kind} for k, v in tags.items()]


@pytest.fixture(scope="module")
def shared_world() -> Iterator[World]:
    """One moto world per test module (building EC2/SSM backends costs seconds); tests share it and
    are kept apart by their warm id."""
    from moto.awslambda_simple.models import LambdaSimpleBackend
    from moto.ec2.models.core import TaggedEC2Resource
    from moto.stepfunctions.parser.asl.component.common.path import result_path
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction
    from moto.stepfunctions.parser.asl.utils import json_path

    with pytest.MonkeyPatch.context() as monkeypatch, mock_aws(config=MOTO_CONFIG):
        for k, v in ENV.items():
            monkeypatch.setenv(k, v)
        monkeypatch.delenv("KMS_KEY_ID", raising=False)
        ec2 = boto3.client("ec2", region_name=REGION)
        ssm = boto3.client("ssm", region_name=REGION)
        s3 = boto3.client("s3", region_name=REGION)
        sfn = boto3.client("stepfunctions", region_name=REGION)
        s3.create_bucket(Bucket=BUCKET)
        autoscaling = boto3.client("autoscaling", region_name=REGION)
        for stem, name in DOCUMENT_NAMES.items():
            ssm.create_document(
                Name=name,
                Content=(DOCS_DIR / f"{stem}.json").read_text(),
                DocumentType="Command",
                DocumentFormat="JSON",
            )
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        monkeypatch.setenv("VPC_ID", vpc)
        subnets = {
            az: ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=az)["Subnet"]["SubnetId"]
            for az, cidr in (("us-east-1a", "10.0.16.0/20"), ("us-east-1b", "10.0.32.0/20"))
        }
        # The replicas' security group (the stack's destination and source groups): a node found by its
        # replica tag counts only in it.
        memcached_sg = ec2.create_security_group(GroupName="memcached", Description="replicas", VpcId=vpc)[
            "GroupId"
        ]
        template_id = ec2.create_launch_template(
            LaunchTemplateName="cachewarm-populator",
            LaunchTemplateData={"ImageId": AMI, "InstanceType": "m5.large"},
        )["LaunchTemplate"]["LaunchTemplateId"]
        monkeypatch.setenv("POPULATOR_LAUNCH_TEMPLATE_ID", template_id)
        # The stack's pin (compute.DOCUMENT_VERSION): the documents created above are version 1.
        monkeypatch.setenv("DOCUMENT_VERSION", "1")
        clock = FakeClock()
        store = S3Store(s3, BUCKET)
        # Status objects are synthesized in memory; tests that want the S3 round trip set agents.store.
        agents = AgentSim(ssm, clock, results=store)
        attacher = FakeAttacher()
        documents = Documents(DUMP_DOC, POPULATE_DOC, VERIFY_DOC, INSTALL_DOC, UNMOUNT_DOC, STATS_DOC)
        deps = Deps(
            ec2=ec2,
            s3=store,
            agents=agents,
            attacher=attacher,
            settings=Settings(
                BUCKET,
                documents,
                vpc_id=vpc,
                stack_tag="cachewarm-test",
                replica_pairs=parse_pairs(WORLD_PAIRS),
                memcached_security_groups=(memcached_sg,),
            ),
            statuses=agents,
            autoscaling=autoscaling,
            clock=clock,
            sleep=lambda s: None,
            executions=sfn,
        )
        w = World(
            ec2,
            ssm,
            s3,
            sfn,
            clock,
            attacher,
            agents,
            deps,
            subnets,
            [],
            template_id,
            autoscaling=autoscaling,
            memcached_sg=memcached_sg,
        )
        w.base_settings = w.deps.settings
        w.source_ids = w.add_source_nodes("main-a", 3)
        w.add_source_nodes("main-b", 2)  # the destination replica: never a source

        def wait_interval(self: Any, env: Any, wait_seconds: int) -> None:
            clock.advance(wait_seconds)

        monkeypatch.setattr(WaitFunction, "_wait_interval", wait_interval)
        # Only the retrier's module sees a sleep-free `time` (the test thread still really sleeps).
        monkeypatch.setattr(retrier_decl, "time", SimpleNamespace(sleep=clock.advance))
        monkeypatch.setattr(LambdaSimpleBackend, "invoke", dispatcher(lambda: w))
        # The interpreter builds a new boto3 Lambda client per task (~0.1 s each): reuse one.
        lambda_client = boto3.client("lambda", region_name=REGION)
        monkeypatch.setattr(lambda_eval_utils, "boto_client_for", lambda **kw: lambda_client)
        monkeypatch.setattr(handlers, "get_deps", lambda: w.deps)
        monkeypatch.setattr(TaggedEC2Resource, "get_tags", _indexed_get_tags)
        patch_client_tokens(monkeypatch)
        # jsonpath_ng rebuilds its PLY parser tables on every parse: ~10 ms per JSONPath the
        # interpreter evaluates. The parsed expressions are reusable; cache them.
        monkeypatch.setattr(json_path, "parse", functools.lru_cache(maxsize=None)(json_path.parse))
        monkeypatch.setattr(result_path, "parse", functools.lru_cache(maxsize=None)(result_path.parse))
        yield w


@pytest.fixture
def world(shared_world: World) -> World:
    shared_world.reset()
    return shared_world
