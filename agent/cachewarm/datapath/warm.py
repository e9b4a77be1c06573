"""`cachewarm warm`: the whole data path on one machine — the dumper and the populator concurrently.

The dumper (`cachewarm-dump`) writes data files into `WORKDIR/dump`; the populator, in this
process, starts on the first published file and ends when DONE's files are all applied. Then every
dumped, unexpired key that fits its target node is looked up there: exit 0 only if the target holds
them all and the populator found the warm complete (no oversize item, no eviction, a complete dump),
or the user accepted what it was not.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from cachewarm.datapath import dumper as dumper_cli
from cachewarm.datapath import format as df
from cachewarm.datapath import presence
from cachewarm.datapath.dumper import DumperCommand, DumperProgress, SourceProtection, terminate_child
from cachewarm.datapath.encode import ItemLimit
from cachewarm.datapath.ketama import Node, Routing, resolve_nodes
from cachewarm.datapath.keytext import keys_text
from cachewarm.datapath.meta import MetaConnection
from cachewarm.datapath.pool import started_pool
from cachewarm.datapath.populate import (
    Mode,
    PopulateConfig,
    PopulateIncomplete,
    PopulateSummary,
    default_workers,
    populate,
)
from cachewarm.datapath.populate.report import event_time
from cachewarm.datapath.preflight import plan_text, preflight
from cachewarm.datapath.progress import Display, JsonDisplay, make_display, plural, speed_line
from cachewarm.datapath.warm_errors import DumpExists, PlanOnly, SettingError, WarmError

if TYPE_CHECKING:
    from cachewarm.datapath.s3warm import S3Transport

# Where `make build` puts the dumper in this repository.
REPO_DUMPER = Path(__file__).resolve().parents[3] / "build" / "release" / dumper_cli.BINARY


def find_dumper(explicit: str | None = None) -> Path:
    """`--dumper`, else $CACHEWARM_DUMP, else build/release/cachewarm-dump, else on PATH."""
    found = dumper_cli.find_dumper(explicit, REPO_DUMPER)
    if found is not None:
        return found
    raise WarmError("cachewarm-dump not found: run `make build`, or set CACHEWARM_DUMP / --dumper")


@dataclass
class WarmConfig:
    source: Node
    targets: list[Node]
    workdir: Path
    dumper: Path
    threads: int = 2
    mode: Mode = "add"
    workers: int = field(default_factory=default_workers)
    # Items/s for both the reads from the source (the dumper) and the writes to the target (the
    # populator); the source_/target_ limits, when given, replace it on their side.
    max_items_per_second: float | None = None
    routing: Routing = field(default_factory=Routing)
    # PopulateConfig's accept_* flags by name (accept_oversize, accept_evictions, ...).
    accept: dict[str, bool] = field(default_factory=dict)
    # Seconds between a data file's last write and its re-check on the source (PopulateConfig).
    settle_seconds: float = 2.0
    data_file_size: str = "32M"
    resume: bool = False
    check: bool = True
    # --check-sample: with the check, compare value, flags and TTL of about this many keys (0: none).
    check_sample: int = 0
    dumper_args: list[str] = field(default_factory=list)
    poll_interval: float = 0.1
    source_max_items_per_second: int | None = None
    target_max_items_per_second: float | None = None
    # How long the target may refuse connections before the warm gives up (seconds).
    destination_timeout: float = 120.0
    # Bytes/s written to the target (the populator); None = unlimited.
    target_max_bytes_per_second: float | None = None
    # How the dumper spares the source: bytes/s, the adaptive guard (off by default locally: on AWS
    # the node agent turns it on), the crawl's pace and the order (the dumper's default: recency).
    source_protection: SourceProtection = field(default_factory=SourceProtection)

    @property
    def source_rate(self) -> int | None:
        """The dumper's limit (items/s read from the source; it takes whole numbers)."""
        if self.source_max_items_per_second is not None:
            return self.source_max_items_per_second
        return max(1, round(self.max_items_per_second)) if self.max_items_per_second else None

    @property
    def target_rate(self) -> float | None:
        """The populator's limit (items/s written to the target)."""
        if self.target_max_items_per_second is not None:
            return self.target_max_items_per_second
        return self.max_items_per_second

    # The stream mode: the dumper writes straight to the targets, no data files (datapath/stream.py).
    stream: bool = False
    # `--plan`: look at the source and the targets, say what the warm would do, move nothing.
    plan: bool = False
    # `--via-s3`: the data files go through S3 between the dump and the populator (datapath/s3warm.py).
    s3: S3Transport | None = None


