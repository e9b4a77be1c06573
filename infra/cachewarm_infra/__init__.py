"""CDK code for cachewarm: the reusable `CacheWarmer` construct and the stack that deploys it.

Installed as the `cachewarm-cdk` wheel (infra/pyproject.toml), it carries the files it deploys
(`cachewarm_infra.assets`); `CacheWarmer(scope, id, CacheWarmerProps(vpc=...))` needs nothing else.
"""

from cachewarm_infra.asl import AslTask, discover_function_substitutions
from cachewarm_infra.construct import CacheWarmer, CacheWarmerProps

__all__ = ["AslTask", "CacheWarmer", "CacheWarmerProps", "discover_function_substitutions"]
