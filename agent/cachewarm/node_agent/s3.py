"""The node agents with S3 as the transport: `agent dump --to-s3`, `agent populate --from-s3`.

Source node: the dumper writes into `<mount>/dump` (the scratch volume if `--device` is given, else a
plain directory on the node's own disk); every data file it publishes is uploaded as soon as it
appears (verified, multipart, one part in memory), paused while the dumper's adaptive guard backs off
(its progress lines' `backing_off`) and paced by `--upload-rate`; DONE goes last, `If-None-Match: *`.
Objects go under `PREFIX/<node-id>/` (one prefix per source node).

Populator: range GETs (parallel, bounded) of `s3://BUCKET/PREFIX/<node-id>/` into `<mount>/dump` (a
plain directory), at most a few files ahead of the populator loop, each deleted once applied; the
populator loop runs unchanged on that directory. Its state file (`--state-dir`) is the progress: a
restart fetches nothing already applied and resumes a partly fetched object at its length.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cachewarm.datapath import format as df
from cachewarm.datapath.dumper import DumperProgress
from cachewarm.datapath.s3download import S3Downloader
from cachewarm.datapath.s3transport import (
    DEFAULT_PART_SIZE,
    DamagedObject,
    S3Location,
    S3TransportError,
    make_client,
)
from cachewarm.datapath.s3upload import GuardSignal, S3Uploader
from cachewarm.node_agent.errors import AgentError, ExitCode
from cachewarm.node_agent.jobs import (
    PopulateFn,
    PopulateJob,
    manifest_progress,
    placement_spec,
    populate_config,
    progress_from_populator,
    progress_of,
)
from cachewarm.node_agent.runner import CommandRunner
from cachewarm.node_agent.status import Progress, StatusPublisher
from cachewarm.node_agent.volume import Volume

# Files downloaded ahead of the populator loop, at most (disk: this many data files, not the dump).
STAGED_AHEAD = 4
# Range GETs in flight at once per populator (memory: this many parts).
PARALLEL_GETS = 4


def parse_to_s3(url: str) -> S3Location:
    """`--to-s3 s3://BUCKET/PREFIX`: the node's objects go under PREFIX/<node-id>/."""
    return S3Location.parse(url)


def parse_from_s3(url: str) -> tuple[S3Location, str]:
    """`--from-s3 s3://BUCKET/PREFIX/<node-id>`: (the warm's location, the node) — the last segment
    is the source node whose objects are read."""
    loc = S3Location.parse(url)
    prefix, _, node = loc.prefix.rpartition("/")
    if not node:
        raise ValueError(f"{url!r} names no node: s3://BUCKET/PREFIX/<node-id>")
    return S3Location(loc.bucket, prefix), node


@dataclass(frozen=True)
class S3Options:
    """The S3 transport's flags of one agent run."""

    location: S3Location
    region: str | None = None
    # --upload-rate (source only): bytes/s of the upload; None = unlimited.
    upload_rate: int | None = None
    part_size: int = DEFAULT_PART_SIZE
    # The account that must own the bucket: this instance's own (`identity.this_account`), named on
    # every request (ExpectedBucketOwner). None only off EC2 (tests against a local S3).
    owner: str | None = None

    def client(self) -> Any:
        """The endpoint comes from AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL when set (a local S3)."""
        return make_client(region=self.region)


def run_dump_to_s3(
    job: Any,
    s3: S3Options,
    status: StatusPublisher,
    runner: CommandRunner,
    log: Callable[[str], None],
    use_volume: bool,
    client: Any = None,
) -> S3Uploader:
    """Dump into `<mount>/dump` and upload it as it is written; DONE last. `job` is a DumpJob. Raises
    AgentError on failure; running it again resumes the dump and skips the objects already up."""
    if use_volume:
        job.volume.wait_for_device(job.device_timeout_s)
        job.volume.prepare_source()
    job.out_dir.mkdir(parents=True, exist_ok=True)
    guard = GuardSignal()
    up = S3Uploader(
        client if client is not None else s3.client(),
        job.out_dir,
        s3.location,
        job.node_id,
        s3.part_size,
        s3.upload_rate,
        hold=guard.hold,
        owner=s3.owner,
    )
    done = job.out_dir / df.MANIFEST_NAME
    where = f"s3://{s3.location.bucket}/{up.base}"
    if done.exists():
        log(f"{done} exists: the dump finished in an earlier run; uploading what is not in {where} yet")
        status.update(manifest_progress(done))
        _finish_upload(up, log, where)
        return up
    resume = (job.out_dir / "keys" / "META").exists()
    log(("resuming" if resume else "starting") + f" the dump of {job.memcached_host}:{job.memcached_port}")
    failure: list[BaseException] = []

    def upload() -> None:
        try:
            up.run(guard.running.is_set)
        except BaseException as e:  # reported after the dumper ends
            failure.append(e)

    def on_line(line: str) -> None:
        p = DumperProgress.parse(line)
        if p is not None:
            status.update(progress_of(p))
            guard.on_progress(p)

    guard.running.set()
    thread = threading.Thread(target=upload, name="s3-upload", daemon=True)
    thread.start()
    try:
        res = runner.stream(job.argv(resume), on_line)
    except BaseException:  # interrupted (SIGTERM): stop the upload between parts too
        up.stop.set()
        raise
    finally:
        guard.running.clear()
        thread.join()
    if not res.ok:
        raise AgentError(ExitCode.WORK_FAILED, f"the dumper failed: {res.describe()}")
    if failure:
        raise AgentError(ExitCode.WORK_FAILED, f"the S3 upload to {where} failed: {failure[0]}") from failure[
            0
        ]
    if not done.exists():
        raise AgentError(ExitCode.WORK_FAILED, f"the dumper exited 0 but {done} is missing")
    status.update(manifest_progress(done))
    _finish_upload(up, log, where)
    return up


