"""`cachewarm warm --via-s3 s3://BUCKET/PREFIX`: the S3 transport's whole path on one machine.

dump (cachewarm-dump into WORKDIR/dump, to the end) -> upload (datapath/s3transport.py: verified data
files, DONE last and conditional) -> download (range GETs into WORKDIR/s3-staging, a thread) and
populate (the populator loop, unchanged, on the staging directory, while the download runs) -> the
target check -> every object under the prefix deleted. On AWS the upload runs on the source node and
the download on a populator in the other region; here both run in one process against a local S3
(moto's server mode: `--s3-endpoint-url` or AWS_ENDPOINT_URL).
"""

from __future__ import annotations

import subprocess
import threading
import time
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import IO, Any

from cachewarm.datapath import presence
from cachewarm.datapath.dumper import dumper_node_id, terminate_child
from cachewarm.datapath.populate import PopulateIncomplete, PopulateSummary, populate
from cachewarm.datapath.progress import Display, make_display
from cachewarm.datapath.s3transport import (
    DEFAULT_PART_SIZE,
    DownloadReport,
    S3Downloader,
    S3Location,
    S3TransportError,
    UploadReport,
    delete_prefix,
    make_client,
    upload_dump,
)
from cachewarm.datapath.warm import (
    DumperRun,
    WarmConfig,
    WarmSummary,
    conclude,
    dumper_command,
    populate_config,
)
from cachewarm.datapath.warm_errors import WarmError

STAGING_DIR = "s3-staging"


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


@dataclass
class S3Counts:
    uploaded_files: int
    uploaded_bytes: int
    upload_requests: int
    downloaded_files: int
    downloaded_bytes: int
    download_requests: int
    objects_deleted: int


def run_s3_warm(
    cfg: WarmConfig, s3: S3Transport, stream: IO[str], display: Display | None, pool: Executor
) -> tuple[WarmSummary, S3Counts]:
    dump_dir = cfg.workdir / "dump"
    staging = cfg.workdir / STAGING_DIR
    state_file = cfg.workdir / "populate-state.json"
    if not cfg.resume:
        for f in (state_file, state_file.with_name(state_file.name + ".started")):
            f.unlink(missing_ok=True)
        presence.forget(cfg.workdir / "probes")  # the target check's lookups of an earlier dump
    dump_dir.mkdir(exist_ok=True)
    staging.mkdir(exist_ok=True)  # the populator looks at it before the download thread starts
    node = dumper_node_id(cfg.source.address)
    client = make_client(s3.endpoint_url)
    display = display or make_display(stream, dumper=True)
    start = time.monotonic()
    proc = subprocess.Popen(
        dumper_command(cfg, dump_dir).argv(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    dumper = DumperRun(proc, on_progress=display.dumper)
    dumper.pump()
    problems: list[str] = []
    down = S3Downloader(client, s3.location, node, staging, state_file, part_size=s3.part_size)
    failure: list[BaseException] = []
    try:
        rc = proc.wait()
        if rc != 0:
            raise WarmError(dumper.failure() or f"cachewarm-dump exited {rc}")
        dump_end = time.monotonic()
        up = _upload(client, dump_dir, s3, node)

        def download() -> None:
            try:
                down.run()
            except BaseException as e:  # handed to the populator's should_abort, then re-raised
                failure.append(e)

        thread = threading.Thread(target=download, name="s3-download", daemon=True)
        thread.start()

        def should_abort() -> str | None:
            return f"the S3 download failed: {failure[0]}" if failure else None

        pcfg = populate_config(cfg, staging, state_file, should_abort=should_abort, pool=pool)
        try:
            summary: PopulateSummary = populate(pcfg, display.populator)
        except PopulateIncomplete as e:
            summary = e.summary  # type: ignore[assignment]
            problems.append(str(e))
        finally:
            down.stop.set()
            thread.join()
        if failure:
            raise WarmError(f"the S3 download failed: {failure[0]}") from failure[0]
    except BaseException:
        display.close()
        terminate_child(proc, 10)
        down.stop.set()
        raise
    display.close()
    pop_end = time.monotonic()
    ws = conclude(cfg, staging, summary, pool, problems, stream, start, dump_end, pop_end)
    deleted = delete_prefix(client, s3.location) if s3.clean and ws.ok else 0
    return ws, _counts(up, down.report, deleted)


def _upload(client: Any, dump_dir: Any, s3: S3Transport, node: str) -> UploadReport:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return upload_dump(client, dump_dir, s3.location, node, s3.part_size, s3.max_bytes_per_second)
    except (S3TransportError, BotoCoreError, ClientError) as e:
        raise WarmError(f"the S3 upload failed: {e}") from e


def _counts(up: UploadReport, down: DownloadReport, deleted: int) -> S3Counts:
    return S3Counts(
        uploaded_files=up.files,
        uploaded_bytes=up.bytes,
        upload_requests=up.requests,
        downloaded_files=down.files,
        downloaded_bytes=down.bytes,
        download_requests=down.requests,
        objects_deleted=deleted,
    )
