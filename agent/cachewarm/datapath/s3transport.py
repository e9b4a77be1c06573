"""S3 as the transport between a dump and a populator in another region: the local slice.

Upload (`upload_dump`): every data file DONE lists goes up as a multipart upload, one part in memory at a
time (`part_size`), its own bytes/s limit. Checks 1-2 of docs/data-format.md (header, trailer) are read
first, the xxh3 is computed over the very bytes sent; a file whose checksum does not match its name is
aborted (its parts deleted) and nothing more is published. DONE goes last, with `If-None-Match: *`: a
second writer of the same prefix cannot replace it.

Download (`S3Downloader`): lists the node's prefix, fetches each data object with range GETs into a
dot-named file in a staging directory (the populator loop skips dot names), checks the xxh3 against the
name and only then renames it into view; DONE is staged last, once every file it lists is staged or
applied. The populator loop (datapath/populate) then runs unchanged on the staging directory and
verifies every file again (checks 1-4) before it sends an item. Progress: a file the populator's state
file records as consumed, or that is already staged, is never fetched again; a partly fetched file
resumes at its length.

Key layout: `<prefix>/<node>/<data file name>` and `<prefix>/<node>/DONE` — one prefix per source node,
so that hundreds of nodes never share one (S3 scales request rates per prefix; docs/transport-s3.md).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import xxhash

from cachewarm.datapath import format as df
from cachewarm.datapath.populate.ratelimit import RateLimiter
from cachewarm.datapath.populate.state import PopulateState

MIB = 1024 * 1024
# S3's smallest part but the last; a part is all the uploader or downloader holds of a file.
MIN_PART_SIZE = 5 * MIB
DEFAULT_PART_SIZE = 8 * MIB
MAX_PART_SIZE = 64 * MIB
# A range GET that returns fewer bytes than asked is asked again this many times in all.
SHORT_READ_ATTEMPTS = 3
# The object metadata that names a data object's xxh3 (a resumed upload compares it).
XXH3_META = "cachewarm-xxh3"


class S3TransportError(RuntimeError):
    """The transport failed; the message names the object and the problem."""


class DamagedObject(S3TransportError):
    """An object's fetched bytes do not match the xxh3 its name carries: bad data, never sent."""


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # no leading or trailing "/"; may be empty

    @classmethod
    def parse(cls, url: str) -> S3Location:
        """`s3://BUCKET[/PREFIX]`; anything else is a ValueError naming the problem."""
        if not url.startswith("s3://"):
            raise ValueError(f"{url!r} is not an s3://BUCKET/PREFIX URL")
        bucket, _, prefix = url[len("s3://") :].partition("/")
        if not bucket:
            raise ValueError(f"{url!r} names no bucket")
        return cls(bucket, prefix.strip("/"))

    def node_prefix(self, node: str) -> str:
        """Where one source node's objects go (ends with "/")."""
        return f"{self.prefix}/{node}/" if self.prefix else f"{node}/"

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def make_client(endpoint_url: str | None = None, max_attempts: int = 10, region: str | None = None) -> Any:
    """An S3 client with botocore's standard retry mode: 503 SlowDown, 500s and connection errors are
    retried with exponential back-off and jitter, up to `max_attempts` tries per request (or
    AWS_MAX_ATTEMPTS). With no
    `endpoint_url`, boto3 honours AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL (a local S3)."""
    import boto3
    from botocore.config import Config

    # AWS_MAX_ATTEMPTS, botocore's own setting, still wins (an explicit Config would hide it).
    attempts = int(os.environ.get("AWS_MAX_ATTEMPTS", max_attempts))
    cfg = Config(retries={"mode": "standard", "max_attempts": attempts})
    return boto3.client("s3", endpoint_url=endpoint_url, config=cfg, region_name=region)


def _error_code(e: Exception) -> str:
    return str(getattr(e, "response", {}).get("Error", {}).get("Code", ""))


def _owned(owner: str | None) -> dict[str, str]:
    """ExpectedBucketOwner on every call when the owner is known (the node agents: their own account):
    a bucket of that name in another account answers 403 and never gets or gives a byte."""
    return {"ExpectedBucketOwner": owner} if owner else {}


