"""The populator loop: take complete, verified data files and write their items to the
destination memcached(s), without ever overwriting a fresher value (add mode by default).

Loop: list the directory, skip temp names and consumed files, hand the rest to a pool of worker
processes (`worker.apply_file`). A worker verifies the whole file (docs/data-format.md section 3:
length, trailer and checksum first, then every record) before it sends any item, then writes every
item with pipelined quiet meta sets, routed by ketama. The main process marks the file consumed in a
state file outside the volume (`state.py`, atomic replace). With a real remount (`CommandRemounter`)
the loop works in rounds: all files of a round finish, then the volume is remounted; on a plain
directory files stream through. Finished exactly when DONE exists and every file it lists is
consumed; then the counts are checked against the manifest.

Before writing, every destination is read (`destinations.py`): its item size limit decides which
items are never sent, and one with evictions off is refused unless accepted. A destination that
restarted comes back empty and is sent its items again (`restarts.py`). At the end (`finish.py`) the
run is complete only if no item was too large, no destination evicted and the dump says it is
complete; otherwise it raises PopulateIncomplete with the summary, unless the user accepted those
reasons.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from concurrent.futures import (
    ALL_COMPLETED,
    FIRST_COMPLETED,
    BrokenExecutor,
    Future,
    wait,
)
from dataclasses import asdict, dataclass, field, replace

from cachewarm.datapath import format as df
from cachewarm.datapath.encode import FileJob
from cachewarm.datapath.nodes import Node, resolve_nodes
from cachewarm.datapath.pool import process_pool
from cachewarm.datapath.populate import finish, liveops
from cachewarm.datapath.populate.clocks import DestinationClocks, SourceClockWatch
from cachewarm.datapath.populate.config import (
    DestinationUnreachable,
    DumpDataError,
    DumpTimeout,
    PopulateConfig,
    PopulateError,
    PopulateSettingError,
)
from cachewarm.datapath.populate.destinations import DestinationProbe
from cachewarm.datapath.populate.recheck import (
    SOURCE_RESTARTED,
    RecheckJob,
    RecheckOutcome,
    recheck_file,
)
from cachewarm.datapath.populate.report import (
    OversizeReport,
    PopulateSummary,
    Progress,
    summarize,
)
from cachewarm.datapath.populate.restarts import RestartWatch
from cachewarm.datapath.populate.state import ConsumedFile, NodeCounts, PopulateState, StartedJournal
from cachewarm.datapath.populate.volume import VolumeView
from cachewarm.datapath.populate.worker import (
    DEST_ERROR,
    DEST_UNAVAILABLE,
    HOST_CLOCK,
    NO_STAMPS,
    FileOutcome,
    apply_file,
)


@dataclass
class Populator:
    config: PopulateConfig
    on_progress: Callable[[Progress], None] = lambda p: None
    state: PopulateState = field(init=False)
    # The destinations, their names resolved once (the node key's {ip}; where we connect).
    nodes: list[Node] = field(init=False, default_factory=list)
    _start: float = field(init=False, default=0.0)
    _round: int = field(init=False, default=0)
    _last_save: float = field(init=False, default=0.0)
    _last_check: float = field(init=False, default=0.0)
    _reprobe: bool = field(init=False, default=False)
    _restarts: RestartWatch = field(init=False)
    _clocks: DestinationClocks = field(init=False, default_factory=DestinationClocks)
    _destinations: DestinationProbe = field(init=False)
    # The source memcached's clock from this host (config.source, when reached).
    _source: SourceClockWatch = field(init=False)
    _volume: VolumeView = field(init=False)
    _journal: StartedJournal = field(init=False)
    _report: OversizeReport = field(init=False)
    # The data format version of each file this run verified (DONE's `version` must agree).
    _versions: dict[str, int] = field(init=False, default_factory=dict)
    _sums: tuple[int, int, NodeCounts] | None = field(init=False, default=None)
    # For the progress display: data files seen so far, and DONE's item count once it is read.
    _published: int = field(init=False, default=0)
    _total: int | None = field(init=False, default=None)
    # Add mode's store and re-check (liveops.preflight).
    _liveops: liveops.Liveops = field(init=False, default_factory=liveops.Liveops)
    # Applied files waiting for their re-check (not consumed yet), and when each falls due (wall clock).
    _awaiting: dict[str, FileOutcome] = field(init=False, default_factory=dict)
    _due: dict[str, float] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._source = SourceClockWatch(self.config.source)
        self._volume = VolumeView(self.config, lambda event, detail: self._emit(event, detail=detail))

    def _totals(self) -> NodeCounts:
        t = NodeCounts()
        for f in self.state.consumed.values():
            t.add(f.total())
        return t

    def _tally(self) -> tuple[int, int, NodeCounts]:
        """(items, bytes, counts) of the consumed files, kept up to date by _handle (a progress event
        per file must not cost a walk over every file: O(files^2) on a large dump)."""
        if self._sums is None:
            s = self.state.consumed.values()
            self._sums = (sum(f.records for f in s), sum(f.bytes for f in s), self._totals())
        return self._sums

    def _emit(self, event: str, pending: int = 0, detail: str = "") -> None:
        items, nbytes, t = self._tally()
        elapsed = time.monotonic() - self._start
        self.on_progress(
            Progress(
                event=event,
                round=self._round,
                files_consumed=len(self.state.consumed),
                files_pending=pending,
                items=items,
                stored=t.stored,
                already_present=t.present,
                expired=t.expired,
                bytes=nbytes,
                elapsed_s=round(elapsed, 3),
                items_per_s=round(items / elapsed, 1) if elapsed > 0 else 0.0,
                detail=detail,
                files_published=self._published,
                total_items=self._total,
            )
        )

    def _save(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_save >= 0.5:
            self.state.save(self.config.state_file)
            self._last_save = now

    def _restarted(self, addr: str, files: int) -> None:
        self._reprobe = True  # its settings may have changed too
        self._save(force=True)
        self._emit("destination_restarted", detail=f"{addr}: re-sending its items of {files} files")

    def _probe_destinations(self) -> None:
        """Look at each destination (with backoff): did one restart, does each still evict, did one
        evict items."""
        before = self._destinations.evictions
        self._restarts.check(self._destinations.probe())
        self._reprobe = False
        self._last_check = time.monotonic()
        if old := self._destinations.too_old():
            raise PopulateError(f"destination(s) {', '.join(old)} predate memcached 1.6's meta protocol")
        off = self._destinations.without_evictions()
        if off and not self.config.accept_no_evictions:
            raise PopulateError(
                f"destination(s) {', '.join(off)} run with evictions off (memcached -M): when one fills "
                "up it fails stores (the run fails; in set mode each failed store deletes its key's value). "
                "Give it memory for the whole dump and pass --accept-no-evictions, or run it with "
                "evictions on"
            )
        if self._destinations.evictions > before:
            self._emit(
                "evictions", detail=f"destinations evicted items: {self._destinations.evictions_by_node()}"
            )

    def _file_job(self, name: str, started_before: bool) -> FileJob:
        redo = self.state.redo.get(name) if name in self.state.consumed else None
        only = frozenset(i for i, n in enumerate(self.nodes) if n.address in redo) if redo else None
        # A file that may have been started before resends with tagged sets (worker._ours).
        return FileJob(
            self._destinations.budgets(),
            only,
            tagged=started_before,
            clock_lows=self._destinations.clock_lows(),
            source_clock=self._source.clock,
        )

    def run(self) -> PopulateSummary:
        try:
            return self._run()
        finally:
            self._source.close()

    def _run(self) -> PopulateSummary:
        c = self.config
        if not c.destinations:
            raise PopulateError("no destination given")
        if c.workers < 1:
            raise PopulateError(f"workers must be >= 1, got {c.workers}")
        try:  # fail before any work on a name that does not resolve or a ring that cannot route
            self.nodes = resolve_nodes(c.destinations)
            routing = c.routing.describe(self.nodes)
        except ValueError as e:
            raise PopulateError(str(e)) from e
        if not c.source_dir.is_dir():
            raise PopulateError(f"source directory {c.source_dir} does not exist")
        self._start = time.monotonic()
        self.state = PopulateState.load(c.state_file)
        self._restarts = RestartWatch(self.state, self._restarted)
        # A re-run of a finished populate applies nothing: its summary says so, not a speed.
        self._consumed_before = frozenset(self.state.consumed)
        if self.state.consumed and self.state.routing != routing:
            raise PopulateSettingError(
                f"state file {c.state_file} records files written with routing "
                f"{json.dumps(self.state.routing)}, not {json.dumps(routing)}: give the same destinations "
                "and routing options, or start afresh (populate: another --state-file; warm: an empty "
                "--workdir)"
            )
        if not self.state.consumed and c.oversize_report_path.exists():
            c.oversize_report_path.unlink()  # a previous run's, of a state that is gone
        self.state.routing = routing
        self._journal = StartedJournal.open(c.state_file, self.state)
        self._report = OversizeReport(c.oversize_report_path)
        self._destinations = DestinationProbe(
            self.nodes, c.destination_timeout, self.state.evictions_base, on_wait=self._waiting
        )
        self._probe_destinations()
        self._liveops = liveops.preflight(c, self._destinations)
        self._source.measure()
        self._save(force=True)
        params = replace(c.worker_params(), nodes=tuple(self.nodes), store=self._liveops.store)
        bad_since: dict[str, float] = {}
        last_new = time.monotonic()
        seen_any: set[str] = set()
        self._emit("start", detail=f"{c.source_dir} -> {','.join(n.address for n in c.destinations)}")
        self._emit("clocks", detail=self._source.detail(self._destinations))
        # A real remount needs every file closed; a plain directory lets files stream through.
        quiesce = bool(getattr(c.remounter, "quiesce", True))
        inflight: dict[Future[FileOutcome], str] = {}
        retry_at: dict[str, float] = {}
        last_round_event = 0.0
        with contextlib.nullcontext(c.pool) if c.pool is not None else process_pool(c.workers) as pool:
            try:
                while True:
                    if quiesce and self._round > 0 and not self._volume.refresh(bad_since):
                        time.sleep(c.poll_interval)
                        continue
                    self._round += 1
                    if c.should_abort is not None and (why := c.should_abort()) is not None:
                        raise PopulateError(why)
                    names, done_exists = self._volume.scan()
                    if set(names) - seen_any or done_exists:
                        last_new = time.monotonic()
                    seen_any |= set(names)
                    self._published = len(seen_any)
                    manifest = self._volume.read_manifest(done_exists, bad_since)
                    if manifest is not None:
                        self._total = manifest.total_records
                    busy = set(inflight.values()) | set(self._awaiting)
                    now = time.monotonic()
                    todo = sorted(
                        (
                            n
                            for n in names
                            if not self.state.done(n) and n not in busy and retry_at.get(n, 0.0) <= now
                        ),
                        key=lambda n: names[n],
                    )
                    # Re-checks that fell due: before new files (they hold files back from being consumed).
                    for n in sorted(n for n, t in self._due.items() if t <= time.time()):
                        del self._due[n]
                        job = RecheckJob(n, self._awaiting[n].recheck, c.source, self._liveops.source_ident)  # type: ignore[arg-type]
                        try:
                            inflight[pool.submit(recheck_file, str(c.source_dir / n), params, job)] = n
                        except BrokenExecutor as e:
                            raise PopulateError(
                                f"a worker process died before the re-check of {n}: {e}"
                            ) from e
                    if self._reprobe or now - self._last_check >= c.destination_check_interval:
                        self._probe_destinations()
                    self._source.measure()
                    # Bounded queue so files are applied roughly in publish order.
                    room = len(todo) if quiesce else max(0, 2 * c.workers - len(inflight))
                    # Journaled with one fsync for all the files handed out this round.
                    started = self._journal.add_many(todo[:room])
                    for n in todo[:room]:
                        job = self._file_job(n, n in started)
                        try:
                            inflight[pool.submit(apply_file, str(c.source_dir / n), params, job)] = n
                        except BrokenExecutor as e:  # a worker was killed (OOM, a signal sent to it)
                            raise PopulateError(f"a worker process died before {n}: {e}") from e
                    progressed = False
                    if inflight:
                        finished, _ = wait(
                            set(inflight),
                            timeout=None if quiesce else self._wait_s(c.poll_interval),
                            return_when=ALL_COMPLETED if quiesce else FIRST_COMPLETED,
                        )
                        for fut in finished:
                            name = inflight.pop(fut)
                            try:
                                out = fut.result()
                            except Exception as e:  # a worker died (OOM kill) or hit a bug
                                raise PopulateError(f"worker failed on {name}: {e!r}") from e
                            if isinstance(out, RecheckOutcome):
                                progressed = self._handle_recheck(out, bad_since) or progressed
                            elif self._handle(out, bad_since):
                                progressed = True
                            elif out.status != "ok":
                                retry_at[name] = time.monotonic() + c.poll_interval
                    self._save()
                    now = time.monotonic()
                    if manifest is not None:
                        listed = {f.name for f in manifest.files}
                        unlisted = sorted(set(names) - listed)
                        if unlisted:
                            raise DumpDataError(
                                f"published data file(s) not listed in DONE: {', '.join(unlisted[:5])}"
                            )
                        missing = sorted(n for n in listed if not self.state.done(n))
                        if not missing and not inflight:
                            # Last look: a destination that restarted since the last file lost our items.
                            self._probe_destinations()
                            if all(self.state.done(n) for n in listed):
                                return self._finish(manifest)
                            continue
                        for m in missing:
                            if m not in names:
                                first = bad_since.setdefault(m, now)
                                if now - first > c.bad_file_timeout:
                                    raise DumpDataError(
                                        f"DONE lists {m} but it did not appear in {c.source_dir} within "
                                        f"{c.bad_file_timeout:g}s"
                                    )
                    elif c.idle_timeout is not None and now - last_new > c.idle_timeout:
                        raise DumpTimeout(
                            f"no data file and no DONE appeared in {c.source_dir} for {c.idle_timeout:g}s"
                        )
                    if not progressed:
                        if now - last_round_event >= c.progress_interval:
                            last_round_event = now
                            self._emit("waiting", pending=len(todo) + len(inflight) + len(self._awaiting))
                        if not inflight:
                            time.sleep(self._wait_s(c.poll_interval))
            except BaseException:
                for f in inflight:
                    f.cancel()
                self._save(force=True)
                raise

    def _wait_s(self, poll: float) -> float:
        """How long the loop may wait: the poll interval, or less when a re-check falls due sooner."""
        if not self._due:
            return poll
        return max(0.0, min(poll, min(self._due.values()) - time.time()))

    def _waiting(self, address: str, why: str, waited_s: float) -> None:
        left = max(0.0, self.config.destination_timeout - waited_s)
        self._emit(
            "destination_unavailable", detail=f"waiting for {address} ({why}), retrying for {left:.0f}s"
        )

    def _handle(self, out: FileOutcome, bad_since: dict[str, float]) -> bool:
        self._clocks.check(out.clock_offsets, out.identities)
        if out.status == "ok" and out.recheck and self._liveops.recheck_off is None:
            # Consumed only once re-checked: a crash before that sends the file again (tagged).
            self._awaiting[out.name] = out
            self._due[out.name] = out.written_at + self.config.settle_seconds
            return True
        if out.status == NO_STAMPS:
            raise PopulateSettingError(f"{out.name}: {out.reason}")
        return self._consume(out, bad_since)

    def _handle_recheck(self, rc: RecheckOutcome, bad_since: dict[str, float]) -> bool:
        """A re-check came back: its counts join the file's, and the file is consumed."""
        if rc.status == SOURCE_RESTARTED:
            raise PopulateError(rc.reason)
        if rc.status == DEST_UNAVAILABLE:
            raise DestinationUnreachable(f"re-checking {rc.name}: {rc.reason}")
        if rc.status != "ok":
            raise PopulateError(rc.reason)
        out = self._awaiting.pop(rc.name)
        for addr, counts in rc.nodes.items():
            node = out.nodes.setdefault(addr, NodeCounts())
            for k, v in asdict(counts).items():
                setattr(node, k, getattr(node, k) + v)
            if counts.unsettled:
                self._emit(
                    "warning",
                    detail=f"{rc.name}: {counts.unsettled} keys on {addr} kept changing while re-checked: "
                    "left as they are (unsettled)",
                )
        return self._consume(out, bad_since)

    def _consume(self, out: FileOutcome, bad_since: dict[str, float]) -> bool:
        c = self.config
        if out.status == "ok":
            self._versions[out.name] = out.version
            dead = self._restarts.check(out.identities)
            known = self.state.consumed.get(out.name)
            cf = known or ConsumedFile(out.records, out.bytes)
            items, nbytes, sums = self._tally()
            if known:  # its counts change: take them out of the running sums, then add them back
                items, nbytes = items - known.records, nbytes - known.bytes
                for k, v in asdict(known.total()).items():
                    setattr(sums, k, getattr(sums, k) - v)
            for addr, counts in out.nodes.items():
                if addr not in dead:
                    cf.nodes[addr] = counts
            sums.add(cf.total())
            self._sums = (items + cf.records, nbytes + cf.bytes, sums)
            info = self._destinations.info
            self._report.add(
                out.name,
                [it for it in out.oversize if it.destination not in dead],
                {a: i.item_size_max for a, i in info.items()},
            )
            # Still owed: what was owed minus what this outcome wrote, plus what it wrote to a dead server.
            owed = (set(self.state.redo.get(out.name, [])) if known else set()) - set(out.nodes) | dead
            self.state.consumed[out.name] = cf
            if owed:
                self.state.redo[out.name] = sorted(owed)
            else:
                self.state.redo.pop(out.name, None)
            bad_since.pop(out.name, None)
            self._save()
            self._emit("file", detail=out.name)
            return True
        if not out.sent:
            self._journal.forget(out.name)
        if out.status == HOST_CLOCK:
            raise PopulateError(f"{out.name}: {out.reason}")
        if out.status in (DEST_ERROR, DEST_UNAVAILABLE):
            self._save(force=True)
            error = DestinationUnreachable if out.status == DEST_UNAVAILABLE else PopulateError
            raise error(f"writing {out.name}: {out.reason}")
        if out.status == df.Status.CORRUPT.value:
            raise DumpDataError(f"{out.name} is corrupt (checksum verifies, records do not): {out.reason}")
        first = bad_since.setdefault(out.name, time.monotonic())
        if time.monotonic() - first > c.bad_file_timeout:
            raise DumpDataError(
                f"{out.name} stayed unverifiable for {c.bad_file_timeout:g}s ({out.status}: {out.reason})"
            )
        return False

    def _finish(self, manifest: df.Manifest) -> PopulateSummary:
        c = self.config
        files = finish.check_applied(manifest, self.state.consumed, self._versions)
        liveops.check_source_identity(c, manifest, self._liveops.source_ident)
        finish.check_counts(manifest, files)
        self._save(force=True)
        off = self._liveops.recheck_off
        summary = summarize(
            files,
            [n.address for n in self.nodes],
            self._destinations,
            manifest,
            elapsed_s=round(time.monotonic() - self._start, 3),
            restarts_detected=self.state.restarts_detected,
            oversize_report=self._report.finish(),
            recheck="n/a" if c.mode != "add" else "off" if off else "on",
            recheck_off=off,
            settle_seconds=c.settle_seconds,
        )
        summary.already_complete = all(f.name in self._consumed_before for f in manifest.files)
        finish.conclude(summary, c, lambda why: self._emit("warning", detail=why))
        self._emit("done")
        return summary


def populate(
    config: PopulateConfig, on_progress: Callable[[Progress], None] | None = None
) -> PopulateSummary:
    """Run the populator to the end; raises PopulateError (message names the problem) on failure."""
    return Populator(config, on_progress or (lambda p: None)).run()
