"""The S3 transport (issue 25, local slice) against moto's S3 in server mode, over real HTTP: the upload
(verified files only, in parts, DONE last and conditional), the download (range GETs, xxh3 checked,
resumable, throttling retried) and `cachewarm warm --via-s3` end to end with real memcacheds."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import EndpointConnectionError
from cachewarm.datapath.dumper import dumper_node_id
from cachewarm.datapath.populate import PopulateState, populate
from cachewarm.datapath.s3download import S3Downloader
from cachewarm.datapath.s3transport import (
    MIB,
    MIN_PART_SIZE,
    S3Location,
    S3TransportError,
    delete_prefix,
    make_client,
)
from cachewarm.datapath.s3upload import upload_dump
from cachewarm.datapath.writer import DirWriter
from cachewarm.testing.populating import ClockWatch, config, expiries, expiry_within, fetch, records

from tests.datapath.test_warm import CLI, edge_items, put
from tests.volume.conftest import BUCKET, LocalS3, local_s3  # noqa: F401  (the fixture)

NODE = "src_11211"


def run(args: list[str], dumper: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**(env or os.environ), "CACHEWARM_DUMP": str(dumper)}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture
def client(local_s3: LocalS3, monkeypatch: pytest.MonkeyPatch) -> Any:  # noqa: F811
    for k, v in local_s3.env().items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    return make_client(local_s3.url)


@pytest.fixture
def loc(request: pytest.FixtureRequest, local_s3: LocalS3) -> S3Location:  # noqa: F811
    # A prefix per test: the server lives for the module.
    return S3Location(BUCKET, f"t/{request.node.name.replace('[', '_').replace(']', '')}")


def dump(tmp_path: Path, files: int = 3, big: bool = False) -> DirWriter:
    """A finished dump directory; with `big`, one file spans three 5 MiB parts."""
    w = DirWriter(tmp_path / "dump")
    for i in range(files):
        w.write(i, 0, records(200, prefix=b"f%d:" % i, size=300))
    if big:
        w.write(files, 0, records(12, prefix=b"big:", size=MIB))
    w.done()
    return w


def objects(client: Any, loc: S3Location) -> list[str]:
    r = client.list_objects_v2(Bucket=loc.bucket, Prefix=loc.prefix + "/")
    return [o["Key"] for o in r.get("Contents", [])]


def uploads(client: Any, loc: S3Location) -> list[str]:
    return [u["Key"] for u in client.list_multipart_uploads(Bucket=loc.bucket).get("Uploads", [])]


def test_location_parsing() -> None:
    assert S3Location.parse("s3://b/p/q/") == S3Location("b", "p/q")
    assert S3Location.parse("s3://b").node_prefix("n") == "n/"
    assert S3Location("b", "w1").node_prefix("n") == "w1/n/"
    for bad in ("b/p", "s3:///p", "https://b/p"):
        with pytest.raises(ValueError, match=r"s3://|bucket"):
            S3Location.parse(bad)


def test_the_client_takes_the_endpoint_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4599")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    assert make_client().meta.endpoint_url == "http://127.0.0.1:4599"
    assert make_client("http://127.0.0.1:4600").meta.endpoint_url == "http://127.0.0.1:4600"


def test_a_conflicting_conditional_write_is_asked_again(client: Any, loc: S3Location, tmp_path: Path) -> None:
    w = dump(tmp_path, files=1)
    conflicts: list[str] = []
    body = b"<Error><Code>ConditionalRequestConflict</Code><Message>in flight</Message></Error>"

    def conflict(request: Any, **kw: Any) -> AWSResponse | None:
        if request.headers.get("If-None-Match") and not conflicts:
            conflicts.append(request.url)
            return AWSResponse(request.url, 409, {"Content-Type": "application/xml"}, _Raw(body))
        return None

    client.meta.events.register("before-send.s3.PutObject", conflict)
    rep = upload_dump(client, w.out, loc, NODE)
    assert conflicts and not rep.done_already
    assert loc.node_prefix(NODE) + "DONE" in objects(client, loc)


def test_upload_publishes_every_file_in_parts_and_done_last(
    client: Any, loc: S3Location, tmp_path: Path
) -> None:
    w = dump(tmp_path, big=True)
    calls: list[str] = []
    client.meta.events.register("before-call.s3.*", lambda model, **kw: calls.append(model.name))
    rep = upload_dump(client, w.out, loc, NODE, part_size=MIN_PART_SIZE)
    assert rep.files == 4 and rep.bytes == sum(p.size for p in w.published)
    assert calls[-1] == "PutObject"  # DONE, after every data file is complete
    assert calls.count("UploadPart") == 3 + 3  # three small files, one of three parts
    base = loc.node_prefix(NODE)
    assert sorted(objects(client, loc)) == sorted([base + p.name.name for p in w.published] + [base + "DONE"])
    for p in w.published:
        got = client.get_object(Bucket=loc.bucket, Key=base + p.name.name)["Body"].read()
        assert got == p.path.read_bytes()
    assert uploads(client, loc) == []


def test_done_cannot_be_overwritten_by_a_second_writer(client: Any, loc: S3Location, tmp_path: Path) -> None:
    w = dump(tmp_path, files=1)
    upload_dump(client, w.out, loc, NODE)
    again = upload_dump(client, w.out, loc, NODE)  # the same dump (a resumed upload): nothing sent again
    assert again.done_already and again.skipped == 1 and again.files == 0
    other = DirWriter(tmp_path / "other")
    other.write(0, 0, records(5, prefix=b"other"))
    other.done()
    with pytest.raises(S3TransportError, match="another writer"):
        upload_dump(client, other.out, loc, NODE)
    done = client.get_object(Bucket=loc.bucket, Key=loc.node_prefix(NODE) + "DONE")["Body"].read()
    assert done == (w.out / "DONE").read_bytes()


def test_a_file_that_does_not_verify_is_never_published(client: Any, loc: S3Location, tmp_path: Path) -> None:
    w = dump(tmp_path, files=2)
    p = w.published[1].path
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF  # the checksum no longer matches the name; header and trailer do
    p.write_bytes(bytes(data))
    with pytest.raises(S3TransportError, match=r"xxh3 .* != name's"):
        upload_dump(client, w.out, loc, NODE)
    base = loc.node_prefix(NODE)
    assert objects(client, loc) == [base + w.published[0].name.name]  # no damaged object, no DONE
    assert uploads(client, loc) == []  # its parts were aborted
    p.write_bytes(p.read_bytes()[:100])  # torn: checks 1-2 fail before a request is sent
    with pytest.raises(S3TransportError, match="does not verify"):
        upload_dump(client, w.out, loc, NODE)


def test_a_failed_part_upload_leaves_nothing_and_a_rerun_completes(
    client: Any, loc: S3Location, tmp_path: Path
) -> None:
    w = dump(tmp_path, files=1, big=True)
    failed: list[int] = []

    def fail_once(params: dict[str, Any], **kw: Any) -> None:
        if params.get("PartNumber") == 2 and not failed:
            failed.append(2)
            raise EndpointConnectionError(endpoint_url="injected: the part upload failed")

    client.meta.events.register("before-parameter-build.s3.UploadPart", fail_once)
    with pytest.raises(EndpointConnectionError):
        upload_dump(client, w.out, loc, NODE, part_size=MIN_PART_SIZE)
    base = loc.node_prefix(NODE)
    assert objects(client, loc) == [base + w.published[0].name.name] and uploads(client, loc) == []
    rep = upload_dump(client, w.out, loc, NODE, part_size=MIN_PART_SIZE)
    assert rep.skipped == 1 and rep.files == 1
    assert base + "DONE" in objects(client, loc)


def test_upload_bytes_per_second_limit(
    client: Any, loc: S3Location, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = dump(tmp_path, files=1, big=True)
    size = w.published[-1].size + w.published[0].size
    slept: list[float] = []
    import cachewarm.datapath.populate.ratelimit as rl

    monkeypatch.setattr(rl, "time", SimpleNamespace(monotonic=time.monotonic, sleep=slept.append))
    upload_dump(client, w.out, loc, NODE, part_size=MIN_PART_SIZE, max_bytes_per_second=size / 100)
    # Paced to the limit: before the last part it waits until about 100 s after the start (no test
    # waits for it: sleep only records).
    assert 90 < max(slept) <= 100


def _download(client: Any, loc: S3Location, tmp_path: Path, **kw: Any) -> S3Downloader:
    return S3Downloader(
        client,
        loc,
        NODE,
        tmp_path / "staging",
        tmp_path / "state" / "populate.json",
        poll_interval=0.05,
        **kw,
    )


def test_download_stages_verified_files_then_done(client: Any, loc: S3Location, tmp_path: Path) -> None:
    w = dump(tmp_path, big=True)
    upload_dump(client, w.out, loc, NODE, part_size=MIN_PART_SIZE)
    gets: list[str] = []
    client.meta.events.register(
        "before-parameter-build.s3.GetObject", lambda params, **kw: gets.append(params.get("Range", "whole"))
    )
    d = _download(client, loc, tmp_path, part_size=MIN_PART_SIZE)
    rep = d.run()
    assert rep.files == 4 and rep.rejected == 0
    for p in w.published:
        assert (d.staging / p.name.name).read_bytes() == p.path.read_bytes()
    assert (d.staging / "DONE").read_bytes() == (w.out / "DONE").read_bytes()
    assert not [p for p in d.staging.iterdir() if p.name.startswith(".")]
    assert sum(r.startswith("bytes=") for r in gets) == 3 + 3  # ranged, the large one in three


def test_range_gets_in_parallel_hold_a_bounded_window(client: Any, loc: S3Location, tmp_path: Path) -> None:
    """Up to `parallel` ranges in flight (never more), the object still written and hashed in order."""
    w = dump(tmp_path, files=1, big=True)  # the large file: three 5 MiB ranges
    upload_dump(client, w.out, loc, NODE, part_size=MIN_PART_SIZE)
    lock, inflight, peak = threading.Lock(), [0], [0]
    real = client.get_object

    def get_object(**kw: Any) -> Any:
        with lock:
            inflight[0] += 1
            peak[0] = max(peak[0], inflight[0])
        try:
            time.sleep(0.05)  # long enough for the window to fill
            return real(**kw)
        finally:
            with lock:
                inflight[0] -= 1

    client.get_object = get_object
    d = _download(client, loc, tmp_path, part_size=MIN_PART_SIZE)
    d.parallel = 2
    d.run()
    for p in w.published:
        assert (d.staging / p.name.name).read_bytes() == p.path.read_bytes()
    assert peak[0] == 2


def test_staging_holds_at_most_max_staged_files_and_evicts_applied_ones(
    client: Any, loc: S3Location, tmp_path: Path
) -> None:
    """The populator's disk never holds the dump: at most `max_staged` files wait, each deleted once the
    populator's state records it applied; `run` returns once every file DONE lists is applied."""
    from cachewarm.datapath.populate.state import ConsumedFile

    w = dump(tmp_path, files=4)
    upload_dump(client, w.out, loc, NODE)
    d = _download(client, loc, tmp_path)
    d.max_staged, d.evict, d.poll_interval = 2, True, 0.05
    thread = threading.Thread(target=d.run, daemon=True)
    thread.start()
    names = [p.name.name for p in w.published]
    most = 0
    state = PopulateState()
    for name in names:  # a populator that applies the files one by one, in order
        deadline = time.monotonic() + 30
        while not (d.staging / name).exists():
            assert time.monotonic() < deadline, f"{name} never staged"
            time.sleep(0.01)
        waiting = [n for n in names if (d.staging / n).exists()]
        most = max(most, len(waiting))
        state.consumed[name] = ConsumedFile(200, 1)
        state.save(d.state_file)
    thread.join(30)
    assert not thread.is_alive()
    assert most <= 2
    assert [p.name for p in d.staging.iterdir() if p.name != "DONE"] == []
    assert d.report.files == 4 and d.report.evicted == 4


