"""What one `cachewarm warm` is told (`WarmConfig`, `S3Transport`), and what it tells the dumper and
the populator from that. Shared by every mode of the warm (`warm.py`: files; `stream.py`; `s3warm.py`)
and the look before it (`preflight.py`), none of which this module imports.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path

from cachewarm.datapath.dumper import DumperCommand, SourceProtection
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.populate import Mode, PopulateConfig, default_workers
from cachewarm.datapath.routing import Routing
from cachewarm.datapath.s3transport import DEFAULT_PART_SIZE, S3Location


@dataclass(frozen=True)
class S3Transport:
    """The S3 transport of one warm (`--via-s3` and its flags)."""

    location: S3Location
    endpoint_url: str | None = None
    part_size: int = DEFAULT_PART_SIZE
    # Bytes/s of the upload (the source node's network is its clients'); None = unlimited.
    max_bytes_per_second: float | None = None
    # Delete every object under the prefix when the warm succeeds (a failed warm keeps them for --resume).
    clean: bool = True
    # Range GETs in flight at once in the download (each holds one part in memory).
    parallel_gets: int = 4


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


def probe_dir(cfg: WarmConfig) -> Path | None:
    """Where the populate keeps each file's lookups for the target check (None: --no-check)."""
    return cfg.workdir / "probes" if cfg.check else None


def sample_rate(cfg: WarmConfig, items: int) -> float:
    """The share of checked keys --check-sample asks to compare (0: none)."""
    return min(1.0, cfg.check_sample / items) if cfg.check_sample and items else 0.0


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