@dataclass
class WarmSummary:
    ok: bool
    items_dumped: int
    keys_listed: int
    dump_misses: int
    copied: int
    already_present: int
    skipped_expired: int
    bytes: int
    files: int
    missing_in_target: int
    checked_in_target: int
    dump_s: float
    populate_s: float
    total_s: float
    mb_per_s: float
    populate: dict[str, Any]
    # Why the target does not hold every item (empty when ok): the populator's reasons the user did
    # not accept, and keys the target check did not find.
    problems: list[str] = field(default_factory=list)
    # Items dumped per second of dump + populate (overlapped; the target check not counted), like mb_per_s.
    items_per_s: float = 0.0
    # What the look before the warm found suspicious (an empty source): said, never silent.
    warnings: list[str] = field(default_factory=list)
    # The stream mode: no data files (`files` counts the checkpoint's acknowledged parts).
    stream: bool = False
    # The work directory stays after the warm (the dump or key lists, the populator's state): where
    # and how large, so it is not forgotten on a disk.
    workdir: str = ""
    workdir_bytes: int = 0
    # `--via-s3`: the transport's counts (objects, bytes, requests each way, objects deleted).
    s3: dict[str, int] = field(default_factory=dict)
    # --check-sample: keys whose value, flags and TTL were compared with the source, and how many differed.
    sample_compared: int = 0
    sample_different: int = 0

    def to_json(self) -> str:
        fields = asdict(self)
        if not self.s3:
            del fields["s3"]
        return json.dumps({"event": "warm_summary", "time": event_time(), **fields}, separators=(",", ":"))

    def text(self) -> str:
        lines = [
            f"warm {'OK' if self.ok else 'FAILED'} in {self.total_s:.1f}s "
            f"(dump {self.dump_s:.1f}s, populate {self.populate_s:.1f}s, "
            + ("upload with the dump, then download and populate, overlapped)" if self.s3 else "overlapped)"),
            f"  items dumped        {self.items_dumped:>12,}  (keys listed {self.keys_listed:,}, "
            f"gone before fetch {self.dump_misses:,})",
            f"  items copied        {self.copied:>12,}",
            f"  already present     {self.already_present:>12,}  (fresher values kept: add mode)",
            f"  skipped (expired)   {self.skipped_expired:>12,}",
            f"  bytes               {self.bytes:>12,}  "
            + ("(streamed: no data files)" if self.stream else f"({plural(self.files, 'data file')})"),
        ]
        p = self.populate
        if p.get("resent_own"):
            lines.append(f"  resent (own retry)  {p['resent_own']:>12,}  (stored by an earlier attempt)")
        if p.get("binary_protocol"):
            lines.append(f"  binary protocol     {p['binary_protocol']:>12,}  (keys of 187..250 bytes)")
        if p.get("oversize"):
            lines.append(
                f"  too large, skipped  {p['oversize']:>12,}  (never sent: see {p.get('oversize_report')})"
            )
        ev = int(p.get("destination_evictions", 0))
        if ev:
            lines.append(f"  WARNING: the target evicted {ev:,} items during the warm (too small)")
        if p.get("dump_complete") is False:
            lines.append(f"  WARNING: the dump is incomplete: {p.get('dump_incomplete_reason')}")
        if self.checked_in_target:
            lines.append(
                f"  target check        {self.checked_in_target - self.missing_in_target:>12,} of "
                f"{self.checked_in_target:,} unexpired keys present"
            )
        if self.sample_compared:
            lines.append(
                f"  sample compared     {self.sample_compared - self.sample_different:>12,} of "
                f"{self.sample_compared:,} the same as the source (value, flags, TTL)"
            )
        check = self.total_s - self.populate_s
        after = f" (+{check:.1f}s target check)" if self.checked_in_target else ""
        if self.workdir:
            lines.append(
                f"  workdir kept        {self.workdir_bytes / 1e6:>12,.1f} MB  ({self.workdir}; "
                "remove it when done, or --resume continues from it)"
            )
        if self.s3:
            c = self.s3
            requests = c["upload_requests"] + c["download_requests"]
            lines.append(
                f"  via S3              {c['uploaded_files']:>12,} objects up, {c['downloaded_files']:,} "
                f"down; {requests:,} requests; {c['objects_deleted']:,} objects deleted afterwards"
            )
        lines += [f"  WARNING: {w}" for w in self.warnings]
        lines.append(speed_line(self.items_dumped, self.bytes, self.populate_s, after))  # always last
        return "\n".join(lines)