def test_a_killed_download_resumes_without_reading_what_it_has(
    client: Any, loc: S3Location, tmp_path: Path
) -> None:
    w = dump(tmp_path, files=3, big=True)
    upload_dump(client, w.out, loc, NODE, part_size=MIN_PART_SIZE)
    total = sum(p.size for p in w.published)

    class Killed(Exception):
        pass

    def kill_after_first(name: str) -> None:
        raise Killed(name)

    first = _download(client, loc, tmp_path, part_size=MIN_PART_SIZE, on_file=kill_after_first)
    with pytest.raises(Killed) as got:
        first.run()
    done_first = got.value.args[0]
    # The large file: killed mid-object, one 5 MiB range already on disk.
    big = w.published[-1]
    part = first.staging / f".{big.name.name}.part"
    if big.name.name != done_first:
        part.write_bytes(big.path.read_bytes()[:MIN_PART_SIZE])
    second = _download(client, loc, tmp_path, part_size=MIN_PART_SIZE)
    rep = second.run()
    fetched_before = (w.out / done_first).stat().st_size + (
        MIN_PART_SIZE if big.name.name != done_first else 0
    )
    assert rep.bytes == total - fetched_before
    assert rep.skipped == 1
    for p in w.published:
        assert (second.staging / p.name.name).read_bytes() == p.path.read_bytes()


