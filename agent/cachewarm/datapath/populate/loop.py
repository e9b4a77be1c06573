"""The populator loop (issue 3): take complete, verified data files and write their items to the
destination memcached(s), without ever overwriting a fresher value (add mode by default).

Loop: list the directory, skip temp names and consumed files, hand the rest to a pool of worker
processes. A worker verifies the whole file (docs/data-format.md section 3: length, trailer and
checksum first, then every record) before it sends any item, then writes every item with pipelined
quiet meta sets, routed by ketama. The main process marks the file consumed in a state file outside
the volume (atomic replace). With a real remount (`CommandRemounter`) the loop works in rounds: all
files of a round finish, then the volume is remounted; on a plain directory files stream through. Finished
exactly when DONE exists and every file it lists is consumed; then the counts are checked against
the manifest.

A destination that restarted comes back empty: each outcome carries the destination's identity
(pid + start time) and a change means every file consumed so far is redone (add mode makes the
redo harmless on the nodes that did not restart).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import multiprocessing
import os
import re
import signal
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import tenacity

from cachewarm import dataformat as df
from cachewarm.ketama import EVCACHE_NODE_KEY, KetamaRing, Node
from cachewarm.meta import MAX_RELATIVE_TTL, DestinationUnavailable, MetaConnection, ServerIdentity
from cachewarm.remount import NoopRemounter, Remounter, RemountError

try:  # the encoding loop in C (setup.py builds it; optional: without it the Python loop runs)
    from cachewarm import _speedups
except ImportError:  # pragma: no cover - exercised where no C compiler was available
    _speedups = None  # type: ignore[assignment]

Mode = Literal["add", "set"]
_PLAIN_KEY = re.compile(rb"[\x21-\x7e]{1,250}")
# The C loop copies each value into its batch once; above this average record size the Python
# loop's zero-copy pieces are as fast (measured, 200k x 10 KB: 67-73k items/s vs 68-77k) and copy
# nothing; at 1 KB the C loop is ~1.3x faster end to end.
_C_LOOP_MAX_AVG_RECORD = 4096
# value_len, flags, exptime, key_len (reserved bytes skipped)
_RECORD_NR = struct.Struct("<IIqB3x")


class PopulateError(RuntimeError):
    """A failure the populator cannot recover from; the message names the problem."""


def default_workers() -> int:
    # One Python process writes ~265k items/s (FACTS.md), about what one memcached thread absorbs.
    return max(2, min(8, os.cpu_count() or 2))


def default_state_file(source_dir: Path, destinations: Iterable[Node]) -> Path:
    base = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "cachewarm"
    ident = f"{source_dir.resolve()}|{','.join(n.address for n in destinations)}"
    return base / f"populate-{hashlib.sha256(ident.encode()).hexdigest()[:16]}.json"


# --------------------------------------------------------------------------------------------------
# Worker side (runs in a pool process; everything it gets and returns is picklable)


@dataclass(frozen=True)
class WorkerParams:
    nodes: tuple[Node, ...]
    mode: Mode = "add"
    node_key_format: str = EVCACHE_NODE_KEY
    ketama_reps: int = 160
    hash_delimiter: bytes | None = None
    items_per_second: float | None = None  # this worker's share of the limit
    batch_items: int = 1000
    batch_bytes: int = 4 << 20
    destination_timeout: float = 120.0
    socket_timeout: float = 30.0
    # Files up to this size are checked and encoded in one pass and held encoded until the whole
    # file has passed (one pass over the records); larger files are checked first (a cheap walk),
    # then encoded and sent batch by batch: memory ~ file size + two batches per node.
    one_pass_max_bytes: int = 64 << 20
    # Encode with the C loop when it is built (single destination, one-pass files, small items);
    # False forces the Python loop (tests compare the two).
    use_speedups: bool = True


@dataclass
class FileOutcome:
    name: str
    status: str  # "ok", a df.Status value, or "dest_error"
    reason: str = ""
    records: int = 0
    stored: int = 0
    present: int = 0
    expired: int = 0
    bytes: int = 0
    attempts: int = 0
    identities: dict[str, tuple[int, int]] = field(default_factory=dict)
    per_node: dict[str, int] = field(default_factory=dict)


class _RateLimiter:
    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.start = time.monotonic()
        self.count = 0

    def take(self, n: int) -> None:
        if not self.rate:
            return
        self.count += n
        ahead = self.count / self.rate - (time.monotonic() - self.start)
        if ahead > 0:
            time.sleep(ahead)


class _Corrupt(Exception):
    pass


def _encode(
    verdict: df.Verdict, params: WorkerParams, ring: KetamaRing | None, stats: list[int]
) -> Iterator[tuple[int, list[bytes | memoryview], int]]:
    """Yield (node index, `ms ... q` batch as pieces (values are views into the file), item count),
    running the format's record checks (section 3, check 4) on the way; raises _Corrupt naming the
    bad record. `stats[0]` counts the items skipped as expired, `stats[1]` binary keys too long
    for memcached's base64 key.
    The caller decides whether to send before the generator is exhausted."""
    assert verdict.data is not None and verdict.header is not None and verdict.trailer is not None
    # The file's bytes may be a memoryview into a worker's read buffer: keys are memoryview slices
    # too (formatting and the plain-key check take them as they are).
    mv = memoryview(verdict.data)
    n_nodes = len(params.nodes)
    tail = b" ME q\r\n" if params.mode == "add" else b" MS q\r\n"
    batch_items, batch_bytes = params.batch_items, params.batch_bytes
    parts: list[list[bytes | memoryview]] = [[] for _ in range(n_nodes)]
    counts = [0] * n_nodes
    sizes = [0] * n_nodes
    unpack = _RECORD_NR.unpack_from
    plain = _PLAIN_KEY.fullmatch
    b64 = base64.b64encode
    now = int(time.time())
    horizon = now + MAX_RELATIVE_TTL
    pos = verdict.header.header_len
    end = pos + verdict.trailer.records_bytes
    nrec = 0
    idx = 0
    while pos < end:
        if end - pos < df.RECORD_FIXED:
            raise _Corrupt(f"record {nrec} at offset {pos}: header runs past records end {end}")
        vlen, flags, exptime, klen = unpack(mv, pos)
        kstart = pos + df.RECORD_FIXED
        vstart = kstart + klen
        nxt = vstart + vlen
        if nxt > end or klen == 0 or klen > df.MAX_KEY_LEN:
            raise _Corrupt(
                f"record {nrec} at offset {pos}: key_len {klen} value_len {vlen} bad or past {end}"
            )
        nrec += 1
        pos = nxt
        if exptime == -1:
            ttl = 0
        elif exptime > now:
            # memcached reads T above 30 days as an absolute time: send the absolute expiry then.
            ttl = exptime - now if exptime <= horizon else exptime
        elif exptime > 0:
            stats[0] += 1
            continue
        else:
            raise _Corrupt(f"record {nrec - 1} at offset {kstart - df.RECORD_FIXED}: exptime {exptime}")
        key = mv[kstart:vstart]
        if ring is not None:
            idx = ring.index_for(bytes(key))
        p = parts[idx]
        # Two pieces per item: the command line carries the previous value's \r\n in front of it
        # (fewer list appends and iovecs; measured ~15% less encoding time than three pieces).
        sep = b"\r\n" if p else b""
        if plain(key):
            p.append(b"%bms %b %d T%d F%d%b" % (sep, key, vlen, ttl, flags, tail))
        else:
            enc = b64(key)
            if len(enc) > df.MAX_KEY_LEN:
                # memcached cannot hold it (base64 form > 250 chars): counted, and the file fails.
                stats[1] += 1
                continue
            p.append(b"%bms %b %d b T%d F%d%b" % (sep, enc, vlen, ttl, flags, tail))
        p.append(mv[vstart:nxt])
        counts[idx] += 1
        sizes[idx] += vlen
        if counts[idx] >= batch_items or sizes[idx] >= batch_bytes:
            p.append(b"\r\n")
            yield idx, p, counts[idx]
            parts[idx] = []
            counts[idx] = sizes[idx] = 0
    _check_record_count(verdict, nrec)
    for i in range(n_nodes):
        if counts[i]:
            parts[i].append(b"\r\n")
            yield i, parts[i], counts[i]


def _check_record_count(verdict: df.Verdict, nrec: int) -> None:
    assert verdict.header is not None and verdict.trailer is not None
    if nrec != verdict.trailer.record_count:
        raise _Corrupt(f"{nrec} records parsed, trailer says {verdict.trailer.record_count}")
    if verdict.trailer.end_key_index - verdict.header.first_key_index != nrec + verdict.trailer.misses:
        raise _Corrupt("end_key_index - first_key_index != record_count + misses")


def _encode_c(verdict: df.Verdict, params: WorkerParams, stats: list[int]) -> list[tuple[int, bytes, int]]:
    """`_encode` for one destination, in C: the same bytes (values copied into each batch, which
    for small items is cheaper than a scatter-gather piece per value), the same checks."""
    assert _speedups is not None
    assert verdict.data is not None and verdict.header is not None and verdict.trailer is not None
    start = verdict.header.header_len
    try:
        batches, nrec, expired, too_long = _speedups.encode_ms(
            verdict.data,
            start,
            start + verdict.trailer.records_bytes,
            int(time.time()),
            params.mode == "add",
            params.batch_items,
            params.batch_bytes,
        )
    except ValueError as e:
        raise _Corrupt(str(e)) from e
    stats[0] += expired
    stats[1] += too_long
    _check_record_count(verdict, nrec)
    return [(0, b, n) for b, n in batches]


def _write_records(verdict: df.Verdict, params: WorkerParams, out: FileOutcome) -> None:
    """One attempt at writing all of a verified file's items. Raises DestinationUnavailable."""
    assert verdict.data is not None and verdict.header is not None and verdict.trailer is not None
    nodes = params.nodes
    ring = (
        KetamaRing(nodes, params.node_key_format, params.ketama_reps, params.hash_delimiter)
        if len(nodes) > 1
        else None
    )
    expired = [0, 0]
    batches: Iterable[tuple[int, bytes | list[bytes | memoryview], int]]
    one_pass = len(verdict.data) <= params.one_pass_max_bytes
    avg_record = verdict.trailer.records_bytes / max(1, verdict.trailer.record_count)
    try:
        if (
            one_pass
            and ring is None
            and params.use_speedups
            and _speedups is not None
            and avg_record <= _C_LOOP_MAX_AVG_RECORD
        ):
            batches = _encode_c(verdict, params, expired)
        elif one_pass:
            batches = list(_encode(verdict, params, ring, expired))
        else:
            bad = df._walk_records(verdict.data, verdict.header, verdict.trailer)
            if bad is not None:
                raise _Corrupt(bad)
            batches = _encode(verdict, params, ring, expired)
    except _Corrupt as e:
        out.status, out.reason = df.Status.CORRUPT.value, str(e)
        return
    conns = [MetaConnection(n.host, n.port, params.socket_timeout) for n in nodes]
    try:
        for n, c in zip(nodes, conns, strict=True):
            ident = c.connect()
            out.identities[n.address] = (ident.pid, ident.started)
        limiter = _RateLimiter(params.items_per_second)
        per_node = [0] * len(nodes)
        try:
            for idx, payload, count in batches:
                conns[idx].send_batch(payload, count)
                per_node[idx] += count
                limiter.take(count)
        except _Corrupt as e:  # unreachable: a large file was walked first; kept as a guard
            raise AssertionError(f"record check failed after sending began: {e}") from e
        sent = present = errors = 0
        first_error = None
        for n, c in zip(nodes, conns, strict=True):
            t = c.flush()
            sent += t.sent
            present += t.not_stored
            errors += t.errors
            if t.first_error and first_error is None:
                first_error = f"{n.address} answered {t.first_error!r}"
        out.records = verdict.trailer.record_count
        out.expired = expired[0]
        out.present = present
        out.stored = sent - present - errors
        out.per_node = {n.address: k for n, k in zip(nodes, per_node, strict=True)}
        if errors:
            out.status = "dest_error"
            out.reason = f"{errors} of {sent} writes failed; first: {first_error}"
        elif expired[1]:
            out.status = "dest_error"
            out.reason = f"{expired[1]} binary keys longer than 186 bytes cannot be written to memcached"
        else:
            out.status = "ok"
    finally:
        for c in conns:
            c.close()