@dataclass
class DumperRun:
    proc: subprocess.Popen[bytes]
    last_progress: DumperProgress | None = None
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=20))
    ended_at: float | None = None
    on_progress: Callable[[DumperProgress], None] | None = None

    def pump(self) -> None:
        def out() -> None:
            assert self.proc.stdout is not None
            for raw in self.proc.stdout:
                p = DumperProgress.parse(raw)
                if p is None:
                    self.stderr_tail.append(raw.decode(errors="replace").rstrip())
                else:
                    self.last_progress = p
                    if self.on_progress is not None:
                        self.on_progress(p)

        def err() -> None:
            assert self.proc.stderr is not None
            for raw in self.proc.stderr:
                self.stderr_tail.append(raw.decode(errors="replace").rstrip())

        threading.Thread(target=out, daemon=True).start()
        threading.Thread(target=err, daemon=True).start()

    def failure(self) -> str | None:
        rc = self.proc.poll()
        if rc is None:
            return None
        if self.ended_at is None:
            self.ended_at = time.monotonic()
        if rc == 0:
            return None
        tail = " | ".join(list(self.stderr_tail)[-5:])
        return f"cachewarm-dump failed with exit code {rc}: {tail}"


def _check_file(
    path: Path, targets: list[Node], routing: Routing, limits: list[ItemLimit], source: Node | None = None
) -> tuple[int, list[bytes]]:
    """(keys checked, keys missing) for one dump file's unexpired keys that fit their target node
    (the populator never sends the others: it counts and names them) (runs in a pool process). With
    `source`, a key missing there that the source no longer holds as read is explained, not missing."""
    v = df.check_file(path)
    if not v.ok or v.data is None:
        raise WarmError(f"{path.name} no longer verifies: {v.reason}")
    ring = routing.ring(targets)
    now = int(time.time()) + 1
    per_node: list[list[bytes]] = [[] for _ in targets]
    for r in df.iter_records(v.data):
        if r.exptime != -1 and r.exptime <= now:
            continue
        i = ring.index_for(r.key) if ring else 0
        if limits[i].fits(len(r.key), len(r.value), r.flags):
            per_node[i].append(r.key)
    checked = 0
    gone: list[bytes] = []
    stamps: dict[bytes, bytes] = {}
    for n, keys in zip(targets, per_node, strict=True):
        with MetaConnection(n.connect_host, n.port) as rd:
            gone += rd.missing(keys)
        checked += len(keys)
    if source is not None and gone:
        if v.header is not None and v.header.version == df.VERSION_3:
            want = set(gone)
            stamps = {
                r.key: struct.pack("<Qqq", r.source_cas, r.source_exp, len(r.value))
                for r in df.iter_records(v.data)
                if r.key in want
            }
        explained = presence.explained_at_source(
            source, gone, [stamps.get(k, presence.NO_STAMP) for k in gone]
        )
        checked -= len(explained)
        gone = [k for k in gone if k not in explained]
    return checked, gone


def _check_one(
    path: Path,
    targets: list[Node],
    routing: Routing,
    limits: list[ItemLimit],
    probes: Path | None,
    sample_rate: float = 0.0,
    source: Node | None = None,
) -> tuple[int, list[bytes], list[bytes]]:
    """One file's target check: the lookups its populate kept (presence.py), else a walk of the file
    (no sample then). Returns (checked, missing, a sample of the keys present); a key the source no
    longer holds as the dump read it is not missing (presence.explained_at_source)."""
    if (
        probes is not None
        and (kept := presence.check_kept(probes, path.name, targets, sample_rate, source)) is not None
    ):
        return kept
    return (*_check_file(path, targets, routing, limits, source), [])


def probe_dir(cfg: WarmConfig) -> Path | None:
    """Where the populate keeps each file's lookups for the target check (None: --no-check)."""
    return cfg.workdir / "probes" if cfg.check else None


