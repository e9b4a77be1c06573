"""The two agent jobs: dump on a source node, populate on a populator. Plain functions over injected
runner / S3 client / populate function, so tests drive them without AWS, root or a block device."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from cachewarm.datapath import dumper as dumper_cli
from cachewarm.datapath import format as df
from cachewarm.datapath.dumper import DumperCommand, DumperProgress, SourceProtection, dumper_node_id
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.placement import PlacementError, PlacementSpec
from cachewarm.exitcodes import code_of
from cachewarm.node_agent.errors import AgentError, ExitCode
from cachewarm.node_agent.runner import CommandRunner
from cachewarm.node_agent.status import Progress, StatusPublisher
from cachewarm.node_agent.volume import Volume

# The dump lives in this directory of the volume (the populator reads the same path).
DUMP_DIR = "dump"
DEFAULT_DUMPER = "/opt/cachewarm/bin/cachewarm-dump"
DEFAULT_STATE_DIR = Path("/var/lib/cachewarm")
# At most one freeze/thaw of the source's volume per this many seconds (Publication).
DEFAULT_PUBLISH_INTERVAL_S = 1.0
# How often the populator remounts while it waits for new files (a remount is ~10 ms).
DEFAULT_READER_POLL_S = 0.1
# A freeze that stalls the dumper's writes longer than this is logged.
SLOW_FREEZE_S = 1.0

if TYPE_CHECKING:
    from cachewarm.datapath.populate import PopulateConfig


def find_dumper(explicit: str | None) -> str:
    """`--dumper`, else $CACHEWARM_DUMP, else DEFAULT_DUMPER, else cachewarm-dump on PATH."""
    found = dumper_cli.find_dumper(explicit, DEFAULT_DUMPER)
    if found is not None:
        return str(found)
    raise AgentError(
        ExitCode.WORK_FAILED,
        f"cachewarm-dump not found (looked at --dumper, $CACHEWARM_DUMP, {DEFAULT_DUMPER}, PATH)",
    )


# On AWS the dumper's adaptive guard is on unless the input turns it off.
AWS_PROTECTION = SourceProtection(adaptive=True)


@dataclass
class DumpJob:
    warm_id: str
    node_id: str
    volume: Volume
    memcached_host: str
    memcached_port: int
    dumper: str
    threads: int | None = None
    max_items_per_second: int | None = None
    # How the dumper spares the source: on AWS the adaptive guard is on by default.
    protection: SourceProtection = AWS_PROTECTION
    device_timeout_s: float = 600.0
    publish_interval_s: float = DEFAULT_PUBLISH_INTERVAL_S
    extra_args: list[str] = field(default_factory=list)

    @property
    def out_dir(self) -> Path:
        return self.volume.mount / DUMP_DIR

    @property
    def progress_interval_s(self) -> float:
        # Progress lines are when we learn that files were published: a line costs nothing, so
        # often (the first batch is published at once), within the dumper's bounds (0.05..3600 s).
        return max(0.05, min(0.1, self.publish_interval_s / 2))

    def argv(self, resume: bool) -> list[str]:
        return DumperCommand(
            binary=self.dumper,
            host=self.memcached_host,
            port=self.memcached_port,
            out=self.out_dir,
            node_id=dumper_node_id(self.node_id),
            threads=self.threads,
            max_items_per_second=self.max_items_per_second,
            protection=self.protection,
            progress_interval=self.progress_interval_s,
            resume=resume,
            extra_args=self.extra_args,
        ).argv()


@dataclass
class Publication:
    """Makes the dumper's published files visible to the populators' `norecovery` mounts.

    After each batch (a progress line whose `files` grew) the volume is frozen and thawed
    (`Volume.publish`), at most once per `interval_s`: a freeze stalls the dumper's writes to the
    volume while XFS writes its metadata in place. `publish()` also runs after the dumper exits, so
    DONE is visible at once. Counts how long the writes were stalled.
    """

    volume: Volume
    interval_s: float
    log: Callable[[str], None]
    seen_files: int = 0
    visible_files: int = 0
    last_at: float | None = None
    count: int = 0
    frozen_total_s: float = 0.0
    frozen_max_s: float = 0.0

    def on_progress(self, p: DumperProgress) -> None:
        self.seen_files = max(self.seen_files, p.files)
        if self.seen_files <= self.visible_files:
            return
        if self.last_at is None or self.volume.clock() - self.last_at >= self.interval_s:
            self.publish()

    def publish(self, paced: bool = True) -> None:
        """Freeze/thaw now. `paced=False`: the dumper is not running, the next batch need not wait."""
        files = self.seen_files
        done = self.volume.publish()
        self.last_at = self.volume.clock() if paced else None
        self.visible_files = files
        self.count += 1
        self.frozen_total_s += done.frozen_s
        self.frozen_max_s = max(self.frozen_max_s, done.frozen_s)
        if done.frozen_s > SLOW_FREEZE_S:
            self.log(f"publishing stalled writes to {self.volume.mount} for {done.frozen_s:.2f} s")

    def summary(self) -> str:
        return (
            f"made files visible {self.count} times; writes stalled {self.frozen_max_s * 1000:.0f} ms "
            f"at most, {self.frozen_total_s * 1000:.0f} ms in all"
        )


def progress_of(p: DumperProgress) -> Progress:
    return Progress(
        items=p.items,
        bytes=p.bytes,
        files=p.files,
        keys_listed=p.keys_listed,
        items_per_s=p.items_per_s,
        limit_items_per_s=p.limit_items_per_s,
        backing_off=p.backing_off,
        probe_p99_us=p.probe_p99_us,
        probe_baseline_us=p.probe_baseline_us,
        backed_off_ms=p.backed_off_ms,
    )


def progress_from_dumper(line: str) -> Progress | None:
    """A `cachewarm-dump` JSON progress line, or None for anything else (kept out of the status)."""
    p = DumperProgress.parse(line)
    return None if p is None else progress_of(p)


def manifest_progress(done_file: Path) -> Progress:
    """The dump's totals from its DONE manifest, read and checked by the format's reader, and the
    harm its source guard measured (`source_protection`, docs/data-format.md)."""
    try:
        m = df.read_manifest(done_file)
    except (df.FormatError, OSError) as e:
        raise AgentError(ExitCode.WORK_FAILED, f"the dump's manifest is unusable: {e}") from e
    guard = m.raw.get("source_protection")
    guard = guard if isinstance(guard, dict) else {}

    def harm(key: str) -> int:
        v = guard.get(key)
        return v if isinstance(v, int) and v > 0 else 0

    return Progress(
        items=m.total_records,
        bytes=int(m.totals.get("bytes", 0)),
        files=int(m.totals.get("files", 0)),
        keys_listed=int(m.totals.get("keys_listed", 0)),
        probe_p99_us=harm("probe_window_p99_median_us"),
        probe_baseline_us=harm("probe_p99_before_us"),
        backed_off_ms=harm("backed_off_ms"),
    )


def run_dump(
    job: DumpJob, status: StatusPublisher, runner: CommandRunner, log: Callable[[str], None]
) -> Publication:
    """Format/mount, run (or resume) the dumper, keep the status fresh and make what it publishes
    visible to the populators. Raises AgentError on failure."""
    job.volume.wait_for_device(job.device_timeout_s)
    job.volume.prepare_source()
    publication = Publication(job.volume, job.publish_interval_s, log)
    done = job.out_dir / df.MANIFEST_NAME
    if done.exists():
        log(f"{done} exists: the dump finished in an earlier run")
        status.update(manifest_progress(done))
        publication.publish()  # the earlier run may have ended before it did
        return publication
    job.out_dir.mkdir(parents=True, exist_ok=True)
    publication.publish(paced=False)  # the populators wait for dump/ to appear
    # The published files and keys/META are the dumper's checkpoint (docs/data-format.md section 6).
    resume = (job.out_dir / "keys" / "META").exists()
    log(("resuming" if resume else "starting") + f" the dump of {job.memcached_host}:{job.memcached_port}")

    def on_line(line: str) -> None:
        p = DumperProgress.parse(line)
        if p is not None:
            status.update(progress_of(p))
            publication.on_progress(p)

    res = runner.stream(job.argv(resume), on_line)
    try:
        # Also after a failure: the populators can apply what was published while we are revived.
        publication.publish()
    except AgentError as e:
        if res.ok:
            raise
        log(str(e))
    log(publication.summary())
    if not res.ok:
        raise AgentError(ExitCode.WORK_FAILED, f"the dumper failed: {res.describe()}")
    if not done.exists():
        raise AgentError(ExitCode.WORK_FAILED, f"the dumper exited 0 but {done} is missing")
    status.update(manifest_progress(done))
    return publication


# ---- populate ------------------------------------------------------------------------------------

PopulateFn = Callable[[Any, Callable[[Any], None]], Any]


def placement_spec(text: str, destinations: Sequence[Node]) -> PlacementSpec | None:
    """The agent's --placement for these destinations (None: EVCache's ketama); a scheme that does
    not fit them is a usage error before anything is sent."""
    if text == "evcache":
        return None
    try:
        spec = PlacementSpec.parse(text)
        spec.placer(destinations)
    except PlacementError as e:
        raise AgentError(ExitCode.USAGE, f"--placement {text!r}: {e}") from e
    return spec


@dataclass
class PopulateJob:
    warm_id: str
    node_id: str
    volume: Volume
    destinations: str  # HOST:PORT[,HOST:PORT…]
    mode: Literal["add", "set"] = "add"
    max_items_per_second: int | None = None
    max_bytes_per_second: int | None = None
    state_dir: Path = DEFAULT_STATE_DIR
    # Where the destination's client looks for a key (docs/placement.md; contract.inputs.PLACEMENT).
    placement: str = "evcache"
    device_timeout_s: float = 600.0
    # How long to wait for the source to format the volume and create the dump directory.
    source_timeout_s: float = 3600.0
    # Seconds between remounts while nothing new is visible (the populator's poll interval).
    poll_s: float = DEFAULT_READER_POLL_S
    # The source memcached (HOST:PORT) add mode re-checks every stored item on (docs/reliability.md
    # "Live traffic during the warm"); None: only with accept_no_recheck, named in the summary.
    source: str | None = None
    accept_no_recheck: bool = False
    settle_seconds: float = 2.0

    @property
    def source_dir(self) -> Path:
        return self.volume.mount / DUMP_DIR

    @property
    def state_file(self) -> Path:
        # Outside the (read-only) volume, per warm and node, so a re-run continues where it stopped.
        return self.state_dir / self.warm_id / f"{self.node_id}.populate-state.json"


def progress_from_populator(p: Any) -> Progress:
    return Progress(items=int(p.items), bytes=int(p.bytes), files=int(p.files_consumed), keys_listed=0)


def populate_config(
    job: PopulateJob, destinations: Sequence[Node], placement: PlacementSpec | None, **transport: Any
) -> PopulateConfig:
    """The populator's settings from the agent's job: one place for the volume and the S3 transport,
    which add only how files arrive (`transport`: a remounter, or should_abort/idle_timeout)."""
    from cachewarm.datapath.nodes import parse_nodes
    from cachewarm.datapath.populate import PopulateConfig

    return PopulateConfig(
        source_dir=job.source_dir,
        destinations=destinations,
        state_file=job.state_file,
        mode=job.mode,
        max_items_per_second=job.max_items_per_second,
        max_bytes_per_second=job.max_bytes_per_second,
        placement=placement,
        poll_interval=job.poll_s,
        source=parse_nodes(job.source)[0] if job.source else None,
        accept_no_recheck=job.accept_no_recheck,
        settle_seconds=job.settle_seconds,
        **transport,
    )


def run_populate(
    job: PopulateJob,
    status: StatusPublisher,
    populate_fn: PopulateFn | None = None,
    log: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True),
) -> Any:
    """Mount read-only, wait for the dump directory, run the populator loop to DONE."""
    from cachewarm.datapath.nodes import parse_nodes
    from cachewarm.datapath.populate import PopulateError, populate
    from cachewarm.datapath.remount import CommandRemounter

    vol = job.volume
    vol.wait_for_device(job.device_timeout_s)
    vol.prepare_reader(job.source_timeout_s)
    deadline = vol.clock() + job.source_timeout_s
    next_log = vol.clock()
    while not job.source_dir.is_dir():
        # The dumper creates it after mounting; our read-only view only changes when we remount.
        if vol.clock() >= deadline:
            raise AgentError(
                ExitCode.TIMEOUT, f"{job.source_dir} did not appear within {job.source_timeout_s:.0f} s"
            )
        if vol.clock() >= next_log:
            log(f"waiting for {job.source_dir}")
            next_log = vol.clock() + 30
        vol.sleep(job.poll_s)
        vol.remount_reader()
    try:
        destinations = parse_nodes(job.destinations)
    except ValueError as e:
        raise AgentError(ExitCode.USAGE, f"--to {job.destinations!r}: {e}") from e
    placement = placement_spec(job.placement, destinations)
    job.state_file.parent.mkdir(parents=True, exist_ok=True)
    config = populate_config(
        job,
        destinations,
        placement,
        remounter=CommandRemounter(
            vol.device, str(vol.mount), mount_cmd=vol.reader_mount_template, runner=_raising(vol.runner)
        ),
    )
    fn = populate_fn or populate

    def on_progress(p: Any) -> None:
        status.update(progress_from_populator(p))

    try:
        summary = fn(config, on_progress)
    except PopulateError as e:  # its kind's code: 6 unreachable, 7 bad data, 8 incomplete, else 1
        raise AgentError(code_of(e, ExitCode.WORK_FAILED), f"the populator failed: {e}") from e
    status.update(
        Progress(
            items=int(summary.records), bytes=int(summary.bytes), files=int(summary.files), keys_listed=0
        )
    )
    return summary


def _raising(runner: CommandRunner) -> Callable[[Any], None]:
    """Adapt our runner to the populator's remount runner (which raises on failure)."""
    from cachewarm.datapath.remount import RemountError

    def run(argv: Any) -> None:
        res = runner.run(list(argv))
        if not res.ok:
            raise RemountError(res.describe())

    return run
