"""`cachewarm-dump` from Python: the argument list `warm` builds and the parsing of its progress lines."""

from __future__ import annotations

import subprocess
from pathlib import Path

from cachewarm.datapath.dumper import DumperCommand, DumperProgress
from cachewarm.testing.memcached import MemcachedServer

# As dumper-cpp/src/dumper.cc PrintProgress writes it.
LINE = (
    '{"event": "progress", "phase": "dump", "keys_listed": 100, "items": 90, "bytes": 9000, "files": 2,'
    ' "misses": 3, "skipped_min_ttl": 7, "time_ms": 1700000000000}\n'
)


def test_parses_every_field_the_dumper_prints() -> None:
    p = DumperProgress.parse(LINE)
    assert p == DumperProgress("progress", "dump", 100, 90, 9000, 2, 3, 7, 1_700_000_000_000)
    assert DumperProgress.parse(LINE.replace('"progress"', '"done"').encode()) == DumperProgress(
        "done", "dump", 100, 90, 9000, 2, 3, 7, 1_700_000_000_000
    )
    assert p is not None and DumperProgress.parse(p.to_json()) == p


def test_anything_else_is_not_progress() -> None:
    others = ["", "not json", "[1, 2]", '{"event": "start"}', '{"items": 5}']
    others.append('{"event": "progress", "items": "x"}')
    for line in others:
        assert DumperProgress.parse(line) is None, line


def test_argv_passes_only_what_is_set() -> None:
    cmd = DumperCommand(binary="/bin/cachewarm-dump", host="10.0.0.1", port=11211, out=Path("/v/dump"))
    assert cmd.argv() == ["/bin/cachewarm-dump", "--host", "10.0.0.1", "--port", "11211", "--out", "/v/dump"]
    full = DumperCommand(
        binary="d",
        host="h",
        port=1,
        out=Path("o"),
        node_id="n",
        threads=2,
        max_items_per_second=5,
        data_file_size="32M",
        progress_interval=0.5,
        resume=True,
        extra_args=["--x"],
    )
    assert full.argv() == [
        "d",
        *("--host", "h", "--port", "1", "--out", "o", "--node-id", "n", "--threads", "2"),
        *("--max-items-per-second", "5", "--data-file-size", "32M", "--progress-interval", "0.5"),
        "--resume",
        "--x",
    ]


def test_the_real_dumper_accepts_the_argv_and_its_lines_parse(
    memcached, dumper_bin: Path, tmp_path: Path
) -> None:
    srv: MemcachedServer = memcached(memory_mb=16)
    srv.command(b"set k 0 0 1\r\nv\r\n", until=b"STORED\r\n")
    argv = DumperCommand(
        binary=dumper_bin, host=srv.host, port=srv.port, out=tmp_path / "dump", progress_interval=0.05
    ).argv()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    parsed = [DumperProgress.parse(line) for line in out.splitlines()]
    assert parsed and all(p is not None for p in parsed), out
    last = parsed[-1]
    assert last is not None and last.event == "done" and last.items == 1 and last.keys_listed == 1


def test_the_agents_adaptive_flag_becomes_the_dumpers_guard_and_threshold() -> None:
    """`agent dump|stream --adaptive on|off|RATIO` (the dump document's one parameter) reaches
    cachewarm-dump as --adaptive [--adaptive-target RATIO]; the other protection flags ride along."""
    from cachewarm.node_agent.options import protection_fields

    def argv(adaptive: str, sleep: str = "server") -> list[str]:
        prot = protection_fields(None, adaptive, "recency", sleep)["protection"]
        return DumperCommand(binary="d", host="h", port=1, out=Path("o"), protection=prot).argv()[7:]

    assert argv("off") == ["--order", "recency"]
    assert argv("on") == ["--adaptive", "--order", "recency"]
    assert argv("2.5", "250") == [
        "--adaptive", "--adaptive-target", "2.5", "--crawl-sleep-us", "250", "--order", "recency"
    ]  # fmt: skip
