"""S3 as the transport (issue 25) under S3's faults, with the real agents (`cachewarm agent dump --to-s3`,
`cachewarm agent populate --from-s3` as processes), real memcacheds and moto's S3 server behind a
fault-injecting proxy (s3proxy.py): a part upload failing past the retries, the populator killed -9
in the middle of an object, a torn listing (objects left out of listings, ranges read partial), and
throttling answered with 503 SlowDown. Each must end complete and exact after at most a re-run, with
nothing left behind (no unfinished multipart upload, no partial or staged file)."""

from __future__ import annotations

import logging
import os
import random
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cachewarm.datapath.format import Record
from cachewarm.datapath.s3transport import S3Location
from cachewarm.datapath.s3upload import upload_dump
from cachewarm.datapath.writer import DirWriter
from cachewarm.testing.memcached import MemcachedServer

from tests.faults.harness import CLI, Tally, fetch_all, kill9, trials, wait_until
from tests.faults.s3proxy import Faults, s3_proxy
from tests.volume.conftest import BUCKET, LocalS3, local_s3  # noqa: F401  (the fixture)

# The oldest release and the newest (its crawl answers OK first): the transport does not depend on the
# release between them, and each trial is seconds of S3 round trips.
pytestmark = pytest.mark.memcached_versions("1.6.18", "1.6.45")

NODE = "i-0123456789abcdef0"


@pytest.fixture
def s3(local_s3: LocalS3) -> LocalS3:  # noqa: F811
    # moto's server logs every request through werkzeug: `make faults` prints its table, not those.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    return local_s3


ARN = f"arn:aws:ec2:us-east-1:123456789012:instance/{NODE}"
MAX_ATTEMPTS = 4


@dataclass
class Trial:
    """One trial's places: its own prefix in the bucket, its own directories."""

    local: Any  # LocalS3
    root: Path
    prefix: str

    @property
    def loc(self) -> S3Location:
        return S3Location(BUCKET, self.prefix)

    def env(self, endpoint: str) -> dict[str, str]:
        return self.local.env() | {
            "AWS_ENDPOINT_URL_S3": endpoint,
            "CACHEWARM_INSTANCE_ARN": ARN,
            # Fewer tries per request than the agents' 10: a part that fails past them fails sooner.
            "AWS_MAX_ATTEMPTS": str(MAX_ATTEMPTS),
            "CACHEWARM_DUMP": os.environ.get(
                "CACHEWARM_DUMP", str(Path("build/release/cachewarm-dump").resolve())
            ),
        }

    def common(self, mount: str) -> list[str]:
        return [
            *("--warm-id", "warm-1", "--node-id", NODE, "--mount", str(self.root / mount)),
            *(
                "--status-bucket",
                BUCKET,
                "--status-prefix",
                f"status/{self.prefix}",
                "--heartbeat-seconds",
                "1",
            ),
        ]

    def dump_argv(self, src: MemcachedServer) -> list[str]:
        return [
            *CLI,
            *("agent", "dump", *self.common("src"), "--memcached", src.address, "--threads", "2"),
            *("--adaptive", "off", "--to-s3", f"s3://{BUCKET}/{self.prefix}"),
        ]

    def populate_argv(self, dst: MemcachedServer) -> list[str]:
        return [
            *CLI,
            *("agent", "populate", *self.common("pop"), "--to", dst.address),
            *("--state-dir", str(self.root / "state"), "--source-timeout", "120"),
            *("--from-s3", f"s3://{BUCKET}/{self.prefix}/{NODE}"),
            "--accept-no-recheck",  # no source here: the re-check's faults are the live-traffic scenario's
        ]

    def run(self, argv: list[str], endpoint: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, timeout=600, env=self.env(endpoint))

    def leftovers(self) -> list[str]:
        """Unfinished multipart uploads under the prefix; partial or staged files on the populator."""
        c = self.local.client
        ups = c.list_multipart_uploads(Bucket=BUCKET, Prefix=self.prefix + "/").get("Uploads", [])
        left = [f"multipart upload {u['Key']}" for u in ups]
        staging = self.root / "pop" / "dump"
        if staging.is_dir():
            left += [f"staged {p.name}" for p in staging.iterdir() if p.name != "DONE"]
        return left


def fill_source(memcached: Callable[..., MemcachedServer], n: int, seed: int) -> MemcachedServer:
    from pymemcache.client.base import Client

    src = memcached(memory_mb=128)
    rng = random.Random(seed)
    c = Client(("127.0.0.1", src.port))
    c.set_many({f"s3:{seed}:{i}": rng.randbytes(rng.randint(10, 3000)) for i in range(n)}, expire=0)
    return src


