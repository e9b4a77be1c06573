"""The controller Lambdas' code asset: the Lambda code directory plus the contract package it imports.

The handlers import `cachewarm.contract` (standard library only), so the asset holds
`cachewarm_controller/` and `cachewarm/__init__.py` + `cachewarm/contract/` — nothing else of the
agent. The contract is the one this package carries (`cachewarm_infra/contract/`: in a source
checkout a link to `agent/cachewarm/contract/`, in the wheel a copy of it), so the construct, its
Lambdas and the agent bundle it deploys were all built from one tree. Both are copied into one staging
directory at synth time; CDK hashes and zips that directory.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from aws_cdk import Names, Stage
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

import cachewarm_infra.contract

# Never deployed: caches and the code directory's own tests.
EXCLUDE = ("__pycache__", "*.pyc", "tests", ".pytest_cache")
# The asset's `cachewarm/__init__.py`: the handlers import only `cachewarm.contract` below it.
PACKAGE_INIT = '"""cachewarm: only its contract package, as the controller Lambdas carry it."""\n'


def contract_dir() -> Path:
    """The contract package this construct carries (and imports itself)."""
    return Path(cachewarm_infra.contract.__file__).parent


def stage_lambda_code(lambdas_dir: Path, staging: Path, contract: Path | None = None) -> Path:
    """Fill `staging` (emptied first) with `lambdas_dir`'s content, `cachewarm/__init__.py` and
    `cachewarm/contract/`; return it."""
    contract = contract or contract_dir()
    ignore = shutil.ignore_patterns(*EXCLUDE)
    if staging.exists():
        shutil.rmtree(staging)
    shutil.copytree(lambdas_dir, staging, ignore=ignore)
    package = staging / "cachewarm"
    if package.exists():
        raise ValueError(
            f"{lambdas_dir}/cachewarm: the Lambda code directory may not hold a cachewarm package"
        )
    package.mkdir()
    (package / "__init__.py").write_text(PACKAGE_INIT, encoding="utf-8")
    shutil.copytree(contract, package / "contract", ignore=ignore)
    return staging


def lambda_code(scope: Construct, lambdas_dir: Path) -> lambda_.Code:
    """One code asset for every controller function, staged under the cloud assembly directory (so
    it goes away with cdk.out) in a directory named after `scope` (two warmers in one app differ)."""
    stage = Stage.of(scope)
    if stage is None:
        raise ValueError(f"{scope.node.path}: the CacheWarmer must be inside an App or Stage")
    staging = Path(stage.asset_outdir) / f"lambda-code-{Names.unique_id(scope)}"
    return lambda_.Code.from_asset(str(stage_lambda_code(lambdas_dir, staging)))
