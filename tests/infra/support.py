"""Shared helpers of the infra tests: where the real or stand-in inputs are, the synth result."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
REAL_ASL = REPO / "statemachine" / "warm.asl.json"
REAL_DOCS = REPO / "infra" / "ssm_documents"
REAL_LAMBDAS = REPO / "lambdas"
# The replica pairs the session synth allows (context replicaPairs): the examples' event, and the
# Auto Scaling group whose launches it warms.
REPLICA_PAIRS = ("users-v1->users-v2", "users-v1->asg:memcached-replica-b")
# The replicas' security groups the session synth names (context destinationSecurityGroupIds,
# sourceSecurityGroupIds).
MEMCACHED_SG = "sg-0123456789abcdef0"
SOURCE_SG = "sg-0123456789abcdef1"

# What `make dist` builds (`make test` runs it first): the deploy-path tests use these, never stand-ins.
DIST = REPO / "build" / "dist"

# jsii prints a banner about Node 20 on every import; it is noise in test output.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")


def asl_path() -> Path:
    return REAL_ASL if REAL_ASL.is_file() else FIXTURES / "standin.asl.json"


def documents_dir() -> Path:
    real = all((REAL_DOCS / f"{n}.json").is_file() for n in ("dump-agent", "populate-agent"))
    return REAL_DOCS if real else FIXTURES / "ssm_documents"


def lambdas_dir() -> Path:
    return REAL_LAMBDAS if (REAL_LAMBDAS / "cachewarm_controller").is_dir() else FIXTURES / "lambdas"


@dataclass
class Synth:
    """The shared synth: the template as JSON, the assembly directory, and the construct."""

    template: dict[str, Any]
    outdir: Path
    warmer: Any
    nag_report: dict[str, Any] | None
    nag_error: str | None

    def resources(self, cfn_type: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.template["Resources"].items() if v["Type"] == cfn_type}


@dataclass(frozen=True)
class RealDist:
    """build/dist/ as `make dist` left it: the dumper tarball, the agent bundle (wheels + lock) and the
    cachewarm-cdk wheel carrying both."""

    dumper: Path
    agent: Path
    cdk_wheel: Path
    version: str
    agent_sha256: str


def real_dist() -> RealDist:
    import hashlib

    import cachewarm

    dumper, agent = DIST / "cachewarm-dump.tar.gz", DIST / "cachewarm-agent.tar.gz"
    wheels = sorted(DIST.glob("cachewarm_cdk-*-py3-none-any.whl"))
    missing = [str(p) for p in (dumper, agent) if not p.is_file()] + (
        [] if wheels else ["cachewarm_cdk wheel"]
    )
    if missing:
        import pytest

        pytest.fail(f"{', '.join(missing)} missing in {DIST}: run `make dist` (make test does)")
    # Built from this checkout's version, not left over from another.
    [wheel] = [w for w in wheels if w.name == f"cachewarm_cdk-{cachewarm.__version__}-py3-none-any.whl"]
    _check_fresh(wheel)
    digest = hashlib.sha256(agent.read_bytes()).hexdigest()
    return RealDist(dumper, agent, wheel, cachewarm.__version__, digest)


def _check_fresh(wheel: Path) -> None:
    """The wheel's construct code and deployed files are this checkout's (a build/dist/ left from
    before an edit would test old code: `make test` rebuilds it, a bare pytest run may not have)."""
    import zipfile

    import pytest

    def source(name: str) -> Path | None:
        rel = name.removeprefix("cachewarm_infra/")
        for packaged, checkout in (
            ("assets/lambdas/", REPO / "lambdas"),
            ("assets/statemachine/", REPO / "statemachine"),
            ("assets/ssm_documents/", REPO / "infra" / "ssm_documents"),
        ):
            if rel.startswith(packaged):
                return checkout / rel.removeprefix(packaged)
        return None if rel.startswith("assets/") else REPO / "infra" / name

    with zipfile.ZipFile(wheel) as z:
        stale = [
            name
            for name in z.namelist()
            if name.startswith("cachewarm_infra/")
            and (path := source(name)) is not None
            and path.is_file()
            and z.read(name) != path.read_bytes()
        ]
    if stale:
        pytest.fail(f"{wheel} is older than the checkout ({', '.join(stale[:3])}): run `make dist`")


CDK = REPO / "infra" / "node_modules" / ".bin" / "cdk"
# The replicas' groups a CLI synth names (required context), and a destination region's.
FAR_REGION, FAR_VPC, FAR_SG = "us-west-2", "vpc-0fedcba9876543210", "sg-0fedcba9876543210"


@dataclass
class CliSynth:
    """`cdk synth` through the pinned CLI, as `make synth` runs it: the assembly and its templates."""

    outdir: Path
    templates: dict[str, dict[str, Any]]
    stderr: str


def cdk_cli_synth(outdir: Path, context: dict[str, str], region: str | None = None) -> CliSynth:
    """The pinned CLI on the repository's app (cdk.json), offline: no credentials, no proxy, no AWS
    config; `region` as AWS_REGION (the CLI's CDK_DEFAULT_REGION). cdk-nag runs inside the app: an
    unacknowledged finding fails the synth."""
    import subprocess

    import pytest

    if not CDK.exists():
        pytest.fail(f"{CDK} missing: run `make deps-node`")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_"))} | {
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        "CDK_DISABLE_VERSION_CHECK": "1",
        "CDK_DISABLE_CLI_TELEMETRY": "true",
        # No proxy, no AWS credentials or profile: nothing may need the network.
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(outdir.parent / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(outdir.parent / "no-aws-credentials"),
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "",
    }
    if region:
        env["AWS_REGION"] = env["AWS_DEFAULT_REGION"] = region
    argv = [str(CDK), "synth", "--quiet", "--no-notices", "-o", str(outdir)]
    for k, v in context.items():
        argv += ["-c", f"{k}={v}"]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-6000:]
    templates = {
        t.name.removesuffix(".template.json"): json.loads(t.read_text())
        for t in outdir.glob("*.template.json")
    }
    return CliSynth(outdir, templates, proc.stderr)


# ---- the docs' outputs ----------------------------------------------------------------------------

DEPLOY_DOC = REPO / "docs" / "deploy.md"
# Every page that tells an operator what to read from the stack.
DOC_PAGES = (
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "infra" / "README.md",
    REPO / "statemachine" / "README.md",
)


def documented_outputs() -> tuple[set[str], set[str]]:
    """docs/deploy.md's two output tables: (the stack's, a destination region stack's)."""
    import re

    text = DEPLOY_DOC.read_text()
    section = text[text.index("## 6. After: the outputs") :]
    section = section[: section.index("\n## ", 1)]
    home, _, region = section.partition("The stack `CacheWarm-<region>`")

    def names(part: str) -> set[str]:
        return set(re.findall(r"^\| `([A-Za-z0-9]+)` \|", part, re.M))

    return names(home), names(region)


def output_mentions() -> dict[str, set[str]]:
    """Every name a page calls an output ("output `X`", "outputs `X`, `Y` and `Z`"), by page."""
    import re

    found: dict[str, set[str]] = {}
    listed = re.compile(r"\boutputs?\s+((?:`[A-Za-z0-9]+`(?:\s*,\s*|\s+and\s+|\s+or\s+)?)+)", re.I)
    for page in DOC_PAGES:
        for m in listed.finditer(page.read_text()):
            found.setdefault(page.relative_to(REPO).as_posix(), set()).update(
                re.findall(r"`([A-Za-z0-9]+)`", m.group(1))
            )
    return found


def cfn_lint_errors(template: Path, region: str) -> list[str]:
    """cfn-lint's (AWS's resource specification) errors on a template; warnings are not counted."""
    from cfnlint.api import ManualArgs, lint_file

    matches = lint_file(template, config=ManualArgs(regions=[region]))
    return [str(m) for m in matches if m.rule.id.startswith("E")]


def write_artifacts(directory: Path, version: str = "0.1.0") -> tuple[Path, Path]:
    """Small stand-ins for build/dist/cachewarm-dump.tar.gz and cachewarm-agent.tar.gz, shaped like
    `make dist`'s (the construct reads the agent's version from the wheel's name in the bundle)."""
    import io
    import tarfile

    def tarball(path: Path, members: dict[str, bytes]) -> Path:
        with tarfile.open(path, "w:gz") as tar:
            for name, data in members.items():
                info = tarfile.TarInfo(f"./{name}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return path

    dumper = tarball(directory / "cachewarm-dump.tar.gz", {"cachewarm-dump": b"stand-in dumper"})
    from cachewarm_infra.wheelhouse import lock_lines

    wheels = {f"cachewarm-{version}-cp311-cp311-linux_x86_64.whl": b"stand-in wheel"}
    lock = ("\n".join(lock_lines(wheels)) + "\n").encode()
    agent = tarball(directory / "cachewarm-agent.tar.gz", {**wheels, "requirements.txt": lock})
    return dumper, agent


# ---- reading the synthesized template ------------------------------------------------------------


def _statements(synth: Synth) -> list[tuple[str, dict[str, Any]]]:
    """Every IAM statement in the template: (resource logical id, statement)."""
    out = []
    for lid, res in synth.template["Resources"].items():
        props = res.get("Properties", {})
        docs = []
        if res["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            docs.append(props["PolicyDocument"])
        if res["Type"] == "AWS::IAM::Role":
            docs.extend(p["PolicyDocument"] for p in props.get("Policies", []))
        for doc in docs:
            out.extend((lid, st) for st in doc["Statement"])
    return out


def _as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


def _machine(synth: Synth, prefix: str = "CacheWarmerStateMachine") -> tuple[str, dict[str, Any]]:
    """(logical id, resource) of the warm state machine, or of the teardown machine with
    prefix="CacheWarmerTeardownStateMachine"."""
    [found] = [
        (k, v) for k, v in synth.resources("AWS::StepFunctions::StateMachine").items() if k.startswith(prefix)
    ]
    return found


def _definition(machine: dict[str, Any]) -> str:
    definition = machine["Properties"]["DefinitionString"]
    return definition if isinstance(definition, str) else "".join(str(p) for p in definition["Fn::Join"][1])


def _controller_statements(synth: Synth) -> dict[str, dict[str, Any]]:
    policies = synth.resources("AWS::IAM::Policy")
    [(_, policy)] = [(k, v) for k, v in policies.items() if k.startswith("CacheWarmerControllerPolicy")]
    return {st["Sid"]: st for st in policy["Properties"]["PolicyDocument"]["Statement"]}


def _invoke_statements(synth: Synth) -> dict[str, dict[str, Any]]:
    """The InvokeControllerFunctions statement of each state machine, by the machine's logical id."""
    roles = {
        sm["Properties"]["RoleArn"]["Fn::GetAtt"][0]: lid
        for lid, sm in synth.resources("AWS::StepFunctions::StateMachine").items()
    }
    out = {}
    for policy in synth.resources("AWS::IAM::Policy").values():
        for st in policy["Properties"]["PolicyDocument"]["Statement"]:
            if st.get("Sid") == "InvokeControllerFunctions":
                [role] = policy["Properties"]["Roles"]
                out[roles[role["Ref"]]] = st
    return out
