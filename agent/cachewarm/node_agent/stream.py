"""`cachewarm agent stream`: the stream mode on a source node — `cachewarm-dump --to` writes each item
straight to the destination nodes (no volume, no populator instance), for a same-AZ warm.

The work directory (key lists, the checkpoint of what the destinations acknowledged, the oversize
report, DONE) lives on the node's own disk under `--state-dir`, so running the same command again
resumes. The status object is published under the role `populate`: a node is done when its
`populate` object says so, as with the file path (the controller needs no new criterion; its
wiring — a "stream" choice in the execution input, an SSM document for this command, no volume and
no populator for such nodes — is not done yet: docs/architecture.md).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cachewarm.contract.status import StatusLocation
from cachewarm.datapath.dumper import DumperCommand, DumperProgress, SourceProtection, dumper_node_id
from cachewarm.datapath.nodes import parse_nodes
from cachewarm.datapath.routing import Routing
from cachewarm.datapath.stream import StreamCommand, failure_message, parse_summary
from cachewarm.node_agent.errors import AgentError, ExitCode
from cachewarm.node_agent.jobs import AWS_PROTECTION, DEFAULT_STATE_DIR, placement_spec, progress_of
from cachewarm.node_agent.runner import CommandRunner
from cachewarm.node_agent.status import Progress, StatusPublisher

ROLE: Literal["populate"] = "populate"


@dataclass
class StreamJob:
    warm_id: str
    node_id: str
    memcached_host: str
    memcached_port: int
    destinations: str  # HOST:PORT[,HOST:PORT…]
    dumper: str
    mode: Literal["add", "set"] = "add"
    threads: int | None = None
    max_items_per_second: int | None = None
    state_dir: Path = DEFAULT_STATE_DIR
    # Where the destination's client looks for a key (docs/placement.md; contract.inputs.PLACEMENT).
    placement: str = "evcache"
    # The dumper's protection of the source, as for the dump job (the same workers read it).
    protection: SourceProtection = AWS_PROTECTION

    @property
    def workdir(self) -> Path:
        # On the node's disk, per warm and node: a re-run continues where the last one stopped.
        return self.state_dir / self.warm_id / f"{self.node_id}.stream"

    def argv(self) -> list[str]:
        try:
            targets = parse_nodes(self.destinations)
        except ValueError as e:
            raise AgentError(ExitCode.USAGE, f"--to {self.destinations!r}: {e}") from e
        dump = DumperCommand(
            binary=self.dumper,
            host=self.memcached_host,
            port=self.memcached_port,
            out=self.workdir,
            node_id=dumper_node_id(self.node_id),
            threads=self.threads,
            max_items_per_second=self.max_items_per_second,
            protection=self.protection,
            progress_interval=1.0,
            resume=(self.workdir / "keys" / "META").exists(),
        )
        return StreamCommand(
            dump=dump,
            targets=targets,
            mode=self.mode,
            routing=Routing(placement=placement_spec(self.placement, targets)),
            max_write_items_per_second=self.max_items_per_second,
        ).argv()


def run_stream(
    job: StreamJob,
    status: StatusPublisher,
    runner: CommandRunner,
    log: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True),
) -> dict[str, Any]:
    """Run (or resume) the stream, keep the status fresh; the summary. Raises AgentError when the
    stream failed or the destinations do not hold every item."""
    job.workdir.parent.mkdir(parents=True, exist_ok=True)
    argv = job.argv()
    log(("resuming" if "--resume" in argv else "starting") + f" the stream into {job.destinations}")
    summaries: list[dict[str, Any]] = []

    def on_line(line: str) -> None:
        if (p := DumperProgress.parse(line)) is not None:
            status.update(progress_of(p))
        elif (s := parse_summary(line)) is not None:
            summaries.append(s)

    res = runner.stream(argv, on_line)
    summary = summaries[-1] if summaries else None
    if summary is not None and res.returncode in (0, 1) and (why := failure_message(summary)):
        raise AgentError(ExitCode.WORK_FAILED, why)
    if not res.ok or summary is None:
        raise AgentError(ExitCode.WORK_FAILED, f"the stream failed: {res.describe()}")
    status.update(
        Progress(
            items=int(summary["records"]),
            bytes=int(summary["bytes"]),
            files=int(summary["parts"]),
            keys_listed=int(summary["keys_listed"]),
        )
    )
    return summary


def publisher_factory(
    bucket: str, prefix: str, warm_id: str, node_id: str, interval_s: float, region: str | None,
    log: Callable[[str], None],
) -> Callable[[], StatusPublisher]:  # fmt: skip
    def make() -> StatusPublisher:
        import boto3

        from cachewarm.node_agent.identity import this_instance_arn

        where = StatusLocation(bucket, prefix, warm_id, ROLE, node_id, this_instance_arn())
        return StatusPublisher(boto3.client("s3", region_name=region), where, interval_s=interval_s, log=log)

    return make
