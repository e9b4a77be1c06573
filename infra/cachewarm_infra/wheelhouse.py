"""The agent bundle's lock: `requirements.txt` naming every wheel of the bundle with its SHA-256, so
install-agent.sh installs with `pip --no-index --require-hashes` — nothing from a package index on a
production node, no dependency confusion, nothing the bundle did not carry.

`make dist` runs `python -m cachewarm_infra.wheelhouse build/dist/agent` after collecting the wheels;
the construct refuses at synth a bundle without a complete lock (`check_bundle`).
"""

from __future__ import annotations

import hashlib
import re
import sys
import tarfile
from pathlib import Path

LOCK = "requirements.txt"
# PEP 427: {distribution}-{version}(-{build})?-{python}-{abi}-{platform}.whl
_WHEEL = re.compile(
    r"^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[A-Za-z0-9_.!+]+)(-[0-9][^-]*)?-[^-]+-[^-]+-[^-]+\.whl$"
)
_LINE = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)==(?P<version>\S+) --hash=sha256:(?P<sha>[0-9a-f]{64})$")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_lines(wheels: dict[str, bytes]) -> list[str]:
    """`name==version --hash=sha256:…` for every wheel (file name -> content), sorted as lines (not by
    file name: `jsonschema-…` and `jsonschema_specifications-…` sort differently the two ways)."""
    lines = []
    for file_name, data in wheels.items():
        m = _WHEEL.fullmatch(file_name)
        if not m:
            raise ValueError(f"{file_name}: not a wheel file name")
        lines.append(f"{_normal(m['name'])}=={m['version']} --hash=sha256:{hashlib.sha256(data).hexdigest()}")
    return sorted(lines)


def lock(directory: Path) -> Path:
    wheels = {p.name: p.read_bytes() for p in sorted(directory.glob("*.whl"))}
    if not wheels:
        raise ValueError(f"{directory}: no wheels to lock")
    path = directory / LOCK
    path.write_text("\n".join(lock_lines(wheels)) + "\n")
    return path


def check_bundle(bundle: Path) -> None:
    """The bundle carries a lock that names every wheel in it with its exact SHA-256 (and nothing
    else): what install-agent.sh requires. ValueError naming the problem otherwise."""
    with tarfile.open(bundle, "r:gz") as tar:
        members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
        if LOCK not in members:
            raise ValueError(
                f"{bundle}: no {LOCK}; the agent installs with --no-index --require-hashes "
                "(build it with `make dist`)"
            )
        lock_file = tar.extractfile(members[LOCK])
        assert lock_file is not None
        lines = [ln.strip() for ln in lock_file.read().decode().splitlines() if ln.strip()]
        wheels = {}
        for name, m in members.items():
            if name.endswith(".whl"):
                f = tar.extractfile(m)
                assert f is not None
                wheels[name] = f.read()
    bad = [ln for ln in lines if not _LINE.fullmatch(ln)]
    if bad:
        raise ValueError(f"{bundle}: {LOCK} lines without a pinned version and sha256 hash: {bad[:3]}")
    if sorted(lines) != lock_lines(wheels):
        raise ValueError(f"{bundle}: {LOCK} does not name exactly the bundle's wheels with their hashes")


if __name__ == "__main__":
    print(lock(Path(sys.argv[1])))
