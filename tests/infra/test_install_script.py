"""infra/cachewarm_infra/install/install-agent.sh — the one installer behind the populator user data
and the install-agent document — run on this machine against a stand-in S3 (moto's server mode on
127.0.0.1) into a temporary root: it installs the agent and the dumper with their checksums checked,
refuses a bundle whose checksum differs, does nothing the second time, and moves to a new version
without touching the old one's files. No real system path is written."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "infra" / "cachewarm_infra" / "install" / "install-agent.sh"
BUCKET = "cdk-assets-test-bucket"


def wheel(version: str) -> tuple[str, bytes]:
    """A minimal cachewarm wheel whose console script prints what `cachewarm --version` prints."""
    files = {
        "cachewarm/__init__.py": (
            f"__version__ = {version!r}\n\ndef main():\n    print(f'cachewarm, version {{__version__}}')\n"
        ),
        f"cachewarm-{version}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: cachewarm\nVersion: {version}\n"
        ),
        f"cachewarm-{version}.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
        f"cachewarm-{version}.dist-info/entry_points.txt": "[console_scripts]\ncachewarm = cachewarm:main\n",
    }
    record = f"cachewarm-{version}.dist-info/RECORD"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
        z.writestr(record, "".join(f"{n},,\n" for n in [*files, record]))
    return f"cachewarm-{version}-py3-none-any.whl", buf.getvalue()


def tarball(members: dict[str, bytes], mode: int = 0o644) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def agent_bundle(version: str, lock: bytes | None = None) -> bytes:
    """What `make dist` ships: the wheel, its dependencies (none here), the lock of their hashes."""
    from cachewarm_infra.wheelhouse import lock_lines

    name, data = wheel(version)
    if lock is None:
        lock = ("\n".join(lock_lines({name: data})) + "\n").encode()
    return tarball({name: data, "requirements.txt": lock})


DUMPER = tarball({"cachewarm-dump": b"#!/bin/sh\necho cachewarm-dump stand-in\n"}, mode=0o755)


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    # Port 0: the server binds a free port itself (a port picked first could be taken meanwhile).
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def env(s3_server: str, tmp_path: Path) -> dict[str, str]:
    if shutil.which("aws") is None:
        pytest.skip("the aws CLI is not installed here (the script downloads with `aws s3 cp`)")
    creds = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    s3 = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1", **_lower(creds))
    if BUCKET not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=BUCKET)
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path / "home"),  # tools on PATH (pyenv shims) may write their own dot files
        "TMPDIR": str(tmp_path),
        "AWS_ENDPOINT_URL": s3_server,
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "CACHEWARM_ROOT": str(tmp_path / "opt" / "cachewarm"),
        "CACHEWARM_BIN_DIR": str(tmp_path / "usr-local-bin"),
        "CACHEWARM_PYTHON": sys.executable,
        "PIP_NO_INDEX": "1",
        **creds,
    }


def _lower(creds: dict[str, str]) -> dict[str, Any]:
    return {
        "aws_access_key_id": creds["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": creds["AWS_SECRET_ACCESS_KEY"],
    }


def upload(env: dict[str, str], key: str, body: bytes) -> tuple[str, str]:
    boto3.client(
        "s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1", **_lower(env)
    ).put_object(Bucket=BUCKET, Key=key, Body=body)
    return f"s3://{BUCKET}/{key}", hashlib.sha256(body).hexdigest()


def install(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )


def version_of(env: dict[str, str]) -> str:
    out = subprocess.run(
        [str(Path(env["CACHEWARM_BIN_DIR"]) / "cachewarm"), "--version"],
        env=env,  # not this test's PYTHONPATH: the checkout's cachewarm would shadow the installed one
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_installs_checks_and_is_idempotent(env: dict[str, str], tmp_path: Path) -> None:
    agent_url, agent_sha = upload(env, "a1.tar.gz", agent_bundle("1.2.3"))
    dumper_url, dumper_sha = upload(env, "d1.tar.gz", DUMPER)
    args = ["--agent-bundle", agent_url, "--agent-sha256", agent_sha, "--version", "1.2.3"]
    args += ["--dumper-tarball", dumper_url, "--dumper-sha256", dumper_sha]
    first = install(env, *args)
    assert first.returncode == 0, first.stdout + first.stderr
    root = Path(env["CACHEWARM_ROOT"])
    assert version_of(env) == "cachewarm, version 1.2.3"
    assert os.access(root / "bin" / "cachewarm-dump", os.X_OK)
    assert (root / "agent.installed").read_text().split() == ["1.2.3", agent_sha]
    # Again, with the artifacts gone from the bucket: nothing is downloaded, nothing changes.
    s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1", **_lower(env))
    for key in ("a1.tar.gz", "d1.tar.gz"):
        s3.delete_object(Bucket=BUCKET, Key=key)
    venv = (root / "venv").resolve()
    again = install(env, *args)
    assert again.returncode == 0, again.stderr
    assert "agent 1.2.3 already installed" in again.stdout and "dumper already installed" in again.stdout
    assert (root / "venv").resolve() == venv
    # Nothing outside the temporary root and bin directory was written.
    assert {p.name for p in tmp_path.iterdir()} <= {"opt", "usr-local-bin", "home"}


def test_a_new_version_gets_its_own_venv_and_a_bad_checksum_installs_nothing(env: dict[str, str]) -> None:
    url1, sha1 = upload(env, "b1.tar.gz", agent_bundle("2.0.0"))
    assert install(env, "--agent-bundle", url1, "--agent-sha256", sha1, "--version", "2.0.0").returncode == 0
    root = Path(env["CACHEWARM_ROOT"])
    old = (root / "venv").resolve()
    url2, sha2 = upload(env, "b2.tar.gz", agent_bundle("2.1.0"))
    bad = install(env, "--agent-bundle", url2, "--agent-sha256", "0" * 64, "--version", "2.1.0")
    assert bad.returncode == 4 and "checksum mismatch" in bad.stderr
    assert version_of(env) == "cachewarm, version 2.0.0"
    wrong = install(env, "--agent-bundle", url2, "--agent-sha256", sha2, "--version", "2.2.0")
    assert wrong.returncode != 0 and version_of(env) == "cachewarm, version 2.0.0"
    new = install(env, "--agent-bundle", url2, "--agent-sha256", sha2, "--version", "2.1.0")
    assert new.returncode == 0, new.stderr
    assert version_of(env) == "cachewarm, version 2.1.0"
    assert (root / "venv").resolve() != old and old.is_dir()  # a running agent keeps its files


def test_usage_errors() -> None:
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--version", "1"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2 and "required" in proc.stderr


def test_no_index_and_every_wheel_by_its_hash(env: dict[str, str]) -> None:
    """A bundle without a hashed lock, or whose wheel differs from its locked hash, installs nothing;
    pip is never pointed at an index (PIP_NO_INDEX is lifted here to show the script sets it itself)."""
    env = {k: v for k, v in env.items() if k != "PIP_NO_INDEX"}
    unlocked, sha = upload(env, "u1.tar.gz", agent_bundle("3.0.0", lock=b"cachewarm==3.0.0\n"))
    proc = install(env, "--agent-bundle", unlocked, "--agent-sha256", sha, "--version", "3.0.0")
    assert proc.returncode == 7 and "no hashed requirements.txt" in proc.stderr, proc.stderr
    other = f"cachewarm==3.0.0 --hash=sha256:{'0' * 64}\n".encode()
    forged, sha = upload(env, "f1.tar.gz", agent_bundle("3.0.0", lock=other))
    proc = install(env, "--agent-bundle", forged, "--agent-sha256", sha, "--version", "3.0.0")
    assert proc.returncode == 8 and "does not match its hash" in proc.stderr, proc.stderr
    assert not (Path(env["CACHEWARM_BIN_DIR"]) / "cachewarm").exists()
    script = SCRIPT.read_text()
    assert "--no-index --require-hashes" in script and 'pip" install' in script


def test_the_construct_refuses_a_bundle_without_a_complete_lock(tmp_path: Path) -> None:
    from cachewarm_infra.wheelhouse import check_bundle

    name, data = wheel("4.0.0")
    for lock, problem in [
        (None, "no requirements.txt"),
        (b"cachewarm==4.0.0\n", "without a pinned version and sha256"),
        (f"cachewarm==4.0.0 --hash=sha256:{'1' * 64}\n".encode(), "does not name exactly"),
    ]:
        path = tmp_path / "bundle.tar.gz"
        members = {name: data} if lock is None else {name: data, "requirements.txt": lock}
        path.write_bytes(tarball(members))
        with pytest.raises(ValueError, match=problem):
            check_bundle(path)
    path.write_bytes(agent_bundle("4.0.0"))
    check_bundle(path)


def test_the_lock_check_holds_for_wheels_whose_names_and_lines_sort_apart(tmp_path: Path) -> None:
    """`jsonschema-4.26.0-…whl` sorts before `jsonschema_specifications-…whl` by file name, while its
    line `jsonschema==…` sorts after `jsonschema-specifications==…`: the check compares lines as lines."""
    from cachewarm_infra.wheelhouse import check_bundle, lock

    wheels = {
        "jsonschema-4.26.0-py3-none-any.whl": b"one",
        "jsonschema_specifications-2025.9.1-py3-none-any.whl": b"two",
        "cachewarm-4.0.0-py3-none-any.whl": b"three",
    }
    src = tmp_path / "agent"
    src.mkdir()
    for name, data in wheels.items():
        (src / name).write_bytes(data)
    lock(src)
    members = {p.name: p.read_bytes() for p in src.iterdir()}
    path = tmp_path / "bundle.tar.gz"
    path.write_bytes(tarball(members))
    check_bundle(path)