@dataclass
class CheckResult:
    checked: int = 0
    missing: int = 0
    examples: list[bytes] = field(default_factory=list)
    # --check-sample: keys found present, to compare value, flags and TTL with the source.
    sample: list[bytes] = field(default_factory=list)

    def add(self, checked: int, gone: list[bytes], sample: list[bytes]) -> None:
        self.checked += checked
        self.missing += len(gone)
        self.examples.extend(gone[: max(0, 5 - len(self.examples))])
        self.sample += sample


def check_target(
    cfg: WarmConfig, dump_dir: Path, manifest: df.Manifest, summary: PopulateSummary, pool: Executor
) -> CheckResult:
    """Look up every dumped, unexpired key that fits its node on that node, files in parallel
    processes: with the lookups the populate kept (routed, no file read again) where it kept them."""
    targets = resolve_nodes(cfg.targets)
    limits = [
        ItemLimit(int(d["item_size_max"]), bool(d["cas"]))
        for d in (summary.destinations[t.address] for t in targets)
    ]
    check = functools.partial(
        _check_one,
        targets=targets,
        routing=cfg.routing,
        limits=limits,
        probes=probe_dir(cfg),
        sample_rate=sample_rate(cfg, manifest.total_records),
        source=resolve_nodes([cfg.source])[0],
    )
    paths = [dump_dir / mf.name for mf in manifest.files]
    parts = list(pool.map(check, paths))
    # Live traffic goes on meanwhile: a client's op reaches the two replicas up to settle_seconds
    # apart, so a key deleted on the target may still be on the source when it is looked up there.
    # The files with misses are checked again after that delay; a key counts only if missing twice.
    again = [i for i, part in enumerate(parts) if part[1]]
    if again and cfg.settle_seconds > 0:
        time.sleep(cfg.settle_seconds)
        for i, (checked, gone, _) in zip(again, pool.map(check, [paths[i] for i in again]), strict=True):
            first = set(parts[i][1])
            parts[i] = (checked, [k for k in gone if k in first], parts[i][2])
    res = CheckResult()
    for part in parts:
        res.add(*part)
    return res


def sample_rate(cfg: WarmConfig, items: int) -> float:
    """The share of checked keys --check-sample asks to compare (0: none)."""
    return min(1.0, cfg.check_sample / items) if cfg.check_sample and items else 0.0


def compare_sample(
    cfg: WarmConfig, keys: list[bytes], stream: IO[str], problems: list[str]
) -> tuple[int, int]:
    """--check-sample: the value, flags and TTL of `keys` on the source and their target node
    (`cachewarm verify`'s rules; a key gone from the source meanwhile is not compared). Returns
    (compared, different); differences are a problem of the warm, with examples on `stream`."""
    if not keys:
        return 0, 0
    from cachewarm.datapath.verify import _compare

    keys = keys[: cfg.check_sample]
    rep = _compare(
        resolve_nodes([cfg.source])[0], resolve_nodes(cfg.targets), keys, ttl_tolerance=5, routing=cfg.routing
    )
    if rep.keys_different or rep.missing:
        stream.write(rep.text() + "\n")
        problems.append(
            f"{rep.differences} of {rep.checked} sampled keys differ between the source and the target"
        )
    return rep.checked, rep.differences


def dumper_command(cfg: WarmConfig, dump_dir: Path) -> DumperCommand:
    """The dumper's command line for this warm (the source's rate limit included)."""
    return DumperCommand(
        binary=cfg.dumper,
        host=cfg.source.host,
        port=cfg.source.port,
        out=dump_dir,
        threads=cfg.threads,
        max_items_per_second=cfg.source_rate,
        data_file_size=cfg.data_file_size,
        progress_interval=0.5,
        resume=cfg.resume,
        protection=cfg.source_protection,
        extra_args=cfg.dumper_args,
    )


def populate_config(
    cfg: WarmConfig,
    dump_dir: Path,
    state_file: Path,
    should_abort: Callable[[], str | None] | None = None,
    pool: Executor | None = None,
) -> PopulateConfig:
    """The populator's configuration for this warm (the target's rate limit included)."""
    return PopulateConfig(
        source_dir=dump_dir,
        destinations=cfg.targets,
        state_file=state_file,
        mode=cfg.mode,
        workers=cfg.workers,
        max_items_per_second=cfg.target_rate,
        max_bytes_per_second=cfg.target_max_bytes_per_second,
        node_key_format=cfg.routing.node_key_format,
        ketama_reps=cfg.routing.reps,
        hash_delimiter=cfg.routing.hash_delimiter,
        placement=cfg.routing.placement,
        poll_interval=cfg.poll_interval,
        destination_timeout=cfg.destination_timeout,
        should_abort=should_abort,
        pool=pool,
        probe_dir=probe_dir(cfg),
        source=cfg.source,
        settle_seconds=cfg.settle_seconds,
        **cfg.accept,  # type: ignore[arg-type]
    )