# A pool worker's read buffer, made by worker_init: a worker applies one file at a time, and reusing
# the buffer saves the page faults of reading every file into fresh memory. None in other processes.
_worker_buffer: df.ReadBuffer | None = None


def worker_init() -> None:
    """Give a pool worker its read buffer and tie its life to its parent: a kill -9 of the populator
    must not leave workers behind on the node (PR_SET_PDEATHSIG on Linux; a parent-pid watch elsewhere)."""
    global _worker_buffer
    _worker_buffer = df.ReadBuffer()
    parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, signal.SIGKILL, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
            raise OSError(ctypes.get_errno(), "prctl failed")
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)
        return
    except (OSError, AttributeError):
        pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def apply_file(path: str, params: WorkerParams) -> FileOutcome:
    """Verify one data file and, only if it passes every check, write all of its items."""
    name = os.path.basename(path)
    out = FileOutcome(name=name, status="")
    try:
        # Checks 1-3 here; check 4 runs in _encode, over every record before any is sent.
        verdict = df.check_file(path, walk_records=False, buffer=_worker_buffer)
    except OSError as e:
        # Vanished, or unreadable blocks on a ro,norecovery view: look again next round.
        out.status, out.reason = df.Status.INCOMPLETE.value, f"cannot read: {e}"
        return out
    if not verdict.ok:
        out.status, out.reason = verdict.status.value, verdict.reason
        return out
    out.bytes = len(verdict.data or b"")
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(DestinationUnavailable),
        wait=tenacity.wait_exponential(multiplier=0.1, max=5),
        stop=tenacity.stop_after_delay(params.destination_timeout),
        reraise=True,
    )
    try:
        for attempt in retrying:
            with attempt:
                out.attempts += 1
                out.identities.clear()
                _write_records(verdict, params, out)
    except DestinationUnavailable as e:
        out.status = "dest_error"
        out.reason = (
            f"destination unavailable for {params.destination_timeout:g}s ({out.attempts} attempts): {e}"
        )
    return out


