"""What the populator sees of the dump directory, on a volume another host writes: its data files
and DONE, read again after each remount. A view torn by a read-only, norecovery mount (a listing
that fails, DONE visible before its bytes, a remount that fails) is retried until bad_file_timeout,
then it is fatal; DONE that is whole but breaks the format is fatal at once."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cachewarm.datapath import format as df
from cachewarm.datapath.populate.config import DumpDataError, PopulateConfig, VolumeError
from cachewarm.datapath.remount import RemountError


@dataclass
class VolumeView:
    config: PopulateConfig
    # (event, detail) for the progress display.
    emit: Callable[[str, str], None]
    _names: dict[str, df.DataFileName | None] = field(default_factory=dict)
    # DONE as last parsed, and the (inode, size, mtime) it was parsed at: parsed again only on change.
    _manifest: tuple[tuple[int, int, int], df.Manifest] | None = None
    # Since when listing the source directory fails, if it does.
    _list_failing_since: float | None = None

    def scan(self) -> tuple[dict[str, df.DataFileName], bool]:
        """The published data files by name, and whether DONE exists."""
        names: dict[str, df.DataFileName] = {}
        try:
            entries = os.listdir(self.config.source_dir)
        except FileNotFoundError:
            return names, False
        except OSError as e:
            # A norecovery mount can show a directory whose blocks the writer has not flushed yet
            # (EIO, EUCLEAN): list again after the next remount, fail only if it lasts.
            now = time.monotonic()
            first = self._list_failing_since = self._list_failing_since or now
            if now - first > self.config.bad_file_timeout:
                raise VolumeError(
                    f"listing {self.config.source_dir} failed for {self.config.bad_file_timeout:g}s: {e}"
                ) from e
            self.emit("list_failed", f"{self.config.source_dir}: {e}")
            return names, False
        self._list_failing_since = None
        done = False
        for e in entries:
            if e == df.MANIFEST_NAME:
                done = True
            elif not e.startswith("."):
                # Names never change meaning: parse each once (the loop lists the directory often).
                p = self._names.get(e) or self._names.setdefault(e, df.parse_name(e))
                if p is not None:
                    names[e] = p
        return names, done

    def refresh(self, bad_since: dict[str, float]) -> bool:
        """Remount; a failure is retried next round until bad_file_timeout, then it is fatal."""
        try:
            self.config.remounter.refresh()
        except RemountError as e:
            first = bad_since.setdefault("<remount>", time.monotonic())
            if time.monotonic() - first > self.config.bad_file_timeout:
                raise VolumeError(f"remounting failed for {self.config.bad_file_timeout:g}s: {e}") from e
            self.emit("remount_failed", str(e))
            return False
        bad_since.pop("<remount>", None)
        return True

    def read_manifest(self, done_exists: bool, bad_since: dict[str, float]) -> df.Manifest | None:
        if not done_exists:
            return None
        path = self.config.source_dir / df.MANIFEST_NAME
        try:
            st = os.stat(path)
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            if self._manifest is not None and self._manifest[0] == key:
                return self._manifest[1]
            m = df.read_manifest(path)
        except (df.ManifestNotReadable, OSError) as e:
            # On a ro,norecovery mount DONE may be visible before its bytes are.
            first = bad_since.setdefault(df.MANIFEST_NAME, time.monotonic())
            if time.monotonic() - first > self.config.bad_file_timeout:
                raise DumpDataError(f"DONE is unreadable for {self.config.bad_file_timeout:g}s: {e}") from e
            return None
        except df.FormatError as e:
            # Whole JSON that breaks the format is a lie, not a half-visible file: stop now.
            raise DumpDataError(f"DONE is invalid: {e}") from e
        bad_since.pop(df.MANIFEST_NAME, None)
        self._manifest = (key, m)
        return m