def run_warm(cfg: WarmConfig, stream: IO[str] = sys.stderr, display: Display | None = None) -> WarmSummary:
    """Run the warm; progress goes to `display` (default: the one `stream` calls for)."""
    recheck = cfg.mode == "add" and not cfg.accept.get("accept_no_recheck")
    checked = preflight(cfg.source, cfg.targets, cfg.mode, recheck)
    if cfg.plan:
        writable_workdir(cfg)  # what the warm would refuse, the plan refuses alike (exit 2)
        raise PlanOnly(plan_text(cfg, checked))
    for w in checked.warnings:
        stream.write(f"warning: {w}\n")
        stream.flush()
    out = cfg.workdir / work_dir_name(cfg)
    if cfg.resume and not resumable(out) and holds_dump(out):
        raise SettingError(f"{out} holds files but no dump to resume (no keys/META): use an empty --workdir")
    cfg = replace(cfg, resume=cfg.resume and resumable(out))
    if cfg.stream:
        from cachewarm.datapath.stream import run_stream_warm

        # The check's workers start now, before the dumper's output pumps: forked in milliseconds.
        with started_pool(cfg.workers) if cfg.check else contextlib.nullcontext() as pool:
            summary = run_stream_warm(
                cfg, stream, display if isinstance(display, JsonDisplay) else None, pool
            )
    elif cfg.s3 is not None:
        from cachewarm.datapath.s3warm import run_s3_warm

        prepare_workdir(cfg)
        with started_pool(cfg.workers) as pool:
            summary, counts = run_s3_warm(cfg, cfg.s3, stream, display, pool)
        summary.s3 = asdict(counts)
    else:
        prepare_workdir(cfg)
        # The worker processes (populate, then the target check) start before this process has threads
        # (the dumper's output pumps), so they fork in milliseconds (pool.started_pool).
        with started_pool(cfg.workers) as pool:
            summary = _run_warm(cfg, stream, display, pool)
    summary.warnings = checked.warnings
    summary.workdir, summary.workdir_bytes = str(cfg.workdir), disk_usage(cfg.workdir)
    return summary


def disk_usage(path: Path) -> int:
    """Bytes of the files under `path` (what removing it frees)."""
    total = 0
    for p in path.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
        except OSError:
            pass  # a file removed meanwhile
    return total


def work_dir_name(cfg: WarmConfig) -> str:
    from cachewarm.datapath.stream import STREAM_DIR

    return STREAM_DIR if cfg.stream else "dump"


def holds_dump(path: Path) -> bool:
    """Whether a dump (or a stream's key lists) has begun in `path`, as cachewarm-dump sees it:
    anything but an empty `keys/` (and `lost+found`)."""
    try:
        if not path.is_dir():
            return False
        names = {p.name for p in path.iterdir()} - {"lost+found"}
        return bool(names - {"keys"}) or ("keys" in names and any((path / "keys").iterdir()))
    except OSError as e:
        raise WarmError(f"cannot read {path}: {e.strerror}") from e


def resumable(path: Path) -> bool:
    """Whether cachewarm-dump can `--resume` the dump in `path` (its checkpoint's keys/META exists):
    `--resume` continues it; on an empty or missing directory — or one interrupted before its first
    checkpoint — `--resume` simply starts (a script may always pass it)."""
    return (path / "keys" / "META").is_file()


def prepare_workdir(cfg: WarmConfig) -> None:
    """Create the work directory (one `error:` line naming the path when that fails) and refuse to
    start a new dump over an old one (exit 2: add --resume, or use an empty --workdir)."""
    out = cfg.workdir / work_dir_name(cfg)
    try:
        cfg.workdir.mkdir(parents=True, exist_ok=True)
        if holds_dump(out) and not cfg.resume:
            raise DumpExists(out)
        probe = cfg.workdir / ".cachewarm-write-test"
        probe.touch()
        probe.unlink()
    except OSError as e:  # the flag's value is the problem: exit 2, like a missing --from
        raise SettingError(f"cannot write the --workdir {e.filename or cfg.workdir}: {e.strerror}") from e