@dataclass
class UploadReport:
    files: int = 0
    skipped: int = 0  # already in the bucket, same size and xxh3 (a resumed upload)
    bytes: int = 0
    requests: int = 0
    done_already: bool = False  # DONE was there, with the same bytes (this upload's earlier run)
    held_s: float = 0.0  # seconds the upload waited while the source's adaptive guard backed off


def upload_dump(
    client: Any,
    dump_dir: Path,
    loc: S3Location,
    node: str,
    part_size: int = DEFAULT_PART_SIZE,
    max_bytes_per_second: float | None = None,
    owner: str | None = None,
) -> UploadReport:
    """Publish a finished dump (DONE present) under `loc.node_prefix(node)`; DONE last."""
    return S3Uploader(client, dump_dir, loc, node, part_size, max_bytes_per_second, owner=owner).finish()


@dataclass
class GuardSignal:
    """The dumper's adaptive guard as its progress lines report it (`backing_off`): the upload holds
    while it backs off, and only while the dumper runs (afterwards nothing probes the source)."""

    backing_off: bool = False
    running: threading.Event = field(default_factory=threading.Event)

    def on_progress(self, p: Any) -> None:
        self.backing_off = bool(p.backing_off)

    def hold(self) -> bool:
        return self.running.is_set() and self.backing_off


@dataclass
class S3Uploader:
    """Uploads a dump while the dumper writes it: each published data file (the dumper renames a file
    into view only once it is complete) as soon as it appears, DONE last once the dump is finished.

    `hold()` is the source's adaptive guard: while it says the guard is backing off (the dumper's
    progress `backing_off`), no part is sent — the upload shares the network of the source's clients.
    The bytes/s limit starts afresh after a hold, so a pause is never made up for by a burst."""

    client: Any
    dump_dir: Path
    loc: S3Location
    node: str
    part_size: int = DEFAULT_PART_SIZE
    max_bytes_per_second: float | None = None
    hold: Callable[[], bool] = lambda: False
    hold_poll: float = 0.1
    sleep: Callable[[float], None] = time.sleep
    report: UploadReport = field(default_factory=UploadReport)
    uploaded: set[str] = field(default_factory=set)
    # Set to stop between parts (an interrupted agent): the file's multipart upload is aborted.
    stop: threading.Event = field(default_factory=threading.Event)
    # The account that must own the bucket (ExpectedBucketOwner); None: not checked (a local S3).
    owner: str | None = None
    # What the node's prefix held when this run began (key -> size): listed once, so that finding
    # what an earlier run uploaded needs no HEAD of a missing key (a 404 only with an unconditional
    # s3:ListBucket, which the agents do not have).
    _existing: dict[str, int] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not MIN_PART_SIZE <= self.part_size <= MAX_PART_SIZE:
            raise ValueError(f"part size {self.part_size} is outside {MIN_PART_SIZE}..{MAX_PART_SIZE} bytes")
        self.limiter = RateLimiter(None, self.max_bytes_per_second)

    @property
    def base(self) -> str:
        return self.loc.node_prefix(self.node)

    def wait_while_held(self) -> None:
        held = False
        while self.hold() and not self.stop.is_set():
            held = True
            self.report.held_s += self.hold_poll
            self.sleep(self.hold_poll)
        if held:
            self.limiter = RateLimiter(None, self.max_bytes_per_second)

    def step(self) -> int:
        """Upload every data file now in the dump directory that is not uploaded yet; returns how many."""
        n = 0
        for entry in sorted(os.listdir(self.dump_dir)):
            if entry in self.uploaded or entry.startswith(".") or df.parse_name(entry) is None:
                continue
            if self.stop.is_set():
                break
            _upload_file(self, self.dump_dir / entry, self.base + entry)
            self.uploaded.add(entry)
            n += 1
        return n

    def finish(self) -> UploadReport:
        """The dump is finished: upload what DONE lists that is not up yet, then DONE (conditional)."""
        done_path = self.dump_dir / df.MANIFEST_NAME
        try:
            done = done_path.read_bytes()
            manifest = df.parse_manifest(done, str(done_path))
        except (OSError, df.FormatError) as e:
            raise S3TransportError(
                f"the dump in {self.dump_dir} is not finished or DONE is invalid: {e}"
            ) from e
        for mf in manifest.files:
            if mf.name not in self.uploaded:
                _upload_file(self, self.dump_dir / mf.name, self.base + mf.name)
                self.uploaded.add(mf.name)
        _publish_done(
            self.client, self.loc.bucket, self.base + df.MANIFEST_NAME, done, self.report, self.owner
        )
        return self.report

    def existing(self) -> dict[str, int]:
        if self._existing is None:
            found: dict[str, int] = {}
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.loc.bucket, Prefix=self.base, **_owned(self.owner)
            ):
                self.report.requests += 1
                for obj in page.get("Contents", []):
                    found[obj["Key"]] = int(obj["Size"])
            self._existing = found
        return self._existing

    def run(self, dumper_running: Callable[[], bool], poll: float = 0.2) -> None:
        """Upload files as they appear while `dumper_running()`; returns when the dumper has ended
        (the caller then calls `finish` if the dump succeeded)."""
        while dumper_running() and not self.stop.is_set():
            if self.step() == 0:
                self.sleep(poll)
        self.step()