@pytest.mark.memcached_versions("1.6.45")
def test_files_the_populator_applied_are_not_fetched_again(
    client: Any, loc: S3Location, tmp_path: Path, memcached: Any
) -> None:
    dst = memcached(memory_mb=64)
    w = dump(tmp_path, files=3)
    upload_dump(client, w.out, loc, NODE)
    d = _download(client, loc, tmp_path)
    d.run()
    summary = populate(config(d.staging, tmp_path, [dst], state_file=d.state_file))
    assert summary.records == 600 and summary.stored == 600
    applied = PopulateState.load(d.state_file).consumed
    assert len(applied) == 3
    for p in w.published:
        (d.staging / p.name.name).unlink()  # the staging copies are gone (a new disk, a cleanup)
    (d.staging / "DONE").unlink()
    again = _download(client, loc, tmp_path).run()
    assert again.bytes == 0 and again.files == 0 and again.skipped == 3


def test_a_listing_that_lags_is_listed_again_then_named(client: Any, loc: S3Location, tmp_path: Path) -> None:
    w = dump(tmp_path, files=2)
    upload_dump(client, w.out, loc, NODE)
    key = loc.node_prefix(NODE) + w.published[1].name.name
    client.delete_object(Bucket=loc.bucket, Key=key)  # DONE names it; the listing does not show it
    with pytest.raises(S3TransportError, match=w.published[1].name.name):
        _download(client, loc, tmp_path / "a", missing_timeout=0.3).run()
    # It shows up while the downloader waits: the warm goes on.
    d = _download(client, loc, tmp_path / "b", missing_timeout=120)
    late = threading.Timer(
        0.3, lambda: client.put_object(Bucket=loc.bucket, Key=key, Body=w.published[1].path.read_bytes())
    )
    late.start()
    try:
        rep = d.run()
    finally:
        late.join()
    assert rep.files == 2 and (d.staging / "DONE").exists()


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **kw: Any) -> Any:
        yield self.body


