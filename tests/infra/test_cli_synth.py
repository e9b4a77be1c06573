"""`cdk synth` through the pinned CLI (infra/node_modules/.bin/cdk, as `make synth` runs it), offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.support import REPO, asl_path, documents_dir, lambdas_dir

CDK = REPO / "infra" / "node_modules" / ".bin" / "cdk"


def test_cdk_cli_synth_offline(artifacts: tuple[Path, Path], tmp_path: Path) -> None:
    if not CDK.exists():
        pytest.fail(f"{CDK} missing: run `make deps-node`")
    out = tmp_path / "cdk.out"
    env = {
        **os.environ,
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        "CDK_DISABLE_VERSION_CHECK": "1",
        "CDK_DISABLE_CLI_TELEMETRY": "true",
        # No proxy and no AWS credentials: nothing may need the network.
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
        "AWS_EC2_METADATA_DISABLED": "true",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "",
    }
    ctx = {
        "aslPath": asl_path(),
        "ssmDocumentsDir": documents_dir(),
        "lambdasDir": lambdas_dir(),
        "dumperTarball": artifacts[0],
        "agentBundle": artifacts[1],
    }
    argv = [str(CDK), "synth", "--quiet", "--no-notices", "-o", str(out)]
    for k, v in ctx.items():
        argv += ["-c", f"{k}={v}"]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    template = json.loads((out / "CacheWarm.template.json").read_text())
    assert any(r["Type"] == "AWS::StepFunctions::StateMachine" for r in template["Resources"].values())
    manifest = json.loads((out / "manifest.json").read_text())
    assert "CacheWarm" in manifest["artifacts"]
    # cdk-nag ran inside the app and found nothing unacknowledged.
    report = json.loads((out / "validation-report.json").read_text())
    assert all(p["conclusion"] == "success" for p in report["pluginReports"]), report


def test_app_names_missing_artifacts(tmp_path: Path) -> None:
    """Without `make dist`, the app stops with an error naming the missing file."""
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
                }
            ),
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "dumper tarball not found" in proc.stderr and "make dist" in proc.stderr
