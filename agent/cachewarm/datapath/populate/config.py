"""What the populator is told: `PopulateConfig`, and `WorkerParams`, the part of it a pool worker gets.

A new populator flag is a field of PopulateConfig (and, if the workers need it, a field of the same
name in WorkerParams: `WorkerParams.of` copies every field the two share) plus its option in
`datapath/commands.py`, which hands the options through by name.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field, fields
from pathlib import Path

from cachewarm.datapath.encode import Mode
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.placement import PlacementSpec
from cachewarm.datapath.remount import NoopRemounter, Remounter
from cachewarm.datapath.routing import EVCACHE_NODE_KEY, Routing
from cachewarm.exitcodes import ExitCode


class PopulateError(RuntimeError):
    """A failure the populator cannot recover from; the message names the problem. Each kind carries
    the exit code the commands end with (cachewarm/exitcodes.py)."""

    exit_code = ExitCode.FAILED


class PopulateSettingError(PopulateError):
    """What the populator was told cannot run (a state file of other destinations): fix the flags."""

    exit_code = ExitCode.USAGE


class DestinationUnreachable(PopulateError):
    """A destination refused or timed out for longer than the destination timeout."""

    exit_code = ExitCode.UNREACHABLE


class DumpDataError(PopulateError):
    """The dump is bad: a corrupt or unverifiable file, a file DONE lists missing, DONE invalid."""

    exit_code = ExitCode.DATA


class DumpTimeout(PopulateError):
    """Nothing appeared in the dump directory for the idle timeout."""

    exit_code = ExitCode.TIMEOUT


class VolumeError(PopulateError):
    """Remounting the dump's volume kept failing."""

    exit_code = ExitCode.VOLUME


class PopulateIncomplete(PopulateError):
    """The populator went through every file but the destinations do not hold every item, for reasons
    the user did not accept (`summary.incomplete`): the summary is still the truth of what was done."""

    exit_code = ExitCode.INCOMPLETE

    def __init__(self, message: str, summary: object) -> None:
        super().__init__(message)
        self.summary = summary


def default_workers() -> int:
    # One Python process writes ~265k items/s (FACTS.md), about what one memcached thread absorbs.
    return max(2, min(8, os.cpu_count() or 2))


def default_state_file(source_dir: Path, destinations: Iterable[Node]) -> Path:
    base = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "cachewarm"
    ident = f"{source_dir.resolve()}|{','.join(n.address for n in destinations)}"
    return base / f"populate-{hashlib.sha256(ident.encode()).hexdigest()[:16]}.json"


@dataclass
class PopulateConfig:
    source_dir: Path
    destinations: list[Node]
    state_file: Path
    mode: Mode = "add"
    max_items_per_second: float | None = None
    # Bytes/s written to the destinations in all (the encoded sets), split over the workers.
    max_bytes_per_second: float | None = None
    workers: int = field(default_factory=default_workers)
    node_key_format: str = EVCACHE_NODE_KEY
    ketama_reps: int = 160
    hash_delimiter: bytes | None = None
    # Another client's placement (--placement); None: EVCache's ketama (the three fields above).
    placement: PlacementSpec | None = None
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
    # Seconds between looks at the destinations' evictions (and identities) while writing.
    destination_check_interval: float = 5.0
    one_pass_max_bytes: int = 64 << 20
    remounter: Remounter = field(default_factory=NoopRemounter)
    # Polled between rounds: returns a reason to stop (e.g. the local dumper failed), or None.
    should_abort: Callable[[], str | None] | None = None
    # Worker processes to use (the caller's, e.g. started before its own threads so that they fork);
    # None: the populator starts `workers` of its own.
    pool: Executor | None = None
    # What the user accepts instead of a non-zero exit (each is reported in the summary either way):
    # items too large for a destination, skipped (never sent: a failed store would delete the key's
    # live value) and named in the oversize report;
    accept_oversize: bool = False
    # items the destinations evicted during the run (too small for the data, or live traffic);
    accept_evictions: bool = False
    # a dump whose DONE says "complete": false;
    accept_incomplete_dump: bool = False
    # writing to a destination with evictions off (-M): when it fills up, its failed stores delete
    # the live values of their keys.
    accept_no_evictions: bool = False
    # Where the oversize items are named (JSON lines); None: `<state file>.oversize.jsonl`.
    oversize_report: Path | None = None
    # `warm`'s target check: each applied file's lookups, per destination, are kept here
    # (datapath/presence.py), so the check neither reads nor routes the files again. None: not kept.
    probe_dir: Path | None = None
    # The memcached the dump was made from (a warm knows it; `populate --source`): its clock, measured
    # from this host, checks that this host's clock agrees with the dumper host's (hostclock.py), and
    # add mode re-checks every stored item on it (recheck.py). Add mode refuses to run without it
    # unless accept_no_recheck.
    source: Node | None = None
    # Seconds between a file's last write and its re-check (Δ): at least the largest delay between a
    # client's write to one replica and to the other (docs/reliability.md "Live traffic").
    settle_seconds: float = 2.0
    # Run add mode without the re-check (no source given, a source or destination with CAS off, a
    # destination without the binary protocol, files of a format without source stamps): a delete,
    # touch or increment the source gets during the warm may then be undone. Named in the summary.
    accept_no_recheck: bool = False

    @property
    def routing(self) -> Routing:
        return Routing(self.node_key_format, self.ketama_reps, self.hash_delimiter, self.placement)

    @property
    def oversize_report_path(self) -> Path:
        return self.oversize_report or self.state_file.with_name(self.state_file.name + ".oversize.jsonl")

    def worker_params(self) -> WorkerParams:
        return WorkerParams.of(self)


@dataclass(frozen=True)
class WorkerParams:
    """What a pool worker gets (picklable: no remounter, no callback)."""

    nodes: tuple[Node, ...]
    mode: Mode = "add"
    routing: Routing = field(default_factory=Routing)
    items_per_second: float | None = None  # this worker's share of the limit
    bytes_per_second: float | None = None  # this worker's share of the byte limit
    batch_items: int = 1000
    batch_bytes: int = 4 << 20
    destination_timeout: float = 120.0
    socket_timeout: float = 30.0
    # Files up to this size are checked and encoded in one pass and held encoded until the whole
    # file has passed (one pass over the records); larger files are checked first (a cheap walk),
    # then encoded and sent batch by batch: memory ~ file size + two batches per node.
    one_pass_max_bytes: int = 64 << 20
    # PopulateConfig.probe_dir: where each applied file's lookups go for warm's target check.
    probe_dir: Path | None = None
    # Add mode: how stored items are written and re-checked (the loop decides it at its preflight):
    # "binary" = binary-protocol ADDs, their CAS kept for the re-check on `source`; "binary-unchecked" =
    # binary ADDs, no re-check (accepted); "text" = text `add` (a destination without the binary
    # protocol, accepted).
    store: str = "binary"
    source: Node | None = None
    settle_seconds: float = 2.0

    @staticmethod
    def of(c: PopulateConfig) -> WorkerParams:
        """The config's fields of the same names, its destinations and routing, and the rate split
        over workers."""
        shared = {f.name for f in fields(PopulateConfig)} & {f.name for f in fields(WorkerParams)}
        return WorkerParams(
            nodes=tuple(c.destinations),
            routing=c.routing,
            items_per_second=c.max_items_per_second / c.workers if c.max_items_per_second else None,
            bytes_per_second=c.max_bytes_per_second / c.workers if c.max_bytes_per_second else None,
            **{name: getattr(c, name) for name in sorted(shared)},
        )
