"""The agent's own options (the ones the data path's commands do not have: which warm and node, the
volume, the status bucket, S3 as the transport) and AgentFlags, the flags both volume agents take.
The options both CLIs share are in cachewarm/shared_options.py."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import click

from cachewarm.cli_types import Matching, MatchingInt
from cachewarm.contract import inputs
from cachewarm.contract.status import Role, StatusLocation
from cachewarm.node_agent.lifecycle import log
from cachewarm.node_agent.runner import CommandRunner
from cachewarm.node_agent.status import StatusPublisher
from cachewarm.node_agent.volume import Volume
from cachewarm.shared_options import adaptive_option, crawl_sleep_option, order_option, source_protection


@dataclass(frozen=True)
class AgentFlags:
    """The flags both agents take: which warm and node, the volume, where the status goes."""

    warm_id: str
    node_id: str
    device: str | None  # None: no volume (the S3 transport only; --mount is then a plain directory)
    mount: str
    status_bucket: str
    status_prefix: str
    heartbeat_seconds: float
    device_timeout: float
    region: str | None

    def publisher(self, role: Role) -> Callable[[], StatusPublisher]:
        def make() -> StatusPublisher:
            import boto3

            s3 = boto3.client("s3", region_name=self.region)
            from cachewarm.node_agent.identity import this_instance_arn

            where = StatusLocation(
                self.status_bucket, self.status_prefix, self.warm_id, role, self.node_id, this_instance_arn()
            )
            return StatusPublisher(s3, where, interval_s=self.heartbeat_seconds, log=log)

        return make

    def volume(self, runner: CommandRunner) -> Volume:
        """The job's volume; without --device the plain directory --mount (never formatted or mounted)."""
        return Volume(self.device or "", Path(self.mount), runner, log=log)

    def job_fields(self, volume: Volume) -> dict[str, Any]:
        """What every job (DumpJob, PopulateJob) takes from these flags."""
        return {
            "warm_id": self.warm_id,
            "node_id": self.node_id,
            "volume": volume,
            "device_timeout_s": self.device_timeout,
        }


WARM_ID_OPTION = click.option(
    "--warm-id", required=True, type=Matching(inputs.WARM_ID), help="The warm's id (the execution's name)."
)
NODE_ID_OPTION = click.option(
    "--node-id", required=True, type=Matching(inputs.INSTANCE_ID), help="Source node id."
)
MEMCACHED_OPTION = click.option(
    "--memcached", required=True, type=Matching(inputs.ENDPOINT), help="Source memcached HOST:PORT."
)
STATUS_BUCKET_OPTION = click.option(
    "--status-bucket",
    required=True,
    type=Matching(inputs.STATUS_BUCKET),
    help="S3 bucket the status objects go to (stack output StatusBucketName).",
)
STATUS_PREFIX_OPTION = click.option(
    "--status-prefix",
    required=True,
    type=Matching(inputs.STATUS_PREFIX),
    help="Key prefix of the status objects in --status-bucket.",
)
HEARTBEAT_OPTION = click.option(
    "--heartbeat-seconds",
    type=click.FloatRange(min=0.01),
    default=30.0,
    show_default=True,
    help="Seconds between status uploads (heartbeats) while the job runs.",
)
REGION_OPTION = click.option(
    "--region", default=None, help="AWS region of the status bucket (default: the SDK's)."
)
DUMPER_OPTION = click.option(
    "--dumper", default=None, help="cachewarm-dump binary (default: $CACHEWARM_DUMP, /opt/cachewarm/bin)."
)
_AGENT_FLAGS = [
    WARM_ID_OPTION,
    NODE_ID_OPTION,
    # DEVICE, not EBS_DEVICE: a loop device in tests or a device renamed by hand is fine here.
    click.option(
        "--device",
        default=None,
        type=Matching(inputs.DEVICE),
        help="Block device of the volume (required but with --to-s3 / --from-s3, where the default, none, "
        "means --mount is a plain directory: docs/transport-s3.md).",
    ),
    click.option("--mount", required=True, type=Matching(inputs.AGENT_MOUNT), help="Mount point."),
    STATUS_BUCKET_OPTION,
    STATUS_PREFIX_OPTION,
    HEARTBEAT_OPTION,
    click.option(
        "--device-timeout",
        type=click.FloatRange(min=0),
        default=600.0,
        show_default=True,
        help="Seconds to wait for the device to appear.",
    ),
    REGION_OPTION,
]
PLACEMENT_OPTION = click.option(
    "--placement",
    type=Matching(inputs.PLACEMENT),
    default=inputs.DEFAULT_PLACEMENT,
    show_default=True,
    help="Where the destination's client looks for a key: evcache, libmemcached[,…], pymemcache[,…], "
    "gomemcache (docs/placement.md; twemproxy and mcrouter read a configuration: `cachewarm warm`).",
)
TO_OPTION = click.option(
    "--to",
    "to",
    required=True,
    type=Matching(inputs.ENDPOINT_LIST),
    help="Destination HOST:PORT[,HOST:PORT…]",
)
# 0 (unlimited) is never passed: the SSM documents leave the flag out for it.
RATE_OPTION = click.option(
    "--max-items-per-second",
    type=MatchingInt(inputs.RATE, 1),
    default=None,
    help="Rate limit in items/s (leave out for unlimited).",
)
BYTE_RATE_OPTION = click.option(
    "--max-bytes-per-second",
    type=MatchingInt(inputs.BYTE_RATE, 1),
    default=None,
    help="Rate limit in bytes/s (leave out for unlimited).",
)
S3_REGION_OPTION = click.option(
    "--s3-region",
    type=Matching(inputs.AWS_REGION),
    default=None,
    help="Region of the --to-s3 / --from-s3 bucket (default: the SDK's).",
)


def s3_url(pattern: str, check: Callable[[str], Any]) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A callback for an s3:// flag: the contract's pattern, then `check` (which may refuse it)."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None:
            return None
        if not inputs.matches(pattern, value):
            raise click.BadParameter(f"{value!r} does not match {pattern}", param=param)
        try:
            return check(value)
        except ValueError as e:
            raise click.BadParameter(str(e), param=param) from e

    return callback


def checked(check: Callable[[str], str], value: str, param: click.Parameter) -> str:
    try:
        return check(value)
    except ValueError as e:
        raise click.BadParameter(str(e), param=param) from e


def protection_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The dumper's protection of the source (dump and stream): bytes/s, then the shared adaptive
    guard, order and crawl pace."""
    for opt in (crawl_sleep_option, order_option, adaptive_option, BYTE_RATE_OPTION):
        f = opt(f)
    return f


def protection_fields(
    max_bytes_per_second: int | None, adaptive: str, order: str, crawl_sleep_us: str
) -> dict[str, Any]:
    """The protection flags as DumpJob / StreamJob's `protection`."""
    return {"protection": source_protection(max_bytes_per_second, adaptive, order, crawl_sleep_us)}


def common_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Adds the flags of AgentFlags; the command receives them as one `flags: AgentFlags`."""
    names = [fld.name for fld in fields(AgentFlags)]

    @functools.wraps(f)
    def command(**kwargs: Any) -> Any:
        flags = AgentFlags(**{n: kwargs.pop(n) for n in names})
        return f(flags, **kwargs)

    for opt in reversed(_AGENT_FLAGS):
        command = opt(command)
    return command
