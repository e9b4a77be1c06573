"""`warm`'s rate limits mean what they say (issue 14 §4): `--max-items-per-second` limits both the
dumper's reads from the source and the populator's writes to the target; `--source-...` and
`--target-max-items-per-second` set one side alone. Checked where each limit is handed over — the
dumper's command line (`DumperCommand`) and the populator's configuration — and end to end through
the CLI with a real dumper (through a wrapper that records its argv) and real memcached servers."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
from cachewarm.cli import main
from cachewarm.datapath import warm as warm_mod
from cachewarm.datapath.nodes import Node
from cachewarm.datapath.warm_config import WarmConfig, dumper_command, populate_config
from click.testing import CliRunner

from tests.cli.support import load


def config(**rates: Any) -> WarmConfig:
    return WarmConfig(
        source=Node("127.0.0.1", 11211),
        targets=[Node("127.0.0.1", 11311)],
        workdir=Path("/w"),
        dumper=Path("/bin/cachewarm-dump"),
        workers=4,
        **rates,
    )


def dumper_limit(argv: list[str]) -> str | None:
    return argv[argv.index("--max-items-per-second") + 1] if "--max-items-per-second" in argv else None


@pytest.mark.parametrize(
    ("rates", "source", "target"),
    [
        ({}, None, None),
        ({"max_items_per_second": 1000.0}, "1000", 1000.0),
        ({"max_items_per_second": 1000.6}, "1001", 1000.6),  # the dumper takes whole items/s
        ({"source_max_items_per_second": 50}, "50", None),
        ({"target_max_items_per_second": 70.0}, None, 70.0),
        ({"max_items_per_second": 1000.0, "source_max_items_per_second": 10}, "10", 1000.0),
        ({"max_items_per_second": 1000.0, "target_max_items_per_second": 20.0}, "1000", 20.0),
        ({"source_max_items_per_second": 30, "target_max_items_per_second": 40.0}, "30", 40.0),
    ],
)
def test_each_side_gets_its_limit(rates: dict[str, Any], source: str | None, target: float | None) -> None:
    cfg = config(**rates)
    assert dumper_limit(dumper_command(cfg, Path("/w/dump")).argv()) == source
    pcfg = populate_config(cfg, Path("/w/dump"), Path("/w/state.json"))
    assert pcfg.max_items_per_second == target
    # The populator splits its limit over its workers.
    share = pcfg.worker_params().items_per_second
    assert share == (target / 4 if target else None)


def recording_dumper(real: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A `--dumper` that writes its argv (one JSON line) and runs the real one."""
    log = tmp_path / "argv.jsonl"
    script = tmp_path / "dumper.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' \"$@\" >> {log}\n"
        f'exec {real} "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, log


@pytest.mark.parametrize(
    ("flags", "source", "target"),
    [
        (["--max-items-per-second", "200000"], "200000", 200000.0),
        (
            ["--source-max-items-per-second", "150000", "--target-max-items-per-second", "90000"],
            "150000",
            90000.0,
        ),
    ],
    ids=["both", "each"],
)
def test_warm_hands_each_limit_to_its_side(
    memcached,
    dumper_bin: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    flags: list[str],
    source: str,
    target: float,
) -> None:
    src, dst = memcached(memory_mb=16), memcached(memory_mb=16)
    load(src, 500)
    dumper, log = recording_dumper(dumper_bin, tmp_path)
    seen: list[Any] = []
    real_populate = warm_mod.populate

    def populate(cfg: Any, on_progress: Any = None) -> Any:
        seen.append(cfg)
        return real_populate(cfg, on_progress)

    monkeypatch.setattr(warm_mod, "populate", populate)
    args = ["warm", "--source", src.address, "--target", dst.address, "--workdir", str(tmp_path / "w")]
    res = CliRunner().invoke(main, [*args, "--dumper", str(dumper), "--json", *flags])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output.splitlines()[-1])["items_dumped"] == 500
    (argv,) = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert dumper_limit(argv) == source
    (pcfg,) = seen
    assert pcfg.max_items_per_second == target


@pytest.mark.parametrize(
    "protection",
    [
        ["--adaptive", "1.25", "--crawl-sleep-us", "300", "--order", "crawl"],
        # The former spellings, still read.
        ["--adaptive", "--adaptive-target", "1.25", "--source-crawl-sleep-us", "300", "--order", "crawl"],
    ],
    ids=["shared", "former"],
)
def test_the_source_protection_reaches_the_dumper_and_bytes_the_populator(
    memcached, dumper_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, protection: list[str]
) -> None:
    """Bytes/s on both sides, the adaptive guard, the crawl's pace and the order."""
    src, dst = memcached(memory_mb=16), memcached(memory_mb=16)
    load(src, 500)
    dumper, log = recording_dumper(dumper_bin, tmp_path)
    seen: list[Any] = []
    real_populate = warm_mod.populate
    monkeypatch.setattr(warm_mod, "populate", lambda cfg, p=None: seen.append(cfg) or real_populate(cfg, p))
    args = ["warm", "--source", src.address, "--target", dst.address, "--workdir", str(tmp_path / "w")]
    flags = ["--source-max-bytes-per-second", "64M", "--target-max-bytes-per-second", "32M", *protection]
    res = CliRunner().invoke(main, [*args, "--dumper", str(dumper), "--json", *flags])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output.splitlines()[-1])["items_dumped"] == 500
    (argv,) = [json.loads(ln) for ln in log.read_text().splitlines()]
    named = ("--max-bytes-per-second", "--crawl-sleep-us", "--order", "--adaptive-target")
    got = {f: argv[argv.index(f) + 1] for f in named}
    assert got == {
        "--max-bytes-per-second": str(64 << 20),
        "--crawl-sleep-us": "300",
        "--order": "crawl",
        "--adaptive-target": "1.25",
    }
    assert "--adaptive" in argv
    (pcfg,) = seen
    assert pcfg.max_bytes_per_second == 32 << 20
    assert pcfg.worker_params().bytes_per_second == (32 << 20) / pcfg.workers


def test_the_populators_limiter_waits_for_the_tighter_of_items_and_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fake clock: 100 items/s and 1000 bytes/s; 10 items of 500 bytes are due after 5 s, not 0.1 s."""
    from cachewarm.datapath.populate import ratelimit

    now = [0.0]
    slept: list[float] = []
    monkeypatch.setattr(ratelimit.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(ratelimit.time, "sleep", lambda s: slept.append(s) or now.__setitem__(0, now[0] + s))
    lim = ratelimit.RateLimiter(100.0, 1000.0)
    lim.take(10, 5000)
    assert slept == [5.0]
    lim.take(1000, 0)  # now items are the tighter: 1010 items at 100/s are due at 10.1 s
    assert round(sum(slept), 6) == 10.1
    ratelimit.RateLimiter(None, None).take(10**6, 10**9)
    assert len(slept) == 2
