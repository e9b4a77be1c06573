"""A data file is mapped with the size fstat gave; one rewritten in place meanwhile (shorter) is not yet
whole: the populator looks again next round, as for a file it cannot read, instead of failing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cachewarm.datapath.populate import worker


def test_a_file_that_shrank_before_it_was_mapped_reads_as_unreadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f.cwd"
    path.write_bytes(b"x" * 10)
    real = os.fstat

    def larger(fd: int) -> os.stat_result:  # what fstat said before the file was cut short
        st = tuple(real(fd))
        return os.stat_result((*st[:6], 1 << 20, *st[7:]))

    monkeypatch.setattr(worker.os, "fstat", larger)
    with pytest.raises(OSError, match="size changed"), worker.mapped(str(path)):
        pass