def test_slowdown_is_retried_with_standard_retries(client: Any, loc: S3Location, tmp_path: Path) -> None:
    w = dump(tmp_path, files=2)
    upload_dump(client, w.out, loc, NODE)
    throttled: list[str] = []
    slow = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"

    def slowdown(request: Any, **kw: Any) -> AWSResponse | None:
        if "Range" in request.headers and len(throttled) < 3:
            throttled.append(request.url)
            return AWSResponse(request.url, 503, {"Content-Type": "application/xml"}, _Raw(slow))
        return None

    client.meta.events.register("before-send.s3.GetObject", slowdown)
    assert client.meta.config.retries["mode"] == "standard"
    rep = _download(client, loc, tmp_path).run()
    assert len(throttled) == 3 and rep.files == 2
    for p in w.published:
        assert (tmp_path / "staging" / p.name.name).read_bytes() == p.path.read_bytes()


def test_a_damaged_object_is_refused_before_any_item_is_sent(
    client: Any, loc: S3Location, tmp_path: Path
) -> None:
    w = dump(tmp_path, files=1)
    upload_dump(client, w.out, loc, NODE)
    key = loc.node_prefix(NODE) + w.published[0].name.name
    data = bytearray(w.published[0].path.read_bytes())
    data[200] ^= 1
    client.put_object(Bucket=loc.bucket, Key=key, Body=bytes(data))  # damaged at rest
    d = _download(client, loc, tmp_path)
    with pytest.raises(S3TransportError, match="damaged"):
        d.run()
    assert list(d.staging.iterdir()) == []  # nothing in view of the populator


def test_delete_prefix_leaves_nothing(client: Any, loc: S3Location, tmp_path: Path) -> None:
    w = dump(tmp_path, files=2)
    upload_dump(client, w.out, loc, NODE)
    client.create_multipart_upload(Bucket=loc.bucket, Key=loc.prefix + "/x/dangling")
    assert delete_prefix(client, loc) == 3
    assert objects(client, loc) == [] and uploads(client, loc) == []


