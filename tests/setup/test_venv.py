""".ci/venv.sh picks the system's Python (never the first python3 on PATH when Debian's exists) and
refuses an old one clearly; every Python step of the Makefile runs in .venv."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_SH = REPO / ".ci" / "venv.sh"
DEBIAN_PY = Path("/usr/bin/python3")


def _run(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, env={**os.environ, **env}, capture_output=True, text=True, timeout=300, check=False
    )


def _has_venv_module(py: Path) -> bool:
    return py.exists() and _run([str(py), "-c", "import ensurepip, venv"]).returncode == 0


@pytest.mark.skipif(not _has_venv_module(DEBIAN_PY), reason="no /usr/bin/python3 with venv/ensurepip here")
def test_venv_comes_from_usr_bin_python3_whatever_is_first_on_path(tmp_path: Path) -> None:
    # A python3 earlier on PATH (pyenv's on the development machines) must not be the one used.
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "python3").write_text("#!/bin/sh\necho shadow python3 was run >&2\nexit 99\n")
    (shadow / "python3").chmod(0o755)
    venv = tmp_path / "venv"
    r = _run([str(VENV_SH), str(venv)], PATH=f"{shadow}:{os.environ['PATH']}")
    assert r.returncode == 0, r.stderr
    cfg = dict(
        line.split(" = ", 1) for line in (venv / "pyvenv.cfg").read_text().splitlines() if " = " in line
    )
    assert cfg["home"] == "/usr/bin"
    assert "shadow" not in r.stderr
    pip = _run([str(venv / "bin" / "python"), "-m", "pip", "--version"])
    assert pip.returncode == 0 and str(venv) in pip.stdout


def _fake_python(tmp_path: Path, version: str, venv_module: bool = True) -> Path:
    """Answers venv.sh's probes (version, version check, venv module) as such an interpreter would."""
    fake = tmp_path / f"python{version}"
    major, minor, _ = (int(x) for x in version.split("."))
    old = int((major, minor) < (3, 11))
    fake.write_text(
        "#!/bin/sh\n"
        f'case "$2" in *print*) echo {version} ;; *ensurepip*) exit {int(not venv_module)} ;; '
        f"*) exit {old} ;; esac\n"
    )
    fake.chmod(0o755)
    return fake


def test_old_python_is_refused_naming_the_version(tmp_path: Path) -> None:
    fake = _fake_python(tmp_path, "3.9.2")
    r = _run([str(VENV_SH), str(tmp_path / "venv")], SYSTEM_PYTHON=str(fake))
    assert r.returncode != 0
    assert "needs Python >= 3.11" in r.stderr and f"{fake} is 3.9.2" in r.stderr
    assert "SYSTEM_PYTHON" in r.stderr
    assert not (tmp_path / "venv").exists()


def test_interpreter_without_venv_module_outside_apt_is_refused(tmp_path: Path) -> None:
    fake = _fake_python(tmp_path, "3.12.1", venv_module=False)
    r = _run([str(VENV_SH), str(tmp_path / "venv")], SYSTEM_PYTHON=str(fake))
    assert r.returncode != 0
    assert f"{fake} (3.12.1) has no venv/ensurepip module" in r.stderr


def test_apt_ensure_is_quiet_when_all_is_installed_and_names_what_it_cannot_install(tmp_path: Path) -> None:
    ok = _run([str(REPO / ".ci" / "apt-ensure.sh"), "bash", "coreutils"])
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "", "")
    # A system without apt-get (only the few tools the script needs are on PATH).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dpkg-query", "grep", "id"):
        path = shutil.which(tool)
        assert path, tool
        (bin_dir / tool).symlink_to(path)
    r = subprocess.run(
        ["/bin/bash", str(REPO / ".ci" / "apt-ensure.sh"), "cachewarm-no-such-package"],
        env={"PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode != 0
    assert "missing packages: cachewarm-no-such-package" in r.stderr and "no apt-get" in r.stderr


def test_missing_interpreter_is_named(tmp_path: Path) -> None:
    r = _run([str(VENV_SH), str(tmp_path / "venv")], SYSTEM_PYTHON=str(tmp_path / "nope"))
    assert r.returncode != 0
    assert f"{tmp_path / 'nope'} does not run" in r.stderr


def _phony_targets() -> list[str]:
    text = (REPO / "Makefile").read_text()
    names = {n for line in re.findall(r"^\.PHONY:(.*)$", text, re.M) for n in line.split()}
    return sorted(names - {"clean", "distclean"})


def test_every_python_step_of_the_makefile_runs_in_the_venv() -> None:
    """`make -n -B` prints every recipe without running any: each python or pip is .venv's."""
    # Not the flags of a `make test` this may run under (-j, -k, jobserver).
    r = _run(["make", "-n", "-B", "-C", str(REPO), *_phony_targets()], MAKEFLAGS="", MAKELEVEL="")
    assert r.returncode == 0, r.stderr
    venv_py = f"{REPO}/.venv/bin/python"
    words = r.stdout.split()
    commands = [
        w
        for before, w in zip(["", *words[:-1]], words, strict=True)
        if re.fullmatch(r"(python|pip)(3(\.\d+)?)?", w.rsplit("/", 1)[-1]) and before != "-m"
    ]
    assert commands, r.stdout
    assert set(commands) == {venv_py}, r.stdout
