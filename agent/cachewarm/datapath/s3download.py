"""The S3 transport's download (`S3Downloader`), on a populator.

Lists the node's prefix, fetches each data object with range GETs into a dot-named file in a staging
directory (the populator loop skips dot names), checks the xxh3 against the name and only then
renames it into view; DONE is staged last, once every file it lists is staged or applied. The
populator loop (datapath/populate) then runs unchanged on the staging directory and verifies every
file again (checks 1-4) before it sends an item. Progress: a file the populator's state file records
as consumed, or that is already staged, is never fetched again; a partly fetched file resumes at its
length. The layout and what both sides share: `s3transport.py`.
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
from cachewarm.datapath.populate.state import PopulateState
from cachewarm.datapath.s3transport import (
    DEFAULT_PART_SIZE,
    DamagedObject,
    S3Location,
    S3TransportError,
    owner_args,
)

# A range GET that returns fewer bytes than asked is asked again this many times in all.
SHORT_READ_ATTEMPTS = 3


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
            Bucket=self.loc.bucket, Prefix=base, **owner_args(self.owner)
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
                        Bucket=self.loc.bucket, Key=base + df.MANIFEST_NAME, **owner_args(self.owner)
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
        head = self.client.head_object(Bucket=self.loc.bucket, Key=base + obj, **owner_args(self.owner))
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
                Bucket=self.loc.bucket, Key=key, Range=f"bytes={start}-{end}", **owner_args(self.owner)
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