def _publish_done(
    client: Any, bucket: str, key: str, done: bytes, report: UploadReport, owner: str | None = None
) -> None:
    """DONE with `If-None-Match: *`. 412: someone published it first — ours (a resumed upload) if the
    bytes are the same, else a second writer: refused. 409 ConditionalRequestConflict (S3's answer
    while another conditional write of the key is in flight): ask again, then compare."""
    for attempt in range(5):
        try:
            client.put_object(Bucket=bucket, Key=key, Body=done, IfNoneMatch="*", **_owned(owner))
            report.requests += 1
            return
        except Exception as e:
            report.requests += 1
            code = _error_code(e)
            if code == "ConditionalRequestConflict" and attempt < 4:
                time.sleep(0.2 * 2**attempt)
                continue
            if code not in ("PreconditionFailed", "412"):
                raise S3TransportError(f"publishing s3://{bucket}/{key}: {e}") from e
            there = client.get_object(Bucket=bucket, Key=key, **_owned(owner))["Body"].read()
            report.requests += 1
            if there != done:
                raise S3TransportError(
                    f"s3://{bucket}/{key} was published by another writer (its DONE differs from this "
                    "dump's): two dumps share one prefix; give each warm its own"
                ) from e
            report.done_already = True
            return


def _upload_file(up: S3Uploader, path: Path, key: str) -> None:
    client, bucket, report, owned = up.client, up.loc.bucket, up.report, _owned(up.owner)
    name = df.parse_name(path.name)
    if name is None:
        raise S3TransportError(f"{path.name}: not a data file name")
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(df.HEADER_FIXED + df.MAX_NODE_LEN)
            f.seek(max(0, size - df.TRAILER_LEN))
            why = df.check_ends(name, head, f.read(df.TRAILER_LEN), size)
            if why is not None:
                raise S3TransportError(f"{path.name} does not verify ({why}): not uploaded")
            if _already_there(up, key, size, name.xxh3_hex):
                report.skipped += 1
                return
            f.seek(0)
            upload_id = client.create_multipart_upload(
                Bucket=bucket, Key=key, Metadata={XXH3_META: name.xxh3_hex}, **owned
            )["UploadId"]
            report.requests += 1
            try:
                parts = _send_parts(up, f, key, upload_id, name)
                client.complete_multipart_upload(
                    Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}, **owned
                )
                report.requests += 1
            except BaseException:
                # Nothing half-published: the parts go (S3 keeps and bills them until aborted).
                with contextlib.suppress(Exception):
                    client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id, **owned)
                raise
    except OSError as e:
        raise S3TransportError(f"reading {path}: {e}") from e
    report.files += 1
    report.bytes += size