def audit(src_keys: dict[bytes, Any], dst: MemcachedServer, t: Tally, trial: int) -> None:
    got = fetch_all(dst, src_keys)
    for k, it in src_keys.items():
        d = got.get(k)
        if d is None:
            t.lost += 1
            if t.lost < 4:
                t.note(f"trial {trial}: {k!r} missing in the destination")
        elif d.value != it.value or d.flags != it.flags or (it.ttl == -1) != (d.ttl == -1):
            t.corrupt += 1
            t.note(f"trial {trial}: {k!r} wrong in the destination")


def source_items(src: MemcachedServer, n: int, seed: int) -> dict[bytes, Any]:
    items = fetch_all(src, [f"s3:{seed}:{i}".encode() for i in range(n)])
    assert len(items) == n, f"the source holds {len(items)} of {n}"
    return items


def check_ok(r: subprocess.CompletedProcess[str], what: str, t: Tally, trial: int, items: int = 1) -> bool:
    """A run that should have succeeded; if it failed, every item it should have delivered is lost."""
    if r.returncode == 0:
        return True
    t.lost += items
    t.note(f"trial {trial}: {what} exited {r.returncode}: {r.stderr.strip()[-400:]}")
    return False


def test_s3_part_upload_fails_then_rerun(s3: LocalS3, memcached: Any, tmp_path: Path, tally: Any) -> None:
    t = tally("S3: part uploads fail (500 past the retries) → dump agent re-run")
    n = 3000
    for trial in range(trials()):
        tr = Trial(s3, tmp_path / f"t{trial}", f"faults/{tmp_path.name}/part-{trial}")
        src, dst = fill_source(memcached, n, 100 + trial), memcached(memory_mb=128)
        want = source_items(src, n, 100 + trial)
        faults = Faults(seed=trial, fail_parts_of=NODE, fail_parts=MAX_ATTEMPTS + 1)
        with s3_proxy(s3.url, faults) as url:
            first = tr.run(tr.dump_argv(src), url)
            t.trials += 1
            print(f"S3 part trial {trial}: the first run exited {first.returncode} after {faults.counts}")
            if first.returncode == 0:
                t.note(f"trial {trial}: the dump agent succeeded through {faults.counts} part failures")
            # The failed upload was aborted: no DONE, no multipart upload left.
            keys = [
                o["Key"]
                for o in s3.client.list_objects_v2(Bucket=BUCKET, Prefix=tr.prefix + "/").get("Contents", [])
            ]
            if first.returncode != 0 and any(k.endswith("/DONE") for k in keys):
                t.corrupt += 1
                t.note(f"trial {trial}: DONE published although a part failed")
            if not check_ok(tr.run(tr.dump_argv(src), url), "the dump agent's re-run", t, trial, n):
                continue
            if not check_ok(tr.run(tr.populate_argv(dst), url), "the populate agent", t, trial, n):
                continue
        audit(want, dst, t, trial)
        t.leaked += len(left := tr.leftovers())
        if left:
            t.note(f"trial {trial}: left {left[:3]}")
    t.check()


def big_dump(path: Path, seed: int) -> dict[bytes, Record]:
    """Three ~12 MiB data files (two 8 MiB ranges each): a kill lands in the middle of an object."""
    rng = random.Random(seed)
    w = DirWriter(path, node="src")
    recs: dict[bytes, Record] = {}
    for f in range(3):
        batch = [
            Record(b"big:%d:%d" % (f, j), rng.getrandbits(32), -1, rng.randbytes(100_000)) for j in range(120)
        ]
        recs.update((r.key, r) for r in batch)
        w.write(f, 0, batch)
    w.done()
    return recs


def audit_records(recs: dict[bytes, Record], dst: MemcachedServer, t: Tally, trial: int) -> None:
    got = fetch_all(dst, recs)
    for k, r in recs.items():
        d = got.get(k)
        if d is None:
            t.lost += 1
            if t.lost < 4:
                t.note(f"trial {trial}: {k!r} missing in the destination")
        elif d.value != bytes(r.value) or d.flags != r.flags or d.ttl != -1:
            t.corrupt += 1
            t.note(f"trial {trial}: {k!r} wrong in the destination")


