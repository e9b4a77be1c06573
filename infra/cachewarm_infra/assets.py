"""What the construct deploys besides its own code — the state machines' ASL, the SSM documents, the
controller Lambdas' code, the dumper tarball and the agent bundle — as data of the installed package.

The `cachewarm-cdk` wheel (built from `infra/`, see `infra/setup.py`) carries them under
`cachewarm_infra/assets/` (the install script lives in `install/` beside the modules, the contract
package in `contract/`). `CacheWarmerProps` defaults to these files; a source checkout has no
`assets/` (the repository's own app passes the repository's paths), and every path can be overridden.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
ASSETS_DIR = PACKAGE_DIR / "assets"

# Inside ASSETS_DIR (infra/setup.py writes the same names).
WARM_ASL = "statemachine/warm.asl.json"
TEARDOWN_ASL = "statemachine/teardown.asl.json"
SSM_DOCUMENTS = "ssm_documents"
LAMBDAS = "lambdas"
DUMPER_TARBALL = "dist/cachewarm-dump.tar.gz"
AGENT_BUNDLE = "dist/cachewarm-agent.tar.gz"
# The one installer (populator user data and the install-agent document), inside the package itself.
INSTALL_SCRIPT = PACKAGE_DIR / "install" / "install-agent.sh"


def packaged(relative: str) -> Path:
    """The packaged file or directory `relative`, or an error saying how to get or replace it."""
    path = ASSETS_DIR / relative
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: not in this copy of cachewarm_infra. The cachewarm-cdk wheel carries it "
            "(`make dist` builds build/dist/cachewarm_cdk-*.whl); from a source checkout, pass the "
            "path in CacheWarmerProps (infra/app.py passes the repository's)."
        )
    return path


def default(relative: str) -> Callable[[], Path]:
    """A dataclass default_factory for a packaged path (evaluated only when the field is not given)."""
    return lambda: packaged(relative)