def _send_parts(
    up: S3Uploader, f: Any, key: str, upload_id: str, name: df.DataFileName
) -> list[dict[str, Any]]:
    """One part in memory at a time (`part_size`): the uploader's memory does not grow with the dump."""
    client, bucket, part_size, report = up.client, up.loc.bucket, up.part_size, up.report
    h = xxhash.xxh3_64()
    parts: list[dict[str, Any]] = []
    number = 1
    while True:
        chunk = f.read(part_size)
        if not chunk and parts:
            break
        h.update(chunk)
        if up.stop.is_set():
            raise S3TransportError(f"{key}: the upload was stopped")
        up.wait_while_held()
        up.limiter.take(0, len(chunk))
        r = client.upload_part(
            Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=chunk, **_owned(up.owner)
        )
        report.requests += 1
        parts.append({"PartNumber": number, "ETag": r["ETag"]})
        number += 1
        if len(chunk) < part_size:
            break
    if h.intdigest() != name.xxh3:
        raise S3TransportError(
            f"{key}: xxh3 {h.intdigest():016x} != name's {name.xxh3_hex} (the file changed or is damaged): "
            "not published"
        )
    return parts


def _already_there(up: S3Uploader, key: str, size: int, xxh3_hex: str) -> bool:
    """The object is up with this size and xxh3 (an earlier run's upload): listed, then its metadata."""
    if up.existing().get(key) != size:
        return False
    r = up.client.head_object(Bucket=up.loc.bucket, Key=key, **_owned(up.owner))
    up.report.requests += 1
    return bool(r["ContentLength"] == size and r.get("Metadata", {}).get(XXH3_META) == xxh3_hex)


@dataclass
class DownloadReport:
    files: int = 0  # fetched and verified this run
    skipped: int = 0  # applied already (the populator's state) or staged already
    bytes: int = 0  # bytes fetched this run
    requests: int = 0
    rejected: int = 0  # fetched bytes whose xxh3 did not match: fetched again
    evicted: int = 0  # staged files deleted once the populator applied them
    short_reads: int = 0  # ranges that returned fewer bytes than asked (asked again)