def test_s3_populator_killed_mid_object(s3: LocalS3, memcached: Any, tmp_path: Path, tally: Any) -> None:
    t = tally("S3: populate agent kill -9 mid-object → restart")
    for trial in range(trials()):
        tr = Trial(s3, tmp_path / f"t{trial}", f"faults/{tmp_path.name}/kill-{trial}")
        recs = big_dump(tr.root / "dump", 200 + trial)
        upload_dump(s3.client, tr.root / "dump", tr.loc, NODE, part_size=5 * 1024 * 1024)
        dst = memcached(memory_mb=256, max_item_size="1m")
        staging = tr.root / "pop" / "dump"

        def partial_object(staging: Path = staging) -> bool:
            return staging.is_dir() and any(
                p.name.endswith(".part") and p.stat().st_size > 0 for p in staging.iterdir()
            )

        # Slow the download (a third of the ranges answer SlowDown first) so the kill finds a partial object.
        with s3_proxy(s3.url, Faults(seed=trial, slowdown=0.3)) as url:
            proc = subprocess.Popen(
                tr.populate_argv(dst), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=tr.env(url)
            )
            partial = wait_until(
                partial_object,
                timeout=120,
                step=0.005,
            )
            kill9(proc)
            t.trials += 1
            # Said on the output (`make faults` runs with -s): whether the kill landed mid-object.
            print(f"S3 kill trial {trial}: a partly fetched object at the kill: {partial}")
            if not partial:
                t.note(f"trial {trial}: no partial object seen before the kill")
        r = tr.run(tr.populate_argv(dst), s3.url)
        if not check_ok(r, "the restarted populate agent", t, trial, len(recs)):
            continue
        audit_records(recs, dst, t, trial)
        t.leaked += len(left := tr.leftovers())
        if left:
            t.note(f"trial {trial}: left {left[:3]}")
    t.check()


def test_s3_torn_listing_and_partial_reads(s3: LocalS3, memcached: Any, tmp_path: Path, tally: Any) -> None:
    t = tally("S3: torn listings (objects left out) and ranges read partial")
    for trial in range(trials()):
        tr = Trial(s3, tmp_path / f"t{trial}", f"faults/{tmp_path.name}/torn-{trial}")
        recs = big_dump(tr.root / "dump", 300 + trial)
        upload_dump(s3.client, tr.root / "dump", tr.loc, NODE, part_size=5 * 1024 * 1024)
        dst = memcached(memory_mb=256, max_item_size="1m")
        faults = Faults(seed=trial, torn_listings=4, listed_keep=1 + trial % 2, short_reads=3)
        with s3_proxy(s3.url, faults) as url:
            r = tr.run(tr.populate_argv(dst), url)
        t.trials += 1
        print(f"S3 torn trial {trial}: faults injected {faults.counts}")
        if faults.counts.get("torn_listing", 0) < 1 or faults.counts.get("short_read", 0) < 1:
            t.note(f"trial {trial}: the faults did not happen: {faults.counts}")
        if not check_ok(r, "the populate agent", t, trial, len(recs)):
            continue
        audit_records(recs, dst, t, trial)
        t.leaked += len(left := tr.leftovers())
        if left:
            t.note(f"trial {trial}: left {left[:3]}")
    t.check()


def test_s3_throttled_with_slowdown(s3: LocalS3, memcached: Any, tmp_path: Path, tally: Any) -> None:
    t = tally("S3: 503 SlowDown on a quarter of the requests (dump and populate agents)")
    n = 3000
    for trial in range(trials()):
        tr = Trial(s3, tmp_path / f"t{trial}", f"faults/{tmp_path.name}/slow-{trial}")
        src, dst = fill_source(memcached, n, 400 + trial), memcached(memory_mb=128)
        want = source_items(src, n, 400 + trial)
        faults = Faults(seed=trial, slowdown=0.25)
        start = time.monotonic()
        with s3_proxy(s3.url, faults) as url:
            ok = check_ok(tr.run(tr.dump_argv(src), url), "the dump agent", t, trial, n) and check_ok(
                tr.run(tr.populate_argv(dst), url), "the populate agent", t, trial, n
            )
        t.trials += 1
        if not faults.counts.get("slowdown"):
            t.note(f"trial {trial}: no SlowDown answered")
        if not ok:
            continue
        audit(want, dst, t, trial)
        t.leaked += len(left := tr.leftovers())
        if left:
            t.note(f"trial {trial}: left {left[:3]}")
        t.note(
            f"trial {trial}: {faults.counts.get('slowdown', 0)} SlowDown answers, "
            f"{time.monotonic() - start:.1f} s"
        )
    t.check()


@pytest.fixture(autouse=True)
def _quiet_boto(monkeypatch: pytest.MonkeyPatch) -> None:
    # The in-process client of the fixture talks to moto directly; the agents get their env explicitly.
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
