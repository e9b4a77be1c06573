"""The real clients tests/placement checks against (`make test` installs them: Makefile APT_DEV). A
missing one fails its tests — a placement nobody checked must not pass quietly — unless
CACHEWARM_CLIENTS_MISSING=skip (then they are skipped, and say so)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

DEBIAN_PYTHON = "/usr/bin/python3"


def has_nutcracker() -> bool:
    return bool(shutil.which("nutcracker")) or Path("/usr/sbin/nutcracker").exists()


def has_pylibmc() -> bool:
    if not Path(DEBIAN_PYTHON).exists():
        return False
    return subprocess.run([DEBIAN_PYTHON, "-c", "import pylibmc"], capture_output=True).returncode == 0


def require(ok: bool, what: str) -> None:
    """Fail (or skip, with CACHEWARM_CLIENTS_MISSING=skip) a test whose client is missing."""
    if ok:
        return
    if os.environ.get("CACHEWARM_CLIENTS_MISSING") == "skip":
        pytest.skip(f"{what} is not installed")
    pytest.fail(f"{what} is not installed (make deps-apt installs it; CACHEWARM_CLIENTS_MISSING=skip skips)")


@pytest.fixture
def nutcracker_installed() -> None:
    require(has_nutcracker(), "nutcracker (apt-get install nutcracker)")


@pytest.fixture
def pylibmc_installed() -> None:
    require(has_pylibmc(), "Debian's python3-pylibmc (apt-get install python3-pylibmc)")