# --------------------------------------------------------------------------------------------------
# State (outside the volume)


@dataclass
class ConsumedFile:
    records: int
    stored: int
    present: int
    expired: int
    bytes: int


@dataclass
class PopulateState:
    consumed: dict[str, ConsumedFile] = field(default_factory=dict)
    identities: dict[str, tuple[int, int]] = field(default_factory=dict)
    restarts_detected: int = 0
    # The destinations the consumed files were written to: the state means nothing for others.
    destinations: list[str] = field(default_factory=list)

    @staticmethod
    def load(path: Path) -> PopulateState:
        if not path.exists():
            return PopulateState()
        try:
            obj = json.loads(path.read_text())
            return PopulateState(
                consumed={k: ConsumedFile(**v) for k, v in obj["consumed"].items()},
                identities={k: (int(v[0]), int(v[1])) for k, v in obj.get("identities", {}).items()},
                restarts_detected=int(obj.get("restarts_detected", 0)),
                destinations=[str(d) for d in obj.get("destinations", [])],
            )
        except (ValueError, KeyError, TypeError) as e:
            raise PopulateError(f"state file {path} is unreadable ({e}); remove it to start over") from e

    def save(self, path: Path) -> None:
        """Atomic replace: a crash leaves the old or the new state, never half of one."""
        path.parent.mkdir(parents=True, exist_ok=True)
        body = json.dumps(
            {
                "version": 1,
                "consumed": {k: asdict(v) for k, v in self.consumed.items()},
                "identities": {k: list(v) for k, v in self.identities.items()},
                "restarts_detected": self.restarts_detected,
                "destinations": self.destinations,
            }
        )
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        with contextlib.suppress(OSError):
            dfd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)


