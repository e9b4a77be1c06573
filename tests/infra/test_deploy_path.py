"""The deploy path as a platform team takes it, from what `make dist` built (`make test` builds it
first): the agent bundle's lock, and every template the CLI synthesizes checked by cfn-lint — AWS's
resource specification, not a model of ours — with no error. (The example app's template:
test_installed_package.py; the synths: test_cli_synth.py.)"""

from __future__ import annotations

import tarfile
import tomllib
from pathlib import Path

import pytest

from tests.infra.support import FAR_REGION, REPO, CliSynth, RealDist, cfn_lint_errors


def test_the_real_bundles_lock_passes_the_check_the_stack_makes(real_dist: RealDist) -> None:
    """`make dist`'s bundle, as the construct checks it at synth (`wheelhouse.check_bundle`): every
    wheel locked with its SHA-256, every runtime dependency of pyproject.toml there at its pin. It holds
    jsonschema and jsonschema_specifications, whose lines and file names sort apart: the case that
    made the old check refuse every real bundle while the stand-in bundles passed."""
    from cachewarm_infra.wheelhouse import LOCK, check_bundle

    check_bundle(real_dist.agent)
    with tarfile.open(real_dist.agent) as tar:
        names = sorted(Path(m.name).name for m in tar.getmembers() if m.name.endswith(".whl"))
        lock_file = tar.extractfile(f"./{LOCK}")
        assert lock_file is not None
        lines = [ln for ln in lock_file.read().decode().splitlines() if ln.strip()]
    pins = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    locked = {ln.split(" ")[0] for ln in lines}
    for pin in pins:
        name, version = pin.split("==")
        assert f"{name.lower().replace('_', '-')}=={version}" in locked, pin
    assert any(n.startswith("jsonschema_specifications-") for n in names)
    by_file_name = [next(ln for ln in lines if _wheel_of(ln, names) == n) for n in names]
    assert by_file_name != sorted(lines), "this bundle no longer exercises the ordering case"


def _wheel_of(line: str, names: list[str]) -> str:
    name, version = line.split(" ")[0].split("==")
    [found] = [n for n in names if n.lower().replace("_", "-").startswith(f"{name}-{version}-")]
    return found


@pytest.mark.parametrize(
    ("synth", "stack", "region"),
    [
        ("cli_single", "CacheWarm", "us-east-1"),
        ("cli_two_regions", "CacheWarm", "us-east-1"),
        ("cli_two_regions", f"CacheWarm-{FAR_REGION}", FAR_REGION),
    ],
)
def test_every_synthesized_template_passes_cfn_lint(
    synth: str, stack: str, region: str, request: pytest.FixtureRequest
) -> None:
    synthesized: CliSynth = request.getfixturevalue(synth)
    assert cfn_lint_errors(synthesized.outdir / f"{stack}.template.json", region) == []
