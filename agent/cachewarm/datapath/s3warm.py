"""`cachewarm warm --via-s3 s3://BUCKET/PREFIX`: the S3 transport's whole path on one machine.

dump (cachewarm-dump into WORKDIR/dump) and, while it runs, upload (datapath/s3upload.py: each
verified data file as it is published, holding while the dumper's guard backs off; DONE last and
conditional, once the dump has ended) -> download (datapath/s3download.py: range GETs into
WORKDIR/s3-staging, a thread) and populate (the populator loop, unchanged, on the staging directory,
while the download runs) -> the target check -> every object under the prefix deleted. On AWS the
upload runs on the source node and the download on a populator in the other region; here both run in
one process against a local S3 (moto's server mode: `--s3-endpoint-url` or AWS_ENDPOINT_URL).
"""

from __future__ import annotations

import subprocess
import threading
import time
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import IO

from cachewarm.datapath import presence
from cachewarm.datapath.dumper import DumperProgress, DumperRun, dumper_node_id, terminate_child
from cachewarm.datapath.populate import PopulateIncomplete, PopulateSummary, populate
from cachewarm.datapath.progress import Display, make_display
from cachewarm.datapath.s3download import DownloadReport, S3Downloader
from cachewarm.datapath.s3transport import S3TransportError, delete_prefix, make_client
from cachewarm.datapath.s3upload import GuardSignal, S3Uploader, UploadReport
from cachewarm.datapath.warm_check import conclude
from cachewarm.datapath.warm_config import S3Transport, WarmConfig, dumper_command, populate_config
from cachewarm.datapath.warm_errors import WarmError
from cachewarm.datapath.warm_summary import WarmSummary

STAGING_DIR = "s3-staging"
# Files downloaded ahead of the populator, at most (its workers take one file each).
STAGED_AHEAD = 4


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
    # The upload runs while the dump does: each published file as it appears, no part sent while the
    # dumper's adaptive guard backs off; DONE once the dumper has finished (S3Uploader).
    guard = GuardSignal()
    guard.running.set()
    show = display.dumper

    def on_progress(p: DumperProgress) -> None:
        guard.on_progress(p)
        show(p)

    dumper = DumperRun(proc, on_progress=on_progress)
    dumper.pump()
    uploader = S3Uploader(
        client, dump_dir, s3.location, node, s3.part_size, s3.max_bytes_per_second, hold=guard.hold
    )
    up_failure: list[BaseException] = []

    def upload() -> None:
        try:
            uploader.run(guard.running.is_set)
        except BaseException as e:  # raised once the dumper has ended
            up_failure.append(e)

    up_thread = threading.Thread(target=upload, name="s3-upload", daemon=True)
    up_thread.start()
    problems: list[str] = []
    # The staging directory holds only the files the populator has not applied yet (evicted after), at
    # most STAGED_AHEAD of them: no second copy of the dump on this disk.
    down = S3Downloader(
        client,
        s3.location,
        node,
        staging,
        state_file,
        part_size=s3.part_size,
        parallel=s3.parallel_gets,
        max_staged=STAGED_AHEAD,
        evict=True,
    )
    failure: list[BaseException] = []
    try:
        rc = proc.wait()
        guard.running.clear()
        up_thread.join()
        if rc != 0:
            raise WarmError(dumper.failure() or f"cachewarm-dump exited {rc}")
        if up_failure:
            raise WarmError(f"the S3 upload failed: {up_failure[0]}") from up_failure[0]
        dump_end = time.monotonic()
        up = _finish_upload(uploader)

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
        down.evict_applied()
    except BaseException:
        display.close()
        terminate_child(proc, 10)
        uploader.stop.set()
        guard.running.clear()
        down.stop.set()
        raise
    display.close()
    pop_end = time.monotonic()
    # The target check reads the dump's own files (the staged copies are deleted once applied).
    ws = conclude(cfg, dump_dir, summary, pool, problems, stream, start, dump_end, pop_end)
    deleted = delete_prefix(client, s3.location) if s3.clean and ws.ok else 0
    return ws, _counts(up, down.report, deleted)


def _finish_upload(uploader: S3Uploader) -> UploadReport:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return uploader.finish()
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
