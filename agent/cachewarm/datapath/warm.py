"""`cachewarm warm`: the whole data path on one machine — the dumper and the populator concurrently.

The dumper (`cachewarm-dump`) writes data files into `WORKDIR/dump`; the populator, in this
process, starts on the first published file and ends when DONE's files are all applied. Then every
dumped, unexpired key that fits its target node is looked up there: exit 0 only if the target holds
them all and the populator found the warm complete (no oversize item, no eviction, a complete dump),
or the user accepted what it was not.

Run here: the mode is chosen (`stream.py`, `s3warm.py`, else the files warm below) after the look
before the warm (`preflight.py`). What the warm is told is `warm_config.py`'s, what it reports
`warm_summary.py`'s, the target check `warm_check.py`'s and its work directory `workdir.py`'s.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from concurrent.futures import Executor
from dataclasses import asdict, replace
from pathlib import Path
from typing import IO

from cachewarm.datapath import dumper as dumper_cli
from cachewarm.datapath import presence
from cachewarm.datapath.dumper import (
    DumperRun,
    terminate_child,
)
from cachewarm.datapath.pool import started_pool
from cachewarm.datapath.populate import PopulateIncomplete, PopulateSummary, populate
from cachewarm.datapath.preflight import plan_text, preflight
from cachewarm.datapath.progress import Display, JsonDisplay, make_display
from cachewarm.datapath.s3warm import run_s3_warm
from cachewarm.datapath.stream import run_stream_warm
from cachewarm.datapath.warm_check import conclude
from cachewarm.datapath.warm_config import WarmConfig, dumper_command, populate_config
from cachewarm.datapath.warm_errors import PlanOnly, SettingError, WarmError
from cachewarm.datapath.warm_summary import WarmSummary
from cachewarm.datapath.workdir import (
    disk_usage,
    holds_dump,
    prepare_workdir,
    resumable,
    work_dir_name,
    writable_workdir,
)

# Where `make build` puts the dumper in this repository.
REPO_DUMPER = Path(__file__).resolve().parents[3] / "build" / "release" / dumper_cli.BINARY


def find_dumper(explicit: str | None = None) -> Path:
    """`--dumper`, else $CACHEWARM_DUMP, else build/release/cachewarm-dump, else on PATH."""
    found = dumper_cli.find_dumper(explicit, REPO_DUMPER)
    if found is not None:
        return found
    raise WarmError("cachewarm-dump not found: run `make build`, or set CACHEWARM_DUMP / --dumper")


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
        # The check's workers start now, before the dumper's output pumps: forked in milliseconds.
        with started_pool(cfg.workers) if cfg.check else contextlib.nullcontext() as pool:
            summary = run_stream_warm(
                cfg, stream, display if isinstance(display, JsonDisplay) else None, pool
            )
    elif cfg.s3 is not None:
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
