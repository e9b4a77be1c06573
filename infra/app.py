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


def main() -> int:
    app = App()
    try:
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
    except (ValueError, FileNotFoundError) as e:
        # A missing context key or artifact: one line naming it (cdk prints it), not a traceback.
        print(f"error: {e}", file=sys.stderr)
        return 1
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
