"""CDK code for cachewarm: the reusable `CacheWarmer` construct and the stack that deploys it.

Installed as the `cachewarm-cdk` wheel (infra/pyproject.toml), it carries the files it deploys
(`cachewarm_infra.assets`); `CacheWarmer(scope, id, CacheWarmerProps(vpc=..., destination_security_groups=...,
source_security_groups=...))` needs nothing else. `add_outputs` gives a stack the outputs the docs name;
`CacheWarmerRegion` deploys a cross-region warm's populator resources in a stack of that region.
"""

from cachewarm_infra.asl import AslTask, discover_function_substitutions
from cachewarm_infra.construct import CacheWarmer, CacheWarmerProps
from cachewarm_infra.outputs import add_outputs
from cachewarm_infra.region import CacheWarmerRegion

__all__ = [
    "AslTask",
    "CacheWarmer",
    "CacheWarmerProps",
    "CacheWarmerRegion",
    "add_outputs",
    "discover_function_substitutions",
]
