"""The warm's work directory: where each mode keeps its dump (or key lists), whether a dump there can
be resumed, and the checks before a warm writes to it (`--plan` creates nothing).
"""

from __future__ import annotations

import os
from pathlib import Path

from cachewarm.datapath.warm_config import WarmConfig
from cachewarm.datapath.warm_errors import DumpExists, SettingError, WarmError

# The stream mode's directory under --workdir: the dumper's --out (key lists and checkpoint, no data
# files).
STREAM_DIR = "stream"


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