@dataclass
class S3Downloader:
    """Stages one node's published objects for the populator loop; `run` returns once DONE is staged.

    Memory: at most `parallel` ranges of `part_size` bytes are in flight (a sliding window of range
    GETs over one object, written and hashed in order). Disk: at most `max_staged` files wait in the
    staging directory for the populator; a file the populator has applied is deleted (`evict`), so
    the staging directory is not a second copy of the dump."""

    client: Any
    loc: S3Location
    node: str
    staging: Path
    state_file: Path
    part_size: int = DEFAULT_PART_SIZE
    poll_interval: float = 0.5
    # How long DONE may name an object the listing does not show (a torn or lagging listing).
    missing_timeout: float = 60.0
    # Range GETs in flight at once (each holds one `part_size` range in memory).
    parallel: int = 4
    # Files staged and not yet applied, at most (the populator's look-ahead); 0 = no bound. Callers
    # that run a populator on the staging directory bound it (without one, nothing would free a slot).
    max_staged: int = 0
    # Delete a staged file once the populator's state records it applied; `run` then returns only
    # once every file DONE lists is applied (it keeps evicting until then).
    evict: bool = False
    stop: threading.Event = field(default_factory=threading.Event)
    # Called after each staged file (tests stop a run there, as a kill would).
    on_file: Callable[[str], None] = lambda name: None
    report: DownloadReport = field(default_factory=DownloadReport)
    # The account that must own the bucket (ExpectedBucketOwner); None: not checked (a local S3).
    owner: str | None = None
    _last_applied: set[str] = field(default_factory=set, repr=False)

    def _applied(self) -> set[str]:
        """Files the populator has applied to every destination (consumed and owing no re-send: a
        file owed to a restarted destination is staged again)."""
        if not self.state_file.exists():
            return set()
        try:
            st = PopulateState.load(self.state_file)
        except Exception:  # unreadable this once: the last view (never an empty one: refetch all)
            return set(self._last_applied)
        self._last_applied = {n for n in st.consumed if not st.redo.get(n)}
        return set(self._last_applied)

    def _list(self) -> dict[str, int]:
        base = self.loc.node_prefix(self.node)
        found: dict[str, int] = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.loc.bucket, Prefix=base, **_owned(self.owner)
        ):
            self.report.requests += 1
            for obj in page.get("Contents", []):
                found[obj["Key"][len(base) :]] = int(obj["Size"])
        return found

    def _staged_waiting(self, applied: set[str]) -> int:
        """Evict the applied staged files; return how many staged files still wait for the populator."""
        waiting = 0
        for entry in os.listdir(self.staging):
            if entry.startswith(".") or df.parse_name(entry) is None:
                continue
            if entry in applied and self.evict:
                with contextlib.suppress(FileNotFoundError):
                    (self.staging / entry).unlink()
                    self.report.evicted += 1
            elif entry not in applied:
                waiting += 1
        return waiting

    def run(self) -> DownloadReport:
        if self.parallel < 1:
            raise ValueError(f"parallel range GETs must be >= 1, got {self.parallel}")
        self.staging.mkdir(parents=True, exist_ok=True)
        base = self.loc.node_prefix(self.node)
        missing_since: float | None = None
        with ThreadPoolExecutor(self.parallel, thread_name_prefix="s3-range") as pool:
            while not self.stop.is_set():
                listed = self._list()
                manifest: df.Manifest | None = None
                done_bytes = b""
                if df.MANIFEST_NAME in listed:
                    body = self.client.get_object(
                        Bucket=self.loc.bucket, Key=base + df.MANIFEST_NAME, **_owned(self.owner)
                    )["Body"]
                    self.report.requests += 1
                    done_bytes = body.read()
                    try:
                        manifest = df.parse_manifest(done_bytes, f"s3://{self.loc.bucket}/{base}DONE")
                    except df.FormatError as e:
                        raise S3TransportError(str(e)) from e
                applied = self._applied()
                skipped: set[str] = set()
                for obj, size in sorted(listed.items()):
                    if self.stop.is_set():
                        return self.report
                    name = df.parse_name(obj)
                    if name is None:
                        continue
                    if obj in applied or (self.staging / obj).exists():
                        skipped.add(obj)
                        continue
                    while self.max_staged and self._staged_waiting(self._applied()) >= self.max_staged:
                        if self.stop.wait(self.poll_interval / 5):
                            return self.report
                    self._fetch(pool, base + obj, name, size)
                    self.on_file(obj)
                applied = self._applied()
                self._staged_waiting(applied)
                if manifest is not None:
                    absent = [
                        f.name
                        for f in manifest.files
                        if f.name not in applied and not (self.staging / f.name).exists()
                    ]
                    if not absent:
                        self.report.skipped = len(skipped)
                        if not (self.staging / df.MANIFEST_NAME).exists():
                            _write_atomically(self.staging / df.MANIFEST_NAME, done_bytes)
                        return self._evict_until_applied(manifest)
                    now = time.monotonic()
                    missing_since = missing_since or now
                    if now - missing_since > self.missing_timeout:
                        raise S3TransportError(
                            f"DONE lists {absent[0]} ({len(absent)} objects) but "
                            f"s3://{self.loc.bucket}/{base} did not show it within {self.missing_timeout:g}s"
                        )
                self.stop.wait(self.poll_interval)
        return self.report

    def evict_applied(self) -> None:
        """Delete the staged files the populator has applied (also after `run`: the populator may
        finish, and stop the download, before its last files were evicted)."""
        if self.evict:
            self._staged_waiting(self._applied())

    def _evict_until_applied(self, manifest: df.Manifest) -> DownloadReport:
        """Everything is staged: delete what the populator applies until it has applied every file
        (without evicting, return at once). No more listings: DONE says what there is."""
        while self.evict:
            applied = self._applied()
            self._staged_waiting(applied)
            if all(f.name in applied for f in manifest.files):
                break
            # A file owed again (a destination restarted) and already evicted is fetched again.
            for f in manifest.files:
                if f.name not in applied and not (self.staging / f.name).exists():
                    name = df.parse_name(f.name)
                    if name is not None:
                        self._refetch(f.name, name)
            if self.stop.wait(self.poll_interval / 5):
                break
        return self.report

    def _refetch(self, obj: str, name: df.DataFileName) -> None:
        base = self.loc.node_prefix(self.node)
        head = self.client.head_object(Bucket=self.loc.bucket, Key=base + obj, **_owned(self.owner))
        self.report.requests += 1
        with ThreadPoolExecutor(self.parallel, thread_name_prefix="s3-range") as pool:
            self._fetch(pool, base + obj, name, int(head["ContentLength"]))

    def _fetch(self, pool: ThreadPoolExecutor, key: str, name: df.DataFileName, size: int) -> None:
        """Range GETs into `.<name>.part` (resuming at its length), xxh3 checked, then renamed into view."""
        tmp = self.staging / f".{key.rsplit('/', 1)[-1]}.part"
        h = xxhash.xxh3_64()
        have = 0
        if tmp.exists():  # a run killed mid-object: hash what is here instead of fetching it again
            with open(tmp, "rb") as f:
                for chunk in iter(lambda: f.read(self.part_size), b""):
                    h.update(chunk)
                    have += len(chunk)
            if have > size:
                tmp.unlink()
                h, have = xxhash.xxh3_64(), 0
        with open(tmp, "ab") as out:
            out.truncate(have)
            for chunk in self._ranges(pool, key, have, size):
                h.update(chunk)
                out.write(chunk)
                self.report.bytes += len(chunk)
            out.flush()
            os.fsync(out.fileno())
        if h.intdigest() != name.xxh3:
            tmp.unlink()
            self.report.rejected += 1
            raise DamagedObject(
                f"s3://{self.loc.bucket}/{key}: fetched xxh3 {h.intdigest():016x} != name's {name.xxh3_hex}: "
                "the object is damaged; nothing of it was sent"
            )
        os.rename(tmp, self.staging / key.rsplit("/", 1)[-1])
        self.report.files += 1

    def _get_range(self, key: str, start: int, end: int) -> bytes:
        """One range; a short answer (a connection cut, a proxy) is asked again, then named."""
        for attempt in range(SHORT_READ_ATTEMPTS):
            if attempt:
                self.report.requests += 1
                self.report.short_reads += 1
            body = self.client.get_object(
                Bucket=self.loc.bucket, Key=key, Range=f"bytes={start}-{end}", **_owned(self.owner)
            )["Body"]
            chunk: bytes = body.read()
            if len(chunk) == end - start + 1:
                return chunk
        raise S3TransportError(
            f"{key}: range {start}-{end} returned {len(chunk)} of {end - start + 1} bytes "
            f"{SHORT_READ_ATTEMPTS} times"
        )

    def _ranges(self, pool: ThreadPoolExecutor, key: str, start: int, size: int) -> Iterator[bytes]:
        """The object's bytes from `start`, in order, with up to `parallel` range GETs in flight."""
        window: deque[Future[bytes]] = deque()
        pos = start
        try:
            while pos < size or window:
                while pos < size and len(window) < self.parallel:
                    end = min(size, pos + self.part_size) - 1
                    window.append(pool.submit(self._get_range, key, pos, end))
                    self.report.requests += 1
                    pos = end + 1
                yield window.popleft().result()
        finally:
            for fut in window:  # a failure or a stop: the ranges still in flight are not needed
                fut.cancel()


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def delete_prefix(client: Any, loc: S3Location, owner: str | None = None) -> int:
    """Delete every object and abort every multipart upload under `loc`'s prefix; returns objects deleted."""
    prefix = f"{loc.prefix}/" if loc.prefix else ""
    owned = _owned(owner)
    deleted = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=loc.bucket, Prefix=prefix, **owned):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            r = client.delete_objects(Bucket=loc.bucket, Delete={"Objects": keys, "Quiet": True}, **owned)
            if errors := r.get("Errors"):
                raise S3TransportError(f"deleting under {loc}: {errors[0]}")
            deleted += len(keys)
    for page in client.get_paginator("list_multipart_uploads").paginate(
        Bucket=loc.bucket, Prefix=prefix, **owned
    ):
        for u in page.get("Uploads", []):
            client.abort_multipart_upload(Bucket=loc.bucket, Key=u["Key"], UploadId=u["UploadId"], **owned)
    return deleted
