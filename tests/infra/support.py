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
    agent = tarball(
        directory / "cachewarm-agent.tar.gz",
        {f"cachewarm-{version}-cp311-cp311-linux_x86_64.whl": b"stand-in wheel"},
    )
    return dumper, agent