@pytest.mark.memcached_versions("1.6.18", "1.6.45")
def test_warm_via_s3_end_to_end(
    memcached: Any,
    dumper_bin: Path,
    tmp_path: Path,
    local_s3: LocalS3,  # noqa: F811
) -> None:
    src = memcached(memory_mb=128, max_item_size="8m")
    dst = memcached(memory_mb=128, max_item_size="8m")
    clocks = ClockWatch(src, dst)
    items = edge_items()
    put(src, items)
    clocks.join()
    prefix = f"warm-{time.time_ns()}"
    r = run(
        [
            "warm",
            "--source",
            src.address,
            "--target",
            dst.address,
            "--workdir",
            str(tmp_path / "w"),
            "--data-file-size",
            "1M",
            "--via-s3",
            f"s3://{BUCKET}/{prefix}",
            "--s3-endpoint-url",
            local_s3.url,
            "--s3-part-size",
            "5M",
            "--s3-max-bytes-per-second",
            "1G",
            "--json",
        ],
        dumper_bin,
        env=local_s3.env(),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    events = [json.loads(ln) for ln in r.stdout.strip().splitlines()]
    assert all(list(e)[:2] == ["event", "time"] for e in events)
    summary = events[-1]
    assert summary["event"] == "warm_summary" and summary["ok"]
    s3 = summary["s3"]
    assert s3["uploaded_files"] == s3["downloaded_files"] == summary["files"] > 1
    assert s3["objects_deleted"] == s3["uploaded_files"] + 1  # and DONE
    assert summary["missing_in_target"] == 0 and summary["checked_in_target"] == len(items)
    got = fetch(dst, [k for k, *_ in items])
    assert len(got) == len(items)
    for key, flags, _, value in items:
        assert got[key].value == value and got[key].flags == flags, key
    slack = clocks.slack(src, dst)
    src_exp = expiries(src, list(got), clocks.ahead(src))
    dst_exp = expiries(dst, list(got), clocks.ahead(dst))
    for key, _flags, ttl, _value in items:
        if ttl == 0:
            assert src_exp[key] == dst_exp[key] == -1, key
        else:
            assert expiry_within(src_exp[key], dst_exp[key], slack), (key, src_exp[key], dst_exp[key], slack)
    listed = local_s3.client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    assert listed.get("KeyCount", 0) == 0
    assert not local_s3.client.list_multipart_uploads(Bucket=BUCKET, Prefix=prefix).get("Uploads")
    # No second copy of the dump: every staged file was deleted once applied.
    staged = [p.name for p in (tmp_path / "w" / "s3-staging").iterdir() if p.name != "DONE"]
    assert staged == []


@pytest.mark.memcached_versions("1.6.45")
def test_warm_via_s3_refuses_a_prefix_another_dump_published(
    memcached: Any,
    dumper_bin: Path,
    tmp_path: Path,
    local_s3: LocalS3,  # noqa: F811
) -> None:
    src, dst = memcached(memory_mb=64), memcached(memory_mb=64)
    put(src, [(b"k%d" % i, 0, 0, b"v") for i in range(500)])
    prefix = f"taken-{time.time_ns()}"
    other = DirWriter(tmp_path / "other")
    other.write(0, 0, records(5, prefix=b"other"))
    other.done()
    node = dumper_node_id(src.address)
    local_s3.client.put_object(
        Bucket=BUCKET, Key=f"{prefix}/{node}/DONE", Body=(other.out / "DONE").read_bytes()
    )
    args = ["warm", "--source", src.address, "--target", dst.address, "--workdir", str(tmp_path / "w")]
    r = run([*args, "--via-s3", f"s3://{BUCKET}/{prefix}"], dumper_bin, env=local_s3.env())
    assert r.returncode == 1 and "published by another writer" in r.stderr, r.stderr[-2000:]
    assert fetch(dst, [b"k1"]) == {}  # nothing was populated from someone else's dump
    there = local_s3.client.get_object(Bucket=BUCKET, Key=f"{prefix}/{node}/DONE")["Body"].read()
    assert there == (other.out / "DONE").read_bytes()


def test_via_s3_flags_are_checked(dumper_bin: Path, tmp_path: Path) -> None:
    base = ["warm", "--source", "127.0.0.1:1", "--target", "127.0.0.1:2", "--workdir", str(tmp_path)]
    for extra, why in (
        (["--via-s3", "bucket/prefix"], "s3://BUCKET/PREFIX"),
        (["--via-s3", "s3://b/p", "--stream"], "--stream has none"),
        (["--via-s3", "s3://b/p", "--s3-part-size", "1M"], "S3's smallest part"),
        (["--s3-endpoint-url", "http://127.0.0.1:1"], "needs --via-s3"),
    ):
        r = run([*base, *extra], dumper_bin)
        assert r.returncode == 2 and why in r.stderr, (extra, r.stderr)
