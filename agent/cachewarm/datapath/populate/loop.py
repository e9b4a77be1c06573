"""The populator loop (issue 3): take complete, verified data files and write their items to the
destination memcached(s), without ever overwriting a fresher value (add mode by default).

Loop: list the directory, skip temp names and consumed files, hand the rest to a pool of worker
processes (`worker.apply_file`). A worker verifies the whole file (docs/data-format.md section 3:
length, trailer and checksum first, then every record) before it sends any item, then writes every
item with pipelined quiet meta sets, routed by ketama. The main process marks the file consumed in a
state file outside the volume (`state.py`, atomic replace). With a real remount (`CommandRemounter`)
the loop works in rounds: all files of a round finish, then the volume is remounted; on a plain
directory files stream through. Finished exactly when DONE exists and every file it lists is
consumed; then the counts are checked against the manifest.

A destination that restarted comes back empty: each outcome carries the destination's identity
(pid + start time) and a change means every file consumed so far is redone (add mode makes the
redo harmless on the nodes that did not restart).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, Future, wait
from dataclasses import asdict, dataclass, field
from typing import Any

from cachewarm.datapath import format as df
from cachewarm.datapath.ketama import KetamaRing
from cachewarm.datapath.meta import ServerIdentity
from cachewarm.datapath.pool import process_pool
from cachewarm.datapath.populate.config import PopulateConfig, PopulateError
from cachewarm.datapath.populate.destinations import DestinationProbe
from cachewarm.datapath.populate.state import ConsumedFile, PopulateState
from cachewarm.datapath.populate.worker import DEST_ERROR, FileOutcome, apply_file
from cachewarm.datapath.remount import RemountError


@dataclass
class Progress:
    event: str
    round: int
    files_consumed: int
    files_pending: int
    items: int
    stored: int
    already_present: int
    expired: int
    bytes: int
    elapsed_s: float
    items_per_s: float
    detail: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


@dataclass
class PopulateSummary:
    files: int
    records: int
    stored: int
    already_present: int
    expired: int
    bytes: int
    elapsed_s: float
    manifest_records: int
    restarts_detected: int
    per_node: dict[str, int]
    # Items the destinations evicted while we wrote (too small a destination): they are gone.
    destination_evictions: int = 0

    def to_json(self) -> str:
        return json.dumps({"event": "summary", **asdict(self)}, separators=(",", ":"))


@dataclass
class Populator:
    config: PopulateConfig
    on_progress: Callable[[Progress], None] = lambda p: None
    state: PopulateState = field(init=False)
    _start: float = field(init=False, default=0.0)
    _round: int = field(init=False, default=0)
    _last_save: float = field(init=False, default=0.0)
    _dead: set[tuple[str, tuple[int, int]]] = field(init=False, default_factory=set)
    _per_node: dict[str, int] = field(init=False, default_factory=dict)
    _destinations: DestinationProbe = field(init=False)

    def __post_init__(self) -> None:
        self._destinations = DestinationProbe(self.config.destinations, self.config.destination_timeout)

    def _emit(self, event: str, pending: int = 0, detail: str = "") -> None:
        s = self.state.consumed.values()
        items = sum(f.records for f in s)
        elapsed = time.monotonic() - self._start
        self.on_progress(
            Progress(
                event=event,
                round=self._round,
                files_consumed=len(self.state.consumed),
                files_pending=pending,
                items=items,
                stored=sum(f.stored for f in s),
                already_present=sum(f.present for f in s),
                expired=sum(f.expired for f in s),
                bytes=sum(f.bytes for f in s),
                elapsed_s=round(elapsed, 3),
                items_per_s=round(items / elapsed, 1) if elapsed > 0 else 0.0,
                detail=detail,
            )
        )

    def _save(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_save >= 0.5:
            self.state.save(self.config.state_file)
            self._last_save = now

    def _check_identities(self, seen: dict[str, tuple[int, int]]) -> bool:
        """Compare a worker's view of the destinations with ours. Returns False if the outcome was
        written to a server that has since restarted (the outcome must be redone)."""
        ok = True
        for addr, ident in seen.items():
            if (addr, ident) in self._dead:
                ok = False
                continue
            base = self.state.identities.get(addr)
            if base is None:
                self.state.identities[addr] = ident
            elif not ServerIdentity(*base).same_as(ServerIdentity(*ident)):
                # The destination restarted (came back empty): redo everything consumed so far.
                self._dead.add((addr, base))
                self.state.identities[addr] = ident
                self.state.restarts_detected += 1
                redo = len(self.state.consumed)
                self.state.consumed.clear()
                self._per_node.clear()
                self._save(force=True)
                self._emit("destination_restarted", detail=f"{addr}: redoing {redo} consumed files")
        return ok

    def _probe_destinations(self) -> None:
        """Connect to each destination (with backoff) and check it did not restart."""
        self._check_identities(self._destinations.probe())

    def _scan(self) -> tuple[dict[str, df.DataFileName], bool]:
        names: dict[str, df.DataFileName] = {}
        try:
            entries = os.listdir(self.config.source_dir)
        except FileNotFoundError:
            return names, False
        done = False
        for e in entries:
            if e == df.MANIFEST_NAME:
                done = True
            elif not e.startswith("."):
                p = df.parse_name(e)
                if p is not None:
                    names[e] = p
        return names, done

    def run(self) -> PopulateSummary:
        c = self.config
        if not c.destinations:
            raise PopulateError("no destination given")
        if c.workers < 1:
            raise PopulateError(f"workers must be >= 1, got {c.workers}")
        if len(c.destinations) > 1:
            try:  # fail before any work on a ring that cannot route (colliding node keys)
                KetamaRing(c.destinations, c.node_key_format, c.ketama_reps, c.hash_delimiter)
            except ValueError as e:
                raise PopulateError(str(e)) from e
        if not c.source_dir.is_dir():
            raise PopulateError(f"source directory {c.source_dir} does not exist")
        self._start = time.monotonic()
        self.state = PopulateState.load(c.state_file)
        addrs = [n.address for n in c.destinations]
        if self.state.consumed and self.state.destinations and self.state.destinations != addrs:
            raise PopulateError(
                f"state file {c.state_file} records files written to {','.join(self.state.destinations)}, "
                f"not to {','.join(addrs)}: use another --state-file"
            )
        self.state.destinations = addrs
        self._probe_destinations()
        self._save(force=True)
        params = self.config.worker_params()
        bad_since: dict[str, float] = {}
        last_new = time.monotonic()
        seen_any: set[str] = set()
        self._emit("start", detail=f"{c.source_dir} -> {','.join(n.address for n in c.destinations)}")
        # A real remount needs every file closed; a plain directory lets files stream through.
        quiesce = bool(getattr(c.remounter, "quiesce", True))
        inflight: dict[Future[FileOutcome], str] = {}
        retry_at: dict[str, float] = {}
        last_round_event = 0.0
        with process_pool(c.workers) as pool:
            try:
                while True:
                    if quiesce and self._round > 0 and not self._refresh(bad_since):
                        time.sleep(c.poll_interval)
                        continue
                    self._round += 1
                    if c.should_abort is not None and (why := c.should_abort()) is not None:
                        raise PopulateError(why)
                    names, done_exists = self._scan()
                    if set(names) - seen_any or done_exists:
                        last_new = time.monotonic()
                    seen_any |= set(names)
                    manifest = self._read_manifest(done_exists, bad_since)
                    busy = set(inflight.values())
                    now = time.monotonic()
                    todo = sorted(
                        (
                            n
                            for n in names
                            if n not in self.state.consumed and n not in busy and retry_at.get(n, 0.0) <= now
                        ),
                        key=lambda n: names[n],
                    )
                    # Bounded queue so files are applied roughly in publish order.
                    room = len(todo) if quiesce else max(0, 2 * c.workers - len(inflight))
                    for n in todo[:room]:
                        inflight[pool.submit(apply_file, str(c.source_dir / n), params)] = n
                    progressed = False
                    if inflight:
                        finished, _ = wait(
                            set(inflight),
                            timeout=None if quiesce else c.poll_interval,
                            return_when=ALL_COMPLETED if quiesce else FIRST_COMPLETED,
                        )
                        for fut in finished:
                            name = inflight.pop(fut)
                            try:
                                out = fut.result()
                            except Exception as e:  # a worker died (OOM kill) or hit a bug
                                raise PopulateError(f"worker failed on {name}: {e!r}") from e
                            if self._handle(out, bad_since):
                                progressed = True
                            elif out.status != "ok":
                                retry_at[name] = time.monotonic() + c.poll_interval
                    self._save()
                    now = time.monotonic()
                    if manifest is not None:
                        listed = {f.name for f in manifest.files}
                        unlisted = sorted(set(names) - listed)
                        if unlisted:
                            raise PopulateError(
                                f"published data file(s) not listed in DONE: {', '.join(unlisted[:5])}"
                            )
                        missing = sorted(listed - set(self.state.consumed))
                        if not missing and not inflight:
                            # Last look: a destination that restarted since the last file lost our items.
                            self._probe_destinations()
                            if not set(listed) - set(self.state.consumed):
                                return self._finish(manifest)
                            continue
                        for m in missing:
                            if m not in names:
                                first = bad_since.setdefault(m, now)
                                if now - first > c.bad_file_timeout:
                                    raise PopulateError(
                                        f"DONE lists {m} but it did not appear in {c.source_dir} within "
                                        f"{c.bad_file_timeout:g}s"
                                    )
                    elif c.idle_timeout is not None and now - last_new > c.idle_timeout:
                        raise PopulateError(
                            f"no data file and no DONE appeared in {c.source_dir} for {c.idle_timeout:g}s"
                        )
                    if not progressed:
                        if now - last_round_event >= c.progress_interval:
                            last_round_event = now
                            self._emit("waiting", pending=len(todo) + len(inflight))
                        if not inflight:
                            time.sleep(c.poll_interval)
            except BaseException:
                for f in inflight:
                    f.cancel()
                self._save(force=True)
                raise

    def _refresh(self, bad_since: dict[str, float]) -> bool:
        """Remount; a failure is retried next round until bad_file_timeout, then it is fatal."""
        try:
            self.config.remounter.refresh()
        except RemountError as e:
            first = bad_since.setdefault("<remount>", time.monotonic())
            if time.monotonic() - first > self.config.bad_file_timeout:
                raise PopulateError(f"remounting failed for {self.config.bad_file_timeout:g}s: {e}") from e
            self._emit("remount_failed", detail=str(e))
            return False
        bad_since.pop("<remount>", None)
        return True

    def _read_manifest(self, done_exists: bool, bad_since: dict[str, float]) -> df.Manifest | None:
        if not done_exists:
            return None
        try:
            m = df.read_manifest(self.config.source_dir / df.MANIFEST_NAME)
        except (df.ManifestNotReadable, OSError) as e:
            # On a ro,norecovery mount DONE may be visible before its bytes are.
            first = bad_since.setdefault(df.MANIFEST_NAME, time.monotonic())
            if time.monotonic() - first > self.config.bad_file_timeout:
                raise PopulateError(f"DONE is unreadable for {self.config.bad_file_timeout:g}s: {e}") from e
            return None
        except df.FormatError as e:
            # Whole JSON that breaks the format is a lie, not a half-visible file: stop now.
            raise PopulateError(f"DONE is invalid: {e}") from e
        bad_since.pop(df.MANIFEST_NAME, None)
        return m

    def _handle(self, out: FileOutcome, bad_since: dict[str, float]) -> bool:
        c = self.config
        if out.status == "ok":
            if not self._check_identities(out.identities):
                return False  # written to a server that restarted since: redo next round
            self.state.consumed[out.name] = ConsumedFile(
                out.records, out.stored, out.present, out.expired, out.bytes
            )
            for addr, n in out.per_node.items():
                self._per_node[addr] = self._per_node.get(addr, 0) + n
            bad_since.pop(out.name, None)
            self._save()
            self._emit("file", detail=out.name)
            return True
        if out.status == DEST_ERROR:
            self._save(force=True)
            raise PopulateError(f"writing {out.name}: {out.reason}")
        if out.status == df.Status.CORRUPT.value:
            raise PopulateError(f"{out.name} is corrupt (checksum verifies, records do not): {out.reason}")
        first = bad_since.setdefault(out.name, time.monotonic())
        if time.monotonic() - first > c.bad_file_timeout:
            raise PopulateError(
                f"{out.name} stayed unverifiable for {c.bad_file_timeout:g}s ({out.status}: {out.reason})"
            )
        return False

    def _finish(self, manifest: df.Manifest) -> PopulateSummary:
        files = [self.state.consumed[f.name] for f in manifest.files]
        for mf, cf in zip(manifest.files, files, strict=True):
            if cf.records != mf.records:
                raise PopulateError(f"{mf.name}: applied {cf.records} records, DONE says {mf.records}")
            if cf.stored + cf.present + cf.expired != cf.records:
                raise PopulateError(
                    f"{mf.name}: stored {cf.stored} + present {cf.present} + expired {cf.expired} "
                    f"!= records {cf.records}"
                )
        records = sum(f.records for f in files)
        if records != manifest.total_records:
            raise PopulateError(f"applied {records} records, DONE's totals say {manifest.total_records}")
        self._save(force=True)
        summary = PopulateSummary(
            files=len(files),
            records=records,
            stored=sum(f.stored for f in files),
            already_present=sum(f.present for f in files),
            expired=sum(f.expired for f in files),
            bytes=sum(f.bytes for f in files),
            elapsed_s=round(time.monotonic() - self._start, 3),
            manifest_records=manifest.total_records,
            restarts_detected=self.state.restarts_detected,
            per_node=dict(self._per_node),
            destination_evictions=self._destinations.evictions,
        )
        if summary.destination_evictions:
            self._emit(
                "warning",
                detail=f"destinations evicted {summary.destination_evictions} items during the populate: "
                "they are too small for the data",
            )
        self._emit("done")
        return summary


def populate(
    config: PopulateConfig, on_progress: Callable[[Progress], None] | None = None
) -> PopulateSummary:
    """Run the populator to the end; raises PopulateError (message names the problem) on failure."""
    return Populator(config, on_progress or (lambda p: None)).run()


def progress_printer(stream: Any) -> Callable[[Progress], None]:
    def emit(p: Progress) -> None:
        stream.write(p.to_json() + "\n")
        stream.flush()

    return emit