def _finish_upload(up: S3Uploader, log: Callable[[str], None], where: str) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        rep = up.finish()
    except (S3TransportError, BotoCoreError, ClientError) as e:
        raise AgentError(ExitCode.WORK_FAILED, f"the S3 upload to {where} failed: {e}") from e
    log(
        f"uploaded {rep.files} files ({rep.bytes:,} bytes, {rep.requests} requests) to {where}; "
        f"{rep.skipped} were there already; waited {rep.held_s:.1f} s for the source's guard"
    )


@dataclass
class S3PopulateJob:
    """`agent populate --from-s3`: a PopulateJob whose volume is a plain local directory."""

    job: PopulateJob
    location: S3Location
    node: str
    region: str | None = None
    part_size: int = DEFAULT_PART_SIZE
    parallel: int = PARALLEL_GETS
    staged_ahead: int = STAGED_AHEAD
    # As S3Options.owner.
    owner: str | None = None


def run_populate_from_s3(
    s3job: S3PopulateJob,
    status: StatusPublisher,
    populate_fn: PopulateFn | None = None,
    log: Callable[[str], None] = lambda m: None,
    client: Any = None,
) -> Any:
    """Download the node's objects into `<mount>/dump` while the populator loop applies them."""
    from cachewarm.datapath.nodes import parse_nodes
    from cachewarm.datapath.populate import PopulateError, populate
    from cachewarm.exitcodes import code_of

    job = s3job.job
    try:
        destinations = parse_nodes(job.destinations)
    except ValueError as e:
        raise AgentError(ExitCode.USAGE, f"--to {job.destinations!r}: {e}") from e
    placement = placement_spec(job.placement, destinations)
    staging = job.source_dir
    staging.mkdir(parents=True, exist_ok=True)
    job.state_file.parent.mkdir(parents=True, exist_ok=True)
    down = S3Downloader(
        client if client is not None else make_client(region=s3job.region),
        s3job.location,
        s3job.node,
        staging,
        job.state_file,
        part_size=s3job.part_size,
        parallel=s3job.parallel,
        max_staged=s3job.staged_ahead,
        evict=True,
        missing_timeout=job.source_timeout_s,
        owner=s3job.owner,
    )
    where = f"s3://{s3job.location.bucket}/{s3job.location.node_prefix(s3job.node)}"
    failure: list[BaseException] = []

    def download() -> None:
        try:
            down.run()
        except BaseException as e:  # handed to the populator's should_abort, then raised
            failure.append(e)

    def should_abort() -> str | None:
        return f"the S3 download from {where} failed: {failure[0]}" if failure else None

    config = populate_config(
        job, destinations, placement, should_abort=should_abort, idle_timeout=job.source_timeout_s
    )
    fn = populate_fn or populate
    thread = threading.Thread(target=download, name="s3-download", daemon=True)
    thread.start()
    try:
        summary = fn(config, lambda p: status.update(progress_from_populator(p)))
    except PopulateError as e:
        if failure:
            raise AgentError(
                _download_code(failure[0]), f"the S3 download from {where} failed: {failure[0]}"
            ) from e
        raise AgentError(code_of(e, ExitCode.WORK_FAILED), f"the populator failed: {e}") from e
    finally:
        down.stop.set()
        thread.join()
    down.evict_applied()
    rep = down.report
    log(
        f"downloaded {rep.files} files ({rep.bytes:,} bytes, {rep.requests} requests) from {where}; "
        f"{rep.skipped} applied before; {rep.evicted} deleted once applied"
    )
    status.update(
        Progress(
            items=int(summary.records), bytes=int(summary.bytes), files=int(summary.files), keys_listed=0
        )
    )
    return summary


def _download_code(e: BaseException) -> ExitCode:
    """A damaged object is bad data (7); anything else the download hit is a failure (1)."""
    return ExitCode.DATA if isinstance(e, DamagedObject) else ExitCode.WORK_FAILED


def local_volume(mount: str, runner: CommandRunner) -> Volume:
    """No `--device`: `--mount` is a plain directory on the node's own disk (never formatted or mounted)."""
    return Volume("", Path(mount), runner)
