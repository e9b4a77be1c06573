"""The controller Lambdas' code asset carries `cachewarm_controller/` plus the contract package (and
nothing else of the agent), and the contract imports there with the standard library alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cachewarm_infra.lambda_code import contract_dir, stage_lambda_code

from tests.infra.support import Synth

CONTRACT_MODULES = ("cachewarm.contract.status", "cachewarm.contract.inputs", "cachewarm.contract.tags")


def _code_dir(synth: Synth) -> Path:
    """The staged directory CDK zipped for the functions (from the cloud assembly's asset manifest)."""
    manifest = json.loads((synth.outdir / "CacheWarmTest.assets.json").read_text())
    dirs = [
        synth.outdir / f["source"]["path"]
        for f in manifest["files"].values()
        if f["source"].get("packaging") == "zip"
    ]
    [code] = [d for d in dirs if (d / "cachewarm_controller").is_dir()]
    return code


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_asset_holds_the_controller_and_only_the_contract_of_the_agent(synth: Synth) -> None:
    files = _files(_code_dir(synth))
    assert "cachewarm_controller/handlers.py" in files
    assert "cachewarm/contract/status.py" in files
    agent = {f for f in files if f.startswith("cachewarm/")}
    contract = {f"cachewarm/contract/{f}" for f in _files(contract_dir()) if "__pycache__" not in f}
    assert agent == {"cachewarm/__init__.py", *contract}
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]


def test_contract_imports_from_the_asset_with_the_standard_library_only(synth: Synth) -> None:
    code = _code_dir(synth)
    # -I: no PYTHON* variables, no user site; -S: no site-packages (so no installed cachewarm); -B: no
    # __pycache__ written into the staged asset (another test checks it holds none); empty env.
    script = (
        f"import sys; sys.path[:0] = [{str(code)!r}]\n"
        f"import {', '.join(CONTRACT_MODULES)}\n"
        "import cachewarm.contract as c; print(c.__file__)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-B", "-c", script], env={}, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).is_relative_to(code)


def test_staging_copies_both_and_leaves_out_caches(tmp_path: Path) -> None:
    lambdas = tmp_path / "lambdas"
    (lambdas / "cachewarm_controller" / "__pycache__").mkdir(parents=True)
    (lambdas / "cachewarm_controller" / "handlers.py").write_text("x = 1\n")
    (lambdas / "cachewarm_controller" / "__pycache__" / "handlers.cpython-312.pyc").write_bytes(b"")
    (lambdas / "tests").mkdir()
    (lambdas / "tests" / "test_x.py").write_text("")
    staging = tmp_path / "staging"
    (staging / "stale").mkdir(parents=True)  # a previous synth's copy is replaced, not merged
    stage_lambda_code(lambdas, staging)
    files = _files(staging)
    assert "cachewarm_controller/handlers.py" in files
    assert "cachewarm/__init__.py" in files and "cachewarm/contract/inputs.py" in files
    assert not [f for f in files if "__pycache__" in f or f.startswith(("tests/", "stale"))]


def test_staging_refuses_a_second_cachewarm_package(tmp_path: Path) -> None:
    lambdas = tmp_path / "lambdas"
    (lambdas / "cachewarm").mkdir(parents=True)
    with pytest.raises(ValueError, match="may not hold a cachewarm package"):
        stage_lambda_code(lambdas, tmp_path / "staging")
