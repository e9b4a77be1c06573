#!/usr/bin/env python3
"""CDK app entry point (`cdk.json`: `python3 infra/app.py`): the cachewarm stack, checked by cdk-nag."""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# This checkout's cachewarm_infra (ahead of an installed cachewarm-cdk), with the checkout's files: the
# ASL, lambdas/, the SSM documents and `make dist`'s tarballs (StackSettings.from_context with `repo`).
# Another CDK app installs the cachewarm-cdk wheel instead: see infra/examples/my-app/.
sys.path[:0] = [str(HERE)]

from aws_cdk import App, Environment, Validations  # noqa: E402
from cachewarm_infra.stack import CacheWarmStack, StackSettings  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402


def main() -> None:
    app = App()
    settings = StackSettings.from_context(app.node, HERE.parent)
    CacheWarmStack(
        app,
        str(app.node.try_get_context("stackName") or "CacheWarm"),
        settings=settings,
        description="cachewarm: warm a new memcached replica from an existing one",
        env=Environment(
            account=os.environ.get("CDK_DEFAULT_ACCOUNT"), region=os.environ.get("CDK_DEFAULT_REGION")
        ),
    )
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()


if __name__ == "__main__":
    main()
