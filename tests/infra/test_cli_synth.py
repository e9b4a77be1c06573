"""`cdk synth` through the pinned CLI (infra/node_modules/.bin/cdk, as `make synth` runs it), offline,
from what `make dist` built: the single-region stack and the two-region app. cdk-nag runs inside the app
(infra/app.py): a finding without an acknowledgement fails these synths. The templates are linted
by test_deploy_path.py; one synth of each per session (conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.infra.support import (
    FAR_REGION,
    FAR_SG,
    FAR_VPC,
    REPO,
    CliSynth,
    RealDist,
    asl_path,
    documents_dir,
    lambdas_dir,
)


def _assembly(synth: CliSynth) -> dict[str, object]:
    return json.loads((synth.outdir / "manifest.json").read_text())["artifacts"]


def test_the_single_region_stack_synthesizes_from_the_real_bundle(
    cli_single: CliSynth, real_dist: RealDist
) -> None:
    assert set(cli_single.templates) == {"CacheWarm"}
    template = cli_single.templates["CacheWarm"]
    assert any(r["Type"] == "AWS::StepFunctions::StateMachine" for r in template["Resources"].values())
    # The assets are `make dist`'s files, byte for byte, and their version is the checkout's.
    manifest = json.loads((cli_single.outdir / "CacheWarm.assets.json").read_text())
    staged = {
        (cli_single.outdir / a["source"]["path"]).read_bytes()
        for a in manifest["files"].values()
        if a["source"]["path"].endswith(".tar.gz")
    }
    assert staged == {real_dist.agent.read_bytes(), real_dist.dumper.read_bytes()}
    docs = json.dumps([r for r in template["Resources"].values() if r["Type"] == "AWS::SSM::Document"])
    assert real_dist.agent_sha256 in docs and f"'{real_dist.version}'" in docs
    # Acknowledged findings are recorded in the assembly (the plugin ran against them).
    metadata = (cli_single.outdir / "CacheWarm.metadata.json").read_text()
    assert "aws:cdk:acknowledged-rules" in metadata and "AwsSolutions-IAM5" in metadata


def test_the_two_region_app_deploys_the_far_regions_stack_first(cli_two_regions: CliSynth) -> None:
    """`-c destinationRegions=us-west-2`: a second stack in us-west-2 (launch template, documents, log
    group, security group there), which the home stack depends on (its values come through
    Fn::GetStackOutput), so `cdk deploy --all` deploys it first."""
    far = f"CacheWarm-{FAR_REGION}"
    assert set(cli_two_regions.templates) == {"CacheWarm", far}
    artifacts = _assembly(cli_two_regions)
    home, remote = artifacts["CacheWarm"], artifacts[far]
    assert home["environment"].endswith("/us-east-1") and remote["environment"].endswith(f"/{FAR_REGION}")
    assert far in home["dependencies"]
    kinds = {r["Type"] for r in cli_two_regions.templates[far]["Resources"].values()}
    assert {
        "AWS::EC2::LaunchTemplate",
        "AWS::SSM::Document",
        "AWS::Logs::LogGroup",
        "AWS::EC2::SecurityGroup",
    } <= kinds
    [sg] = [
        r
        for r in cli_two_regions.templates[far]["Resources"].values()
        if r["Type"] == "AWS::EC2::SecurityGroup"
    ]
    assert sg["Properties"]["VpcId"] == FAR_VPC
    assert FAR_SG in json.dumps(cli_two_regions.templates[far])
    assert "Fn::GetStackOutput" in json.dumps(cli_two_regions.templates["CacheWarm"])
    # No custom resource carries the values across (weak references).
    for template in cli_two_regions.templates.values():
        assert not [r for r in template["Resources"].values() if r["Type"].startswith("Custom::")]


def test_app_names_missing_artifacts(tmp_path: Path) -> None:
    """Without `make dist`, the app stops with one error line naming the missing file."""
    env = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}
    proc = subprocess.run(
        [sys.executable, "infra/app.py"],
        cwd=REPO,
        env={
            **env,
            "CDK_OUTDIR": str(tmp_path),
            "CDK_CONTEXT_JSON": json.dumps(
                {
                    "aslPath": str(asl_path()),
                    "ssmDocumentsDir": str(documents_dir()),
                    "lambdasDir": str(lambdas_dir()),
                    "dumperTarball": str(tmp_path / "nope.tar.gz"),
                    "destinationSecurityGroupIds": "sg-0123456789abcdef0",
                    "sourceSecurityGroupIds": "sg-0123456789abcdef0",
                }
            ),
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "dumper tarball not found" in proc.stderr and "make dist" in proc.stderr
    assert "Traceback" not in proc.stderr
