"""Shared helpers of the infra tests: where the real or stand-in inputs are, the synth result."""

from __future__ import annotations

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
# The replicas' security group the session synth names (context memcachedSecurityGroupIds).
MEMCACHED_SG = "sg-0123456789abcdef0"

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
