"""The construct as another CDK app gets it: the `cachewarm-cdk` wheel `make dist` built (with the real
dumper tarball and agent bundle inside), installed in a fresh virtual environment, and
infra/examples/my-app/app.py synthesized with it from a directory outside the repository — without
reading a file of any cachewarm checkout, and without importing the agent's `cachewarm` package (which
the machine may well have installed, editable, from a checkout). Its template passes cfn-lint and
cdk-nag's AwsSolutions checks on everything the construct made, and outputs what the docs name."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.infra.support import REPO, RealDist, cfn_lint_errors, documented_outputs

EXAMPLE = REPO / "infra" / "examples" / "my-app" / "app.py"

# Runs the example with an audit hook that records every path the Python process opens or lists, and
# reports what it saw (the Node.js side of jsii only reads what Python hands it: checked on the assembly).
DRIVER = textwrap.dedent(
    """
    import json, os, runpy, sys

    seen = []

    def hook(event, args):
        if event in ("open", "os.listdir", "os.scandir", "glob.glob", "shutil.copyfile", "shutil.copytree"):
            for a in args[:2]:
                if isinstance(a, (str, bytes, os.PathLike)):
                    seen.append(os.path.abspath(os.fsdecode(a)))

    sys.addaudithook(hook)
    # cdk-nag's AwsSolutions checks, as infra/app.py runs them (the construct's acknowledgements are
    # Validations acknowledgements); the example's own VPC is yours, not the construct's.
    import aws_cdk
    from cdk_nag import AwsSolutionsChecks

    synth = aws_cdk.App.synth

    def synth_with_nag(app, *args, **kwargs):
        aws_cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
        vpc = app.node.find_child("MyMemcached").node.find_child("Vpc")
        reason = "The example's VPC stands for the user's own; its flow logs are theirs to set."
        aws_cdk.Validations.of(vpc).acknowledge(aws_cdk.Acknowledgment(id="AwsSolutions-VPC7", reason=reason))
        return synth(app, *args, **kwargs)

    aws_cdk.App.synth = synth_with_nag
    try:
        runpy.run_path("app.py", run_name="__main__")
    finally:
        import cachewarm_infra, cachewarm_infra.assets

        report = {
            "opened": sorted(set(seen)),
            "modules": sorted(m for m in sys.modules if m == "cachewarm" or m.startswith("cachewarm.")),
            "package": cachewarm_infra.__file__,
            "assets": str(cachewarm_infra.assets.ASSETS_DIR),
            "sys_path": sys.path,
        }
        with open(os.environ["DRIVER_REPORT"], "w") as f:
            json.dump(report, f)
    """
)


@dataclass
class Installed:
    venv: Path
    wheel: Path
    report: dict[str, Any]
    outdir: Path
    template: dict[str, Any]
    forbidden: list[Path]


def _run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, **kw)
    assert proc.returncode == 0, f"{argv}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _machine_site(venv: Path) -> None:
    """`--system-site-packages` shows the base interpreter's packages; when the tests run in a
    virtual environment (`make test`: .venv), that one's packages are the machine's."""
    if sys.prefix == sys.base_prefix:
        return
    [purelib] = venv.glob("lib/python3*/site-packages")
    lines = [f"import site; site.addsitedir({p!r})" for p in site.getsitepackages()]
    (purelib / "_machine_site.pth").write_text("\n".join(lines) + "\n")


def _checkout_roots(python: Path) -> list[Path]:
    """This repository, and any cachewarm checkout whose agent package the venv could import."""
    roots = [REPO]
    proc = _run(
        [
            str(python),
            "-c",
            "import importlib.util as u; s = u.find_spec('cachewarm'); print(s.origin if s else '')",
        ],
        env={"PATH": os.environ["PATH"]},
        cwd="/",
    )
    origin = proc.stdout.strip()
    if origin:
        for parent in Path(origin).resolve().parents:
            if (parent / "pyproject.toml").is_file():
                roots.append(parent)
                break
    return roots


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, real_dist: RealDist) -> Installed:
    tmp = tmp_path_factory.mktemp("installed")
    wheel = real_dist.cdk_wheel

    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)])
    _machine_site(venv)
    python = venv / "bin" / "python"
    # No index: the construct's requirements must already be met by the machine's packages. A clean
    # environment (no PYTHONPATH: the tests' holds the checkout's infra/ and agent/).
    clean = {"PATH": os.environ["PATH"], "HOME": str(tmp)}
    _run([str(python), "-m", "pip", "install", "-q", "--no-index", str(wheel)], env=clean)

    app = tmp / "my-app"
    app.mkdir()
    shutil.copy(EXAMPLE, app / "app.py")
    (app / "driver.py").write_text(DRIVER)
    outdir = app / "cdk.out"
    env = {
        **clean,
        "CDK_OUTDIR": str(outdir),
        "DRIVER_REPORT": str(tmp / "report.json"),
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    # An unacknowledged cdk-nag finding fails this synth (the plugin the driver adds).
    _run([str(python), "driver.py"], cwd=app, env=env)
    report = json.loads((tmp / "report.json").read_text())
    template = json.loads((outdir / "MyMemcached.template.json").read_text())
    return Installed(venv, wheel, report, outdir, template, _checkout_roots(python))


def test_wheel_carries_everything_the_construct_deploys(installed: Installed, real_dist: RealDist) -> None:
    import zipfile

    names = set(zipfile.ZipFile(installed.wheel).namelist())
    for needed in (
        "cachewarm_infra/assets/statemachine/warm.asl.json",
        "cachewarm_infra/assets/statemachine/teardown.asl.json",
        "cachewarm_infra/assets/ssm_documents/dump-agent.json",
        "cachewarm_infra/assets/lambdas/cachewarm_controller/handlers.py",
        "cachewarm_infra/assets/dist/cachewarm-dump.tar.gz",
        "cachewarm_infra/assets/dist/cachewarm-agent.tar.gz",
        "cachewarm_infra/install/install-agent.sh",
        "cachewarm_infra/contract/inputs.py",
    ):
        assert needed in names, needed
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc") or n.endswith("app.py")]
    # The very bundle `make dist` locked and checked (test_deploy_path.py), not a copy of another.
    import hashlib

    with zipfile.ZipFile(installed.wheel) as z:
        packaged = z.read("cachewarm_infra/assets/dist/cachewarm-agent.tar.gz")
    assert hashlib.sha256(packaged).hexdigest() == real_dist.agent_sha256
    import cachewarm

    assert installed.wheel.name == f"cachewarm_cdk-{cachewarm.__version__}-py3-none-any.whl"


def test_example_synthesizes_from_the_installed_package_alone(installed: Installed) -> None:
    report = installed.report
    site_packages = str(installed.venv / "lib")
    assert report["package"].startswith(site_packages), report["package"]
    assert report["assets"].startswith(site_packages)
    assert report["modules"] == [], "the construct imported the agent's cachewarm package"

    def in_checkout(path: str) -> bool:
        # The machine's packages may live in a checkout's .venv (`make test`): those are not its files.
        p = Path(path)
        return any(p.is_relative_to(r) for r in installed.forbidden) and not p.is_relative_to(sys.prefix)

    # The app's directory is outside the repository. (sys.path may still name a checkout: the machine's
    # editable install of the agent adds its agent/ directory; nothing is read from it, as checked here.)
    assert not in_checkout(report["sys_path"][0])
    read = [p for p in report["opened"] if in_checkout(p)]
    assert not read, f"read from a cachewarm checkout: {read[:10]}"
    # What the Python side handed to CDK: every asset is staged inside the cloud assembly.
    manifest = json.loads((installed.outdir / "MyMemcached.assets.json").read_text())
    for asset in manifest["files"].values():
        assert (installed.outdir / asset["source"]["path"]).exists()


def test_example_template_uses_the_packaged_files(installed: Installed, real_dist: RealDist) -> None:
    resources = installed.template["Resources"]
    machines = [r for r in resources.values() if r["Type"] == "AWS::StepFunctions::StateMachine"]
    assert len(machines) == 2
    functions = [r for r in resources.values() if r["Type"] == "AWS::Lambda::Function"]
    assert {f["Properties"]["Handler"] for f in functions} >= {"cachewarm_controller.handlers.check_progress"}
    docs = [r for r in resources.values() if r["Type"] == "AWS::SSM::Document"]
    # The agent version and bundle checksum come from the packaged agent bundle (`make dist`'s),
    # written into the documents at synth.
    with_version = [
        d for d in docs if f"'{real_dist.version}'" in json.dumps(d["Properties"]["Content"]["mainSteps"])
    ]
    assert len(with_version) == 4  # install, dump, populate, verify
    assert real_dist.agent_sha256 in json.dumps([d["Properties"]["Content"] for d in docs])
    # Populators in the app's own VPC, reaching only the replicas' group.
    [pop] = [
        r
        for r in resources.values()
        if r["Type"] == "AWS::EC2::SecurityGroup" and "populators" in r["Properties"]["GroupDescription"]
    ]
    assert pop["Properties"]["VpcId"] == {
        "Ref": next(k for k, r in resources.items() if r["Type"] == "AWS::EC2::VPC")
    }
    [egress] = [r for r in resources.values() if r["Type"] == "AWS::EC2::SecurityGroupEgress"]
    replicas = next(k for k in resources if k.startswith("Replicas"))
    assert egress["Properties"]["DestinationSecurityGroupId"] == {"Fn::GetAtt": [replicas, "GroupId"]}


def test_example_outputs_what_every_start_input_and_event_needs(installed: Installed) -> None:
    """docs/deploy.md: the example app gives the same outputs as the stack (add_outputs)."""
    outputs = set(installed.template["Outputs"])
    assert {"PopulatorLaunchTemplateId", "WarmEventBusName", "StateMachineArn", "DashboardName"} <= outputs
    home, _ = documented_outputs()
    assert outputs == home


def test_example_template_passes_cfn_lint(installed: Installed) -> None:
    assert cfn_lint_errors(installed.outdir / "MyMemcached.template.json", "us-east-1") == []
