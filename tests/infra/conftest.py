"""One CDK synth per test session, shared by every infra test (a synth takes ~7 s here).

Until the controller's real files exist, the stand-ins in `fixtures/` are used; each switches to the
real file (statemachine/warm.asl.json, infra/ssm_documents/, lambdas/) as soon as it lands.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra.support import (
    FAR_REGION,
    FAR_SG,
    FAR_VPC,
    MEMCACHED_SG,
    REPLICA_PAIRS,
    REPO,
    SOURCE_SG,
    CliSynth,
    RealDist,
    Synth,
    asl_path,
    cdk_cli_synth,
    documents_dir,
    lambdas_dir,
    real_dist,
    write_artifacts,
)

# The context every CLI synth names: the replicas' groups are required.
GROUPS = {"destinationSecurityGroupIds": MEMCACHED_SG, "sourceSecurityGroupIds": SOURCE_SG}


@pytest.fixture(scope="session")
def cli_single(real_dist: RealDist, tmp_path_factory: pytest.TempPathFactory) -> CliSynth:
    """The single-region stack, from the real bundle (the app's defaults: build/dist/ and the
    checkout's ASL, Lambdas and documents), environment-agnostic as `make synth` gives it."""
    return cdk_cli_synth(tmp_path_factory.mktemp("cli-single") / "cdk.out", GROUPS)


@pytest.fixture(scope="session")
def cli_two_regions(real_dist: RealDist, tmp_path_factory: pytest.TempPathFactory) -> CliSynth:
    """The two-region app (-c destinationRegions=us-west-2 …) from the real bundle, home us-east-1."""
    context = {
        "destinationSecurityGroupIds": f"{MEMCACHED_SG},{FAR_REGION}={FAR_SG}",
        "sourceSecurityGroupIds": SOURCE_SG,
        "destinationRegions": FAR_REGION,
        "destinationVpcs": f"{FAR_REGION}={FAR_VPC}",
    }
    return cdk_cli_synth(tmp_path_factory.mktemp("cli-two") / "cdk.out", context, region="us-east-1")


@pytest.fixture(scope="session", name="real_dist")
def real_dist_fixture() -> RealDist:
    """What `make dist` built in build/dist/ (the deploy-path tests)."""
    return real_dist()


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Small stand-ins for build/dist/cachewarm-dump.tar.gz and cachewarm-agent.tar.gz."""
    return write_artifacts(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session")
def synth(artifacts: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synth]:
    from aws_cdk import App, Validations
    from cachewarm_infra.stack import CacheWarmStack, StackSettings
    from cdk_nag import AwsSolutionsChecks

    outdir = tmp_path_factory.mktemp("cdk.out")
    # The same feature flags as `cdk synth` (cdk.json), so the template under test is the deployed one.
    flags = json.loads((REPO / "cdk.json").read_text()).get("context", {})
    app = App(outdir=str(outdir), context=flags)
    settings = StackSettings(
        asl_path=asl_path(),
        lambdas_dir=lambdas_dir(),
        ssm_documents_dir=documents_dir(),
        dumper_tarball=artifacts[0],
        agent_bundle=artifacts[1],
        subnet_ids=("subnet-0123456789abcdef0", "subnet-0fedcba9876543210"),
        asg_names=("memcached-replica-b",),
        destination_security_group_ids=(MEMCACHED_SG,),
        source_security_group_ids=(SOURCE_SG,),
        replica_pairs=REPLICA_PAIRS,
    )
    stack = CacheWarmStack(app, "CacheWarmTest", settings=settings)
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    nag_error = None
    try:
        app.synth()
    except Exception as e:  # cdk-nag findings fail the synth; the nag test reports them
        nag_error = str(e)
    report_path = outdir / "validation-report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    template = json.loads((outdir / "CacheWarmTest.template.json").read_text())
    yield Synth(template=template, outdir=outdir, warmer=stack.warmer, nag_report=report, nag_error=nag_error)
