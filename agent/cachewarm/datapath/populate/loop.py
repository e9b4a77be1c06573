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
restarted comes back empty: each outcome carries the destinations' identities (pid + start time) and
a change means the items of every file consumed so far that route to that destination are sent
again (`state.redo`). At the end the run is complete only if no item was too large, no destination
evicted and the dump says it is complete; otherwise it raises PopulateIncomplete with the summary,
unless the user accepted those reasons.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from concurrent.futures import (
    ALL_COMPLETED,
    FIRST_COMPLETED,
    BrokenExecutor,
    Future,
    ThreadPoolExecutor,
    wait,
)
from dataclasses import asdict, dataclass, field, replace

from cachewarm.datapath import format as df
from cachewarm.datapath.encode import FileJob
from cachewarm.datapath.meta import ServerIdentity
from cachewarm.datapath.nodes import Node, resolve_nodes
from cachewarm.datapath.pool import process_pool
from cachewarm.datapath.populate import hostclock
from cachewarm.datapath.populate.config import (
    DestinationUnreachable,
    DumpDataError,
    DumpTimeout,
    PopulateConfig,
    PopulateError,
    PopulateIncomplete,
    PopulateSettingError,
    VolumeError,
)
from cachewarm.datapath.populate.destinations import (
    CLOCK_REMEASURE_S,
    DestinationProbe,
    read_source,
)
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
    judge,
    summarize,
)
from cachewarm.datapath.populate.state import ConsumedFile, NodeCounts, PopulateState, StartedJournal
from cachewarm.datapath.populate.worker import (
    DEST_ERROR,
    DEST_UNAVAILABLE,
    HOST_CLOCK,
    NO_STAMPS,
    FileOutcome,
    apply_file,
)
from cachewarm.datapath.remount import RemountError

