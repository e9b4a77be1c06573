"""The S3 transport's upload (`upload_dump`, `S3Uploader`), on the source node.

Every data file DONE lists goes up as a multipart upload, one part in memory at a time (`part_size`),
its own bytes/s limit. Checks 1-2 of docs/data-format.md (header, trailer) are read first, the xxh3 is
computed over the very bytes sent; a file whose checksum does not match its name is aborted (its parts
deleted) and nothing more is published. DONE goes last, with `If-None-Match: *`: a second writer of
the same prefix cannot replace it. The layout and what both sides share: `s3transport.py`.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import xxhash

from cachewarm.datapath import format as df
from cachewarm.datapath.populate.ratelimit import RateLimiter
from cachewarm.datapath.s3transport import (
    DEFAULT_PART_SIZE,
    MAX_PART_SIZE,
    MIN_PART_SIZE,
    XXH3_META,
    S3Location,
    S3TransportError,
    error_code,
    owner_args,
)


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
                Bucket=self.loc.bucket, Prefix=self.base, **owner_args(self.owner)
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
            client.put_object(Bucket=bucket, Key=key, Body=done, IfNoneMatch="*", **owner_args(owner))
            report.requests += 1
            return
        except Exception as e:
            report.requests += 1
            code = error_code(e)
            if code == "ConditionalRequestConflict" and attempt < 4:
                time.sleep(0.2 * 2**attempt)
                continue
            if code not in ("PreconditionFailed", "412"):
                raise S3TransportError(f"publishing s3://{bucket}/{key}: {e}") from e
            there = client.get_object(Bucket=bucket, Key=key, **owner_args(owner))["Body"].read()
            report.requests += 1
            if there != done:
                raise S3TransportError(
                    f"s3://{bucket}/{key} was published by another writer (its DONE differs from this "
                    "dump's): two dumps share one prefix; give each warm its own"
                ) from e
            report.done_already = True
            return


def _upload_file(up: S3Uploader, path: Path, key: str) -> None:
    client, bucket, report, owned = up.client, up.loc.bucket, up.report, owner_args(up.owner)
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
            Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=chunk, **owner_args(up.owner)
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
    r = up.client.head_object(Bucket=up.loc.bucket, Key=key, **owner_args(up.owner))
    up.report.requests += 1
    return bool(r["ContentLength"] == size and r.get("Metadata", {}).get(XXH3_META) == xxh3_hex)