def writable_workdir(cfg: WarmConfig) -> None:
    """`--plan`'s look at the work directory, creating nothing: the warm could create and write it."""
    where = cfg.workdir
    while not where.exists() and where != where.parent:
        where = where.parent
    if not where.is_dir():
        raise SettingError(f"cannot write the --workdir {cfg.workdir}: {where} is not a directory")
    if not os.access(where, os.W_OK | os.X_OK):
        raise SettingError(f"cannot write the --workdir {where}: Permission denied")


def _run_warm(cfg: WarmConfig, stream: IO[str], display: Display | None, pool: Executor) -> WarmSummary:
    dump_dir = cfg.workdir / "dump"
    state_file = cfg.workdir / "populate-state.json"
    if not cfg.resume:  # a new dump: what a previous populate remembered is about other files
        for f in (state_file, state_file.with_name(state_file.name + ".started")):
            f.unlink(missing_ok=True)
        presence.forget(cfg.workdir / "probes")
    dump_dir.mkdir(exist_ok=True)  # the populator starts before the dumper has created it
    argv = dumper_command(cfg, dump_dir).argv()
    display = display or make_display(stream, dumper=True)
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    dumper = DumperRun(proc, on_progress=display.dumper)
    dumper.pump()
    pcfg = populate_config(cfg, dump_dir, state_file, should_abort=dumper.failure, pool=pool)
    problems: list[str] = []
    try:
        try:
            summary: PopulateSummary = populate(pcfg, display.populator)
        except PopulateIncomplete as e:
            # Every file was applied: check the target all the same, then fail with the reasons.
            summary = e.summary  # type: ignore[assignment]
            problems.append(str(e))
        rc = proc.wait()
        if rc != 0:
            raise WarmError(dumper.failure() or f"cachewarm-dump exited {rc}")
    except BaseException:  # PopulateError, WarmError, KeyboardInterrupt: stop the dumper too
        display.close()
        terminate_child(proc, 10)
        raise
    display.close()
    dump_end = dumper.ended_at or time.monotonic()
    pop_end = time.monotonic()
    return conclude(cfg, dump_dir, summary, pool, problems, stream, start, dump_end, pop_end)


def conclude(
    cfg: WarmConfig,
    dump_dir: Path,
    summary: PopulateSummary,
    pool: Executor,
    problems: list[str],
    stream: IO[str],
    start: float,
    dump_end: float,
    pop_end: float,
) -> WarmSummary:
    """After the populate: the target check (unless --no-check) and the warm's summary, from the
    DONE in `dump_dir` (the dump's, or the S3 warm's staging copy)."""
    manifest = df.read_manifest(dump_dir / df.MANIFEST_NAME)
    checked = missing = sampled = different = 0
    if cfg.check:
        res = check_target(cfg, dump_dir, manifest, summary, pool)
        presence.forget(cfg.workdir / "probes")
        checked, missing, examples = res.checked, res.missing, res.examples
        sampled, different = compare_sample(cfg, res.sample, stream, problems)
        if missing:
            stream.write(
                f"target is missing {missing:,} of {checked:,} keys; {len(examples)} examples of "
                f"{missing:,}: {keys_text(examples)}\n"
            )
            # Accepted evictions explain as many missing keys as were evicted, no more.
            if not (cfg.accept.get("accept_evictions") and missing <= summary.destination_evictions):
                problems.append(f"the target is missing {missing} items")
    total = time.monotonic() - start
    t = manifest.totals
    return WarmSummary(
        ok=not problems,
        items_dumped=manifest.total_records,
        keys_listed=int(t.get("keys_listed", 0)),
        dump_misses=int(t.get("misses", 0)),
        copied=summary.stored,
        already_present=summary.already_present,
        skipped_expired=summary.expired,
        bytes=summary.bytes,
        files=summary.files,
        missing_in_target=missing,
        checked_in_target=checked,
        dump_s=round(dump_end - start, 3),
        populate_s=round(pop_end - start, 3),
        total_s=round(total, 3),
        mb_per_s=round(summary.bytes / 1e6 / (pop_end - start), 1),
        populate=asdict(summary),
        problems=problems,
        items_per_s=round(manifest.total_records / (pop_end - start), 1),
        sample_compared=sampled,
        sample_different=different,
    )