# Two whole-second readings of one destination's clock offset differ by up to 1 (rounding) and ~1
# (memcached's clock ticks once a second); more is a clock that moved.
CLOCK_TOLERANCE = 2


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
    _dead: set[tuple[str, tuple[int, int]]] = field(init=False, default_factory=set)
    # (address, server identity) -> its clock offset when first seen (_check_clocks).
    _clock_base: dict[tuple[str, tuple[int, int] | None], int] = field(init=False, default_factory=dict)
    _destinations: DestinationProbe = field(init=False)
    # The source memcached's clock from this host (config.source, when reached): hostclock.check and
    # hostclock.shortening; looked at again every CLOCK_REMEASURE_S (when, on the monotonic clock), on
    # a thread of its own (a look waits up to a second for a tick: the loop goes on meanwhile).
    _source_clock: hostclock.SourceClock | None = field(init=False, default=None)
    _source_measured: float = field(init=False, default=0.0)
    _source_look: Future[hostclock.SourceClock | None] | None = field(init=False, default=None)
    _looks: ThreadPoolExecutor | None = field(init=False, default=None)
    _journal: StartedJournal = field(init=False)
    _report: OversizeReport = field(init=False)
    _names: dict[str, df.DataFileName | None] = field(init=False, default_factory=dict)
    # The data format version of each file this run verified (DONE's `version` must agree).
    _versions: dict[str, int] = field(init=False, default_factory=dict)
    # DONE as last parsed, and the (inode, size, mtime) it was parsed at: parsed again only on change.
    _manifest: tuple[tuple[int, int, int], df.Manifest] | None = field(init=False, default=None)
    _sums: tuple[int, int, NodeCounts] | None = field(init=False, default=None)
    # For the progress display: data files seen so far, and DONE's item count once it is read.
    _published: int = field(init=False, default=0)
    _total: int | None = field(init=False, default=None)
    # Since when listing the source directory fails (a torn view of the shared volume), if it does.
    _list_failing_since: float | None = field(init=False, default=None)
    # Add mode's store and re-check (_liveops_preflight): how items are written, why the re-check is
    # off (None: on), the source's identity when the re-check is on.
    _store: str = field(init=False, default="binary")
    _recheck_off: str | None = field(init=False, default=None)
    _source_ident: tuple[int, int] | None = field(init=False, default=None)
    # Applied files waiting for their re-check (not consumed yet), and when each falls due (wall clock).
    _awaiting: dict[str, FileOutcome] = field(init=False, default_factory=dict)
    _due: dict[str, float] = field(init=False, default_factory=dict)

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

    def _check_identities(self, seen: dict[str, tuple[int, int]]) -> set[str]:
        """Compare a worker's (or the probe's) view of the destinations with ours. Returns the
        addresses it wrote to a server that has since restarted (those items must be sent again)."""
        dead = set()
        for addr, ident in seen.items():
            if (addr, ident) in self._dead:
                dead.add(addr)
                continue
            base = self.state.identities.get(addr)
            if base is None:
                self.state.identities[addr] = ident
            elif not ServerIdentity(*base).same_as(ServerIdentity(*ident)):
                # The destination restarted (came back empty): send it its items of every consumed file.
                self._dead.add((addr, base))
                self.state.identities[addr] = ident
                self.state.restarts_detected += 1
                redo = [n for n, f in self.state.consumed.items() if addr in f.nodes]
                for n in redo:
                    self.state.redo[n] = sorted({*self.state.redo.get(n, []), addr})
                self._reprobe = True  # its settings may have changed too
                self._save(force=True)
                self._emit(
                    "destination_restarted", detail=f"{addr}: re-sending its items of {len(redo)} files"
                )
        return dead

    def _check_clocks(self, out: FileOutcome) -> None:
        """Every T went out moved by its destination's clock offset as the worker measured it at
        connect. An offset that moved by more than its own rounding (a clock step, a paused VM) means
        the items written before expire that much off their TTL: refuse, naming the node."""
        for addr, offset in out.clock_offsets.items():
            ident = out.identities.get(addr)
            base = self._clock_base.setdefault((addr, ident), offset)
            if abs(offset - base) > CLOCK_TOLERANCE:
                raise PopulateError(
                    f"destination {addr}'s clock moved {offset - base:+d} s against this host's during the "
                    f"populate (offset {base:+d} s, now {offset:+d} s): the items written to it before "
                    "expire that much off their TTL; warm it again"
                )

    def _clocks_detail(self) -> str:
        """Each destination's clock against this host's (and the source's, when measured)."""
        parts = [f"{a} {lo:+.3f} s" for (a, _), lo in self._destinations.clock_items()]
        s = self._source_clock
        if s is not None:
            parts.append(f"source {s.address} {s.clock.lo:+.3f} .. {s.clock.hi:+.3f} s")
        elif self.config.source is not None:
            parts.append(
                f"source {self.config.source.address} not reached: the hosts' clocks are assumed to agree"
            )
        return "clocks against this host's: " + ", ".join(parts)

    def _measure_source(self) -> None:
        """The source's clock from this host: at once at the start, then again, in the background,
        once CLOCK_REMEASURE_S have passed (its timer may have slipped or jumped since: files dumped
        before a jump are shortened by it). A look's result is taken when it is done."""
        source = self.config.source
        if source is None:
            return
        if self._source_look is not None:
            if not self._source_look.done():
                return
            self._source_clock = self._source_look.result()
            self._source_look = None
        now = time.monotonic()
        if not self._source_measured:
            self._source_measured = now
            self._source_clock = hostclock.measure_source(source)
        elif now - self._source_measured >= CLOCK_REMEASURE_S:
            self._source_measured = now
            if self._looks is None:
                self._looks = ThreadPoolExecutor(max_workers=1, thread_name_prefix="source-clock")
            self._source_look = self._looks.submit(hostclock.measure_source, source, self._source_clock)

    def _probe_destinations(self) -> None:
        """Look at each destination (with backoff): did one restart, does each still evict, did one
        evict items."""
        before = self._destinations.evictions
        self._check_identities(self._destinations.probe())
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

    def _liveops_preflight(self) -> None:
        """Add mode: can every stored item be re-checked (docs/reliability.md "Live traffic during the
        warm")? It needs the source (its CAS on), the destinations' CAS and their binary protocol. If
        not, the run is refused (exit 2) unless the user accepted running without the re-check."""
        c = self.config
        if c.mode != "add":
            return
        why: list[str] = []
        if off := self._destinations.without_binary():
            why.append(
                f"destination(s) {', '.join(off)} do not speak memcached's binary protocol (-B ascii): "
                "add mode stores with binary ADDs, whose answers carry each stored item's CAS"
            )
        if off := self._destinations.without_cas():
            why.append(f"destination(s) {', '.join(off)} run with CAS off (memcached -C)")
        if c.source is None:
            why.append(
                "no source memcached given (--source HOST:PORT): the re-check reads every stored item there"
            )
        else:
            ident, cas = read_source(c.source, c.destination_timeout)
            if not cas:
                why.append(f"the source {c.source.address} runs with CAS off (memcached -C)")
            self._source_ident = ident
        if why and not c.accept_no_recheck:
            raise PopulateSettingError(
                "add mode re-checks every item it stores against the source, so that a delete, touch or "
                f"increment the source gets during the warm is not undone; it cannot here: {'; '.join(why)}. "
                "Fix that, or pass --accept-no-recheck to warm without the re-check"
            )
        self._recheck_off = "; ".join(why) or None
        self._store = (
            "text" if self._destinations.without_binary() else "binary-unchecked" if why else "binary"
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
            source_clock=self._source_clock,
        )

    def _scan(self) -> tuple[dict[str, df.DataFileName], bool]:
        names: dict[str, df.DataFileName] = {}
        try:
            entries = os.listdir(self.config.source_dir)
        except FileNotFoundError:
            return names, False
        except OSError as e:
            # A norecovery mount can show a directory whose blocks the writer has not flushed yet
            # (EIO, EUCLEAN): list again after the next remount, fail only if it lasts.
            now = time.monotonic()
            first = self._list_failing_since = self._list_failing_since or now
            if now - first > self.config.bad_file_timeout:
                raise VolumeError(
                    f"listing {self.config.source_dir} failed for {self.config.bad_file_timeout:g}s: {e}"
                ) from e
            self._emit("list_failed", detail=f"{self.config.source_dir}: {e}")
            return names, False
        self._list_failing_since = None
        done = False
        for e in entries:
            if e == df.MANIFEST_NAME:
                done = True
            elif not e.startswith("."):
                # Names never change meaning: parse each once (the loop lists the directory often).
                p = self._names.get(e) or self._names.setdefault(e, df.parse_name(e))
                if p is not None:
                    names[e] = p
        return names, done

    def run(self) -> PopulateSummary:
        try:
            return self._run()
        finally:
            if self._looks is not None:
                self._looks.shutdown(wait=False, cancel_futures=True)

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
        self._liveops_preflight()
        self._measure_source()
        self._save(force=True)
        params = replace(c.worker_params(), nodes=tuple(self.nodes), store=self._store)
        bad_since: dict[str, float] = {}
        last_new = time.monotonic()
        seen_any: set[str] = set()
        self._emit("start", detail=f"{c.source_dir} -> {','.join(n.address for n in c.destinations)}")
        self._emit("clocks", detail=self._clocks_detail())
        # A real remount needs every file closed; a plain directory lets files stream through.
        quiesce = bool(getattr(c.remounter, "quiesce", True))
        inflight: dict[Future[FileOutcome], str] = {}
        retry_at: dict[str, float] = {}
        last_round_event = 0.0
        with contextlib.nullcontext(c.pool) if c.pool is not None else process_pool(c.workers) as pool:
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
                    self._published = len(seen_any)
                    manifest = self._read_manifest(done_exists, bad_since)
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
                        job = RecheckJob(n, self._awaiting[n].recheck, c.source, self._source_ident)  # type: ignore[arg-type]
                        try:
                            inflight[pool.submit(recheck_file, str(c.source_dir / n), params, job)] = n
                        except BrokenExecutor as e:
                            raise PopulateError(
                                f"a worker process died before the re-check of {n}: {e}"
                            ) from e
                    if self._reprobe or now - self._last_check >= c.destination_check_interval:
                        self._probe_destinations()
                    self._measure_source()
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

    def _refresh(self, bad_since: dict[str, float]) -> bool:
        """Remount; a failure is retried next round until bad_file_timeout, then it is fatal."""
        try:
            self.config.remounter.refresh()
        except RemountError as e:
            first = bad_since.setdefault("<remount>", time.monotonic())
            if time.monotonic() - first > self.config.bad_file_timeout:
                raise VolumeError(f"remounting failed for {self.config.bad_file_timeout:g}s: {e}") from e
            self._emit("remount_failed", detail=str(e))
            return False
        bad_since.pop("<remount>", None)
        return True

    def _read_manifest(self, done_exists: bool, bad_since: dict[str, float]) -> df.Manifest | None:
        if not done_exists:
            return None
        path = self.config.source_dir / df.MANIFEST_NAME
        try:
            st = os.stat(path)
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            if self._manifest is not None and self._manifest[0] == key:
                return self._manifest[1]
            m = df.read_manifest(path)
        except (df.ManifestNotReadable, OSError) as e:
            # On a ro,norecovery mount DONE may be visible before its bytes are.
            first = bad_since.setdefault(df.MANIFEST_NAME, time.monotonic())
            if time.monotonic() - first > self.config.bad_file_timeout:
                raise DumpDataError(f"DONE is unreadable for {self.config.bad_file_timeout:g}s: {e}") from e
            return None
        except df.FormatError as e:
            # Whole JSON that breaks the format is a lie, not a half-visible file: stop now.
            raise DumpDataError(f"DONE is invalid: {e}") from e
        bad_since.pop(df.MANIFEST_NAME, None)
        self._manifest = (key, m)
        return m

    def _handle(self, out: FileOutcome, bad_since: dict[str, float]) -> bool:
        self._check_clocks(out)
        if out.status == "ok" and out.recheck and self._recheck_off is None:
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
            dead = self._check_identities(out.identities)
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

    def _check_source_identity(self, manifest: df.Manifest) -> None:
        """The re-checks compared the files with the source as the populate found it: the one DONE says
        the dump read (its `clock`: pid and start time), or the CAS values meant nothing."""
        clock = manifest.raw.get("clock")
        if self._source_ident is None or not isinstance(clock, dict):
            return
        pid, started = clock.get("source_pid"), clock.get("source_started")
        if not isinstance(pid, int) or not isinstance(started, int):
            return
        if not ServerIdentity(pid, started).same_as(ServerIdentity(*self._source_ident)):
            where = self.config.source.address if self.config.source else "?"
            raise PopulateError(
                f"the source {where} is not the memcached the dump read (pid {pid}, started {started}; now "
                f"pid {self._source_ident[0]}, started {self._source_ident[1]}): it restarted, or --source "
                "names another; the re-check compared the dump with it. Warm again from the source as it is"
            )

    def _finish(self, manifest: df.Manifest) -> PopulateSummary:
        c = self.config
        files = [self.state.consumed[f.name] for f in manifest.files]
        if lying := sorted(n for n, v in self._versions.items() if v != manifest.version):
            raise DumpDataError(
                f"DONE says data format version {manifest.version}, but {lying[0]} is version "
                f"{self._versions[lying[0]]} ({len(lying)} files)"
            )
        self._check_source_identity(manifest)
        for mf, cf in zip(manifest.files, files, strict=True):
            if cf.records != mf.records:
                raise DumpDataError(f"{mf.name}: applied {cf.records} records, DONE says {mf.records}")
            t = cf.total()
            if t.items != cf.records:
                raise DumpDataError(
                    f"{mf.name}: stored {t.stored} + present {t.present} + resent {t.resent} + expired "
                    f"{t.expired} + oversize {t.oversize} != records {cf.records}"
                )
        records = sum(f.records for f in files)
        if records != manifest.total_records:
            raise DumpDataError(f"applied {records} records, DONE's totals say {manifest.total_records}")
        self._save(force=True)
        summary = summarize(
            files,
            [n.address for n in self.nodes],
            self._destinations,
            manifest,
            elapsed_s=round(time.monotonic() - self._start, 3),
            restarts_detected=self.state.restarts_detected,
            oversize_report=self._report.finish(),
            recheck="n/a" if c.mode != "add" else "off" if self._recheck_off else "on",
            recheck_off=self._recheck_off,
            settle_seconds=c.settle_seconds,
        )
        summary.already_complete = all(f.name in self._consumed_before for f in manifest.files)
        for why in judge(summary, c):
            self._emit("warning", detail=why + (" (accepted)" if why in summary.accepted else ""))
        if not summary.ok:
            raise PopulateIncomplete(summary.failure(), summary)
        self._emit("done")
        return summary


def populate(
    config: PopulateConfig, on_progress: Callable[[Progress], None] | None = None
) -> PopulateSummary:
    """Run the populator to the end; raises PopulateError (message names the problem) on failure."""
    return Populator(config, on_progress or (lambda p: None)).run()
