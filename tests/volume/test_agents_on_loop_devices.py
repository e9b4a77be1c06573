"""The real `cachewarm agent dump` and `cachewarm agent populate`, as subprocesses, through a real
shared volume: XFS on two loop devices over one image file, the writer on one, the `ro,norecovery`
reader on the other, a real memcached on each side and the status objects in a local S3 stand-in."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from cachewarm.testing.populating import fetch
from cachewarm.testing.shared_volume import TEST_READER_OPTIONS

from tests.dumper.dumputil import Item, load
from tests.volume.conftest import BUCKET, REGION, LocalS3

REPO = Path(__file__).resolve().parents[2]
WARM, NODE = "warm-1", "i-0123456789abcdef0"
# The dump agent runs on the source node, the populate agent on its populator: each writes its
# status object under its own instance's ARN (what IMDS would give it).
POPULATOR = "i-0fedcba9876543210"
WRITER = {"dump": NODE, "populate": POPULATOR}


def arn(instance_id: str) -> str:
    return f"arn:aws:ec2:{REGION}:123456789012:instance/{instance_id}"


def agent(role: str, *args: str, s3: LocalS3, dumper: Path) -> subprocess.Popen[str]:
    env = s3.env() | {
        "PYTHONPATH": os.pathsep.join([str(REPO / "agent"), os.environ.get("PYTHONPATH", "")]),
        "CACHEWARM_DUMP": str(dumper),
        "CACHEWARM_INSTANCE_ARN": arn(WRITER[role]),
    }
    argv = [sys.executable, "-m", "cachewarm", "agent", role]
    argv += ["--warm-id", WARM, "--node-id", NODE, "--status-bucket", BUCKET, "--status-prefix", "warms"]
    argv += ["--heartbeat-seconds", "0.5", "--region", REGION, "--device-timeout", "10", *args]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], what: str) -> tuple[str, str]:
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    assert proc.returncode == 0, f"{what} exited {proc.returncode}:\n{err}"
    return out, err


def status(s3: LocalS3, role: str) -> dict[str, Any]:
    key = f"warms/{WARM}/{role}/{NODE}/{arn(WRITER[role])}.json"
    return json.loads(s3.client.get_object(Bucket=BUCKET, Key=key)["Body"].read())


def mount_options(at: Path) -> set[str]:
    out = subprocess.run(
        ["findmnt", "--noheadings", "--raw", "--output", "OPTIONS", "--mountpoint", str(at)],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(out.stdout.strip().split(","))


def test_agents_warm_through_a_real_shared_volume(
    shared_volume: Any, local_s3: LocalS3, memcached: Any, dumper_bin: Path, tmp_path: Path
) -> None:
    vol = shared_volume(2)
    writer_dev, reader_dev = vol.devices
    writer_at, reader_at = tmp_path / "writer", tmp_path / "reader"
    vol.mounts += [writer_at, reader_at]  # the agents mount them; the teardown unmounts them
    rng = random.Random(13)
    items = [
        Item(b"lv:%d" % i, rng.randbytes(rng.choice([0, 20, 700, 5000, 40_000])), rng.randrange(2**32))
        for i in range(20_000)
    ]
    src, dst = memcached(memory_mb=256), memcached(memory_mb=256)
    load(src, items)

    # Both start together, as the controller starts them: the populator waits for the source's XFS.
    populate = agent(
        "populate",
        *("--device", reader_dev, "--mount", str(reader_at), "--to", dst.address, "--source", src.address),
        *("--state-dir", str(tmp_path / "state"), "--source-timeout", "120"),
        *("--mount-options", TEST_READER_OPTIONS),
        s3=local_s3,
        dumper=dumper_bin,
    )
    dump = agent(
        "dump",
        *("--device", writer_dev, "--mount", str(writer_at), "--memcached", src.address, "--threads", "2"),
        s3=local_s3,
        dumper=dumper_bin,
    )
    _, dump_err = finish(dump, "agent dump")
    out, _ = finish(populate, "agent populate")

    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["records"] == summary["stored"] == len(items), summary
    for role in ("dump", "populate"):
        body = status(local_s3, role)
        assert body["state"] == "done" and body["progress"]["items"] == len(items), (role, body)
    got = fetch(dst, [it.key for it in items])
    wrong = [
        k.key for k in items if (g := got.get(k.key)) is None or (g.value, g.flags) != (k.value, k.flags)
    ]
    assert not wrong, f"{len(wrong)} items missing or different, e.g. {wrong[:3]}"

    # The writer made its files visible (freeze/thaw), the reader never could write.
    assert "made files visible" in dump_err, dump_err
    assert {"rw"} <= mount_options(writer_at)
    assert {"ro", "norecovery"} <= mount_options(reader_at)
    ro = subprocess.run(["blockdev", "--getro", reader_dev], capture_output=True, text=True, check=True)
    assert ro.stdout.strip() == "1"