# --------------------------------------------------------------------------------------------------
# The loop


@dataclass
class PopulateConfig:
    source_dir: Path
    destinations: list[Node]
    state_file: Path
    mode: Mode = "add"
    max_items_per_second: float | None = None
    workers: int = field(default_factory=default_workers)
    node_key_format: str = EVCACHE_NODE_KEY
    ketama_reps: int = 160
    hash_delimiter: bytes | None = None
    poll_interval: float = 1.0
    # How long a file may stay incomplete/unverifiable, or a DONE-listed file stay absent.
    bad_file_timeout: float = 300.0
    # How long a destination may refuse connections before the populator gives up.
    destination_timeout: float = 120.0
    # Give up when nothing at all appears (no data file, no DONE) for this long; None = wait forever.
    idle_timeout: float | None = None
    batch_items: int = 1000
    batch_bytes: int = 4 << 20
    # Seconds between "waiting" progress lines while nothing new is applied.
    progress_interval: float = 1.0
    one_pass_max_bytes: int = 64 << 20
    use_speedups: bool = True
    remounter: Remounter = field(default_factory=NoopRemounter)
    # Polled between rounds: returns a reason to stop (e.g. the local dumper failed), or None.
    should_abort: Callable[[], str | None] | None = None


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
    _evictions_at_start: dict[str, tuple[int, int]] = field(init=False, default_factory=dict)
    _evictions: dict[str, int] = field(init=False, default_factory=dict)

    def _params(self) -> WorkerParams:
        c = self.config
        rate = c.max_items_per_second / c.workers if c.max_items_per_second else None
        return WorkerParams(
            nodes=tuple(c.destinations),
            mode=c.mode,
            node_key_format=c.node_key_format,
            ketama_reps=c.ketama_reps,
            hash_delimiter=c.hash_delimiter,
            items_per_second=rate,
            batch_items=c.batch_items,
            batch_bytes=c.batch_bytes,
            destination_timeout=c.destination_timeout,
            one_pass_max_bytes=c.one_pass_max_bytes,
            use_speedups=c.use_speedups,
        )

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
        seen: dict[str, tuple[int, int]] = {}
        for n in self.config.destinations:
            retrying = tenacity.Retrying(
                retry=tenacity.retry_if_exception_type(DestinationUnavailable),
                wait=tenacity.wait_exponential(multiplier=0.1, max=5),
                stop=tenacity.stop_after_delay(self.config.destination_timeout),
                reraise=True,
            )
            try:
                for attempt in retrying:
                    with attempt:
                        c = MetaConnection(n.host, n.port, 10.0)
                        try:
                            ident = c.connect()
                            evictions = int(c.stats().get("evictions", "0"))
                        finally:
                            c.close()
            except DestinationUnavailable as e:
                raise PopulateError(
                    f"destination {n.address} unavailable for {self.config.destination_timeout:g}s: {e}"
                ) from e
            seen[n.address] = (ident.pid, ident.started)
            # Evictions while we write mean the destination is too small: items were dropped.
            first = self._evictions_at_start.setdefault(n.address, (ident.pid, evictions))
            if first[0] == ident.pid:
                self._evictions[n.address] = evictions - first[1]
            else:
                self._evictions_at_start[n.address] = (ident.pid, 0)
                self._evictions[n.address] = evictions
        self._check_identities(seen)

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
        params = self._params()
        bad_since: dict[str, float] = {}
        last_new = time.monotonic()
        seen_any: set[str] = set()
        self._emit("start", detail=f"{c.source_dir} -> {','.join(n.address for n in c.destinations)}")
        # fork starts workers in milliseconds (spawn costs ~0.3 s of imports each); it is only safe
        # while this process has no other threads (e.g. `warm`'s output pumps), else forkserver.
        ctx = multiprocessing.get_context("fork" if threading.active_count() == 1 else "forkserver")
        # A real remount needs every file closed; a plain directory lets files stream through.
        quiesce = bool(getattr(c.remounter, "quiesce", True))
        inflight: dict[Future[FileOutcome], str] = {}
        retry_at: dict[str, float] = {}
        last_round_event = 0.0
        with ProcessPoolExecutor(max_workers=c.workers, mp_context=ctx, initializer=worker_init) as pool:
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
        if out.status == "dest_error":
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
            destination_evictions=sum(self._evictions.values()),
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
