"""pyproject.toml: one version number, and each dependency group holds exactly what its code imports."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import cachewarm

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

# Distribution -> the top-level modules it provides (where the names differ or there are several).
PROVIDES = {
    "boto3": {"boto3", "botocore"},
    "aws-lambda-powertools": {"aws_lambda_powertools"},
    "aws-cdk-lib": {"aws_cdk"},
    "cdk-nag": {"cdk_nag"},
    "pyyaml": {"yaml"},
}


def _dist(req: str) -> str:
    return re.split(r"[\[=<>!~; ]", req, maxsplit=1)[0].lower()


def _modules(reqs: list[str]) -> set[str]:
    out: set[str] = set()
    for r in reqs:
        d = _dist(r)
        out |= PROVIDES.get(d, {d.replace("-", "_")})
    return out


def _third_party_imports(root: Path, own: set[str]) -> set[str]:
    """Top-level names of every absolute import in `root` (a file, or the .py files under a directory;
    imports inside functions too), less the standard library and the project's own packages."""
    found: set[str] = set()
    for path in [root] if root.is_file() else root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m not in own}


def test_one_version_number() -> None:
    project = PROJECT["project"]
    assert "version" not in project, "the version lives in agent/cachewarm/__init__.py only"
    assert "version" in project["dynamic"]
    assert PROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "cachewarm.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+([ab]|rc)?\d*", cachewarm.__version__)


def test_runtime_dependencies_are_what_the_agent_imports() -> None:
    """`make demo` and the agent bundle install these and nothing else: each one imported, none missing."""
    imported = _third_party_imports(REPO / "agent" / "cachewarm", {"cachewarm"})
    assert _modules(PROJECT["project"]["dependencies"]) == imported


def test_extras_cover_what_lambdas_and_infra_import() -> None:
    runtime = _modules(PROJECT["project"]["dependencies"])
    extras = PROJECT["project"]["optional-dependencies"]
    lambdas = _third_party_imports(REPO / "lambdas", {"cachewarm", "cachewarm_controller"})
    assert lambdas <= _modules(extras["lambdas"]) | runtime
    own = {"cachewarm", "cachewarm_infra"}
    infra = _third_party_imports(REPO / "infra" / "cachewarm_infra", own)
    infra |= _third_party_imports(REPO / "infra" / "app.py", own)
    assert infra <= _modules(extras["infra"])
    assert "cachewarm[lambdas,infra]" in extras["dev"]


# ---- the construct's distribution (infra/pyproject.toml: cachewarm-cdk) ---------------------------

CONSTRUCT = tomllib.loads((REPO / "infra" / "pyproject.toml").read_text())


def test_construct_requires_what_it_imports_and_nothing_else() -> None:
    """cachewarm-cdk's requirements are what cachewarm_infra imports (its contract is its own copy: it
    needs no `cachewarm`), and the infra extra pins them for the checkout's app (+ cdk-nag, which
    infra/app.py runs)."""
    imported = _third_party_imports(REPO / "infra" / "cachewarm_infra", {"cachewarm_infra"})
    assert "cachewarm" not in imported
    requires = CONSTRUCT["project"]["dependencies"]
    assert _modules(requires) == imported
    pinned = {_dist(r) for r in PROJECT["project"]["optional-dependencies"]["infra"]}
    assert {_dist(r) for r in requires} <= pinned


def test_construct_has_the_agents_version_and_contract() -> None:
    project = CONSTRUCT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert "agent/cachewarm/__init__.py" in (REPO / "infra" / "setup.py").read_text()
    link = REPO / "infra" / "cachewarm_infra" / "contract"
    assert link.is_symlink() and link.resolve() == (REPO / "agent" / "cachewarm" / "contract").resolve()
    assert "cachewarm_infra.contract" in CONSTRUCT["tool"]["setuptools"]["packages"]
