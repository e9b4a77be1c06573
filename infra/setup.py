"""Build hook of the `cachewarm-cdk` wheel (metadata: infra/pyproject.toml).

The construct deploys files that live beside infra/ in this repository; the wheel carries copies under
`cachewarm_infra/assets/` (names: cachewarm_infra/assets.py), so an installed construct never reads
the repository:

- statemachine/warm.asl.json, teardown.asl.json   <- ../statemachine/
- ssm_documents/*.json                            <- ssm_documents/
- lambdas/cachewarm_controller/                   <- ../lambdas/cachewarm_controller/
- dist/cachewarm-dump.tar.gz, cachewarm-agent.tar.gz <- $CACHEWARM_DIST_DIR, default ../build/dist
  (`make dist` builds them)

The version is agent/cachewarm/__init__.py's (one number for the agent and the construct).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

INFRA = Path(__file__).resolve().parent
REPO = INFRA.parent
PACKAGE = "cachewarm_infra"
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "tests", ".pytest_cache")
ARTIFACTS = ("cachewarm-dump.tar.gz", "cachewarm-agent.tar.gz")


def version() -> str:
    text = (REPO / "agent" / "cachewarm" / "__init__.py").read_text(encoding="utf-8")
    m = re.search(r'^__version__ = "([^"]+)"$', text, re.M)
    if not m:
        raise SystemExit("agent/cachewarm/__init__.py: no __version__ line")
    return m.group(1)


def stage_assets(assets: Path) -> None:
    """Fill `assets` (emptied first) with the files the construct deploys."""
    dist = Path(os.environ.get("CACHEWARM_DIST_DIR") or REPO / "build" / "dist")
    missing = [dist / a for a in ARTIFACTS if not (dist / a).is_file()]
    if missing:
        raise SystemExit(
            f"cachewarm-cdk: {', '.join(map(str, missing))} missing: run `make dist` "
            "(or set CACHEWARM_DIST_DIR to a directory holding both tarballs)"
        )
    sources = [REPO / "statemachine", INFRA / "ssm_documents", REPO / "lambdas" / "cachewarm_controller"]
    for src in sources:
        if not src.is_dir():
            raise SystemExit(f"cachewarm-cdk: {src} not found: build the wheel from a cachewarm checkout")
    if assets.exists():
        shutil.rmtree(assets)
    (assets / "statemachine").mkdir(parents=True)
    for name in ("warm.asl.json", "teardown.asl.json"):
        shutil.copyfile(REPO / "statemachine" / name, assets / "statemachine" / name)
    shutil.copytree(INFRA / "ssm_documents", assets / "ssm_documents", ignore=IGNORE)
    shutil.copytree(sources[2], assets / "lambdas" / "cachewarm_controller", ignore=IGNORE)
    (assets / "dist").mkdir()
    for name in ARTIFACTS:
        shutil.copyfile(dist / name, assets / "dist" / name)


class BuildWithAssets(build_py):
    """build_py, starting from an empty package directory (no file a previous build left behind
    reaches the wheel), then the assets."""

    def run(self) -> None:
        shutil.rmtree(Path(self.build_lib) / PACKAGE, ignore_errors=True)
        super().run()
        if not self.dry_run:
            stage_assets(Path(self.build_lib) / PACKAGE / "assets")


(INFRA / "build").mkdir(exist_ok=True)
setup(
    version=version(),
    cmdclass={"build_py": BuildWithAssets},
    # Build files under infra/build/ (git-ignored), not an egg-info beside the package: on a PYTHONPATH
    # that holds infra/ (the tests'), it would pass for an installed cachewarm-cdk.
    options={"egg_info": {"egg_base": str(INFRA / "build")}},
)
