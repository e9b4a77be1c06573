"""Fixtures of the real-device tests: a shared volume on loop devices (skipped, with the reason, where
loop devices, XFS or root are missing) and a local S3 stand-in (moto's server mode) that the agents,
run as real subprocesses, reach through `AWS_ENDPOINT_URL_S3`."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from cachewarm.testing.shared_volume import LoopVolume, unavailable_reason

BUCKET = "cachewarm-status-test"
REGION = "us-east-1"


@pytest.fixture(scope="session")
def loop_devices_usable() -> None:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"real shared volume tests skipped: {reason}")


@pytest.fixture
def shared_volume(loop_devices_usable: None, tmp_path: Path) -> Iterator[Callable[..., LoopVolume]]:
    """Factory: `shared_volume(attachments=2)` -> a LoopVolume; all are torn down at teardown."""
    made: list[LoopVolume] = []

    def make(attachments: int = 2) -> LoopVolume:
        vol = LoopVolume.create(tmp_path / f"volume-{len(made)}.img", attachments)
        made.append(vol)
        return vol

    yield make
    errors = []
    for vol in made:
        devices = list(vol.devices)
        try:
            vol.close()
        except RuntimeError as e:
            errors.append(str(e))
        for dev in devices:  # detached, and writable for whoever attaches it next
            if subprocess.run(["losetup", dev], capture_output=True, check=False).returncode == 0:
                errors.append(f"{dev} is still attached")
            ro = subprocess.run(["blockdev", "--getro", dev], capture_output=True, text=True, check=False)
            if ro.stdout.strip() != "0":
                errors.append(f"{dev} is left read-only")
        if vol.image.exists():
            errors.append(f"{vol.image} is left")
    assert not errors, errors


@dataclass(frozen=True)
class LocalS3:
    url: str
    client: Any

    def env(self) -> dict[str, str]:
        """The environment an agent subprocess needs to reach it (boto3 reads AWS_ENDPOINT_URL_S3)."""
        keep = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        return keep | {
            "AWS_ENDPOINT_URL_S3": self.url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
        }


@pytest.fixture(scope="module")
def local_s3() -> Iterator[LocalS3]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        url = f"http://{host}:{port}"
        client = boto3.client(
            "s3",
            endpoint_url=url,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        client.create_bucket(Bucket=BUCKET)
        yield LocalS3(url, client)
    finally:
        server.stop()
