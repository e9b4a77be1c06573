"""Every `cachewarm` option explains itself and every command lists its exit codes (issue 14 §3).

Walks the click tree: each option has help text; numbers with units say them (seconds, items/s,
bytes with suffixes); an option's default is shown or said; each command's --help epilog lists exit
codes of the one table (cachewarm/exitcodes.py), and docs/exit-codes.md names, per code, exactly the
commands whose epilog lists it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from cachewarm.cli import main
from cachewarm.exitcodes import MEANING, ExitCode
from click.testing import CliRunner

DOC = Path(__file__).resolve().parents[2] / "docs" / "exit-codes.md"
EPILOG_LINE = re.compile(r"^\s+(\d+)\s{2}\S")


def commands(group: click.Group = main, path: tuple[str, ...] = ()) -> Iterator[tuple[str, click.Command]]:
    """(`agent populate`, its command) for every command under the group, leaves only."""
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            yield from commands(cmd, (*path, name))
        else:
            yield " ".join((*path, name)), cmd


def options(cmd: click.Command) -> list[click.Option]:
    return [p for p in cmd.params if isinstance(p, click.Option) and not p.hidden]


def epilog_codes(cmd: click.Command) -> list[int]:
    text = cmd.epilog or ""
    assert "Exit codes:" in text, "no `Exit codes:` block in the epilog"
    return [
        int(m.group(1))
        for line in text.split("Exit codes:", 1)[1].splitlines()
        if (m := EPILOG_LINE.match(line))
    ]


ALL = list(commands())
IDS = [name for name, _ in ALL]


def test_the_tree_is_walked() -> None:
    assert {"populate", "warm", "verify", "demo", "start", "status", "watch", "agent dump"} <= set(IDS)


@pytest.mark.parametrize(("name", "cmd"), ALL, ids=IDS)
def test_every_option_has_help(name: str, cmd: click.Command) -> None:
    missing = [o.opts[0] for o in options(cmd) if not (o.help or "").strip()]
    assert not missing, f"cachewarm {name}: options without help: {missing}"


def _says_default(o: click.Option) -> bool:
    if o.is_flag or o.required or o.show_default:
        return True
    help_ = (o.help or "").lower()
    return "default" in help_ or "leave out" in help_


@pytest.mark.parametrize(("name", "cmd"), ALL, ids=IDS)
def test_every_default_is_shown_or_said(name: str, cmd: click.Command) -> None:
    silent = [o.opts[0] for o in options(cmd) if not _says_default(o)]
    assert not silent, f"cachewarm {name}: options whose default is neither shown nor said: {silent}"


def _unit_missing(o: click.Option) -> str | None:
    flag, help_ = o.opts[0], (o.help or "").lower()
    if re.search(r"timeout|interval|seconds|tolerance", flag) and "second" not in help_:
        return "seconds"
    if "per-second" in flag:
        unit = "bytes/s" if "bytes-per-second" in flag else "items/s"
        return None if unit in help_ else unit
    if flag.endswith("-size") and not ("bytes" in help_ and "suffix" in help_):
        return "bytes with suffixes"
    return None


@pytest.mark.parametrize(("name", "cmd"), ALL, ids=IDS)
def test_numbers_say_their_unit(name: str, cmd: click.Command) -> None:
    bad = {o.opts[0]: u for o in options(cmd) if (u := _unit_missing(o))}
    assert not bad, f"cachewarm {name}: options that do not name their unit: {bad}"


@pytest.mark.parametrize(("name", "cmd"), ALL, ids=IDS)
def test_every_command_lists_its_exit_codes(name: str, cmd: click.Command) -> None:
    codes = epilog_codes(cmd)
    assert codes == sorted(set(codes)), f"cachewarm {name}: exit codes out of order or repeated: {codes}"
    assert {0, 2} <= set(codes), f"cachewarm {name}: success and usage errors must be listed"
    assert set(codes) <= {int(c) for c in ExitCode}, f"cachewarm {name}: codes outside the table: {codes}"


@pytest.mark.parametrize(("name", "cmd"), ALL, ids=IDS)
def test_help_renders_with_the_epilog(name: str, cmd: click.Command) -> None:
    res = CliRunner().invoke(main, [*name.split(), "--help"], terminal_width=100)
    assert res.exit_code == 0, res.output
    assert "Exit codes:" in res.output and "\n      0  " in res.output


def doc_table() -> dict[int, tuple[str, str, set[str]]]:
    """docs/exit-codes.md's table: code -> (name, meaning, commands)."""
    rows: dict[int, tuple[str, str, set[str]]] = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].isdigit():
            cmds = {c.strip().strip("`") for c in cells[3].split(",") if c.strip()}
            rows[int(cells[0])] = (cells[1].strip("`"), cells[2], cmds)
    return rows


def test_the_docs_table_is_the_table() -> None:
    rows = doc_table()
    assert sorted(rows) == sorted(int(c) for c in ExitCode)
    for code in ExitCode:
        assert rows[int(code)][0] == code.name, f"{int(code)}: named {rows[int(code)][0]}, not {code.name}"
        assert MEANING[code]


def test_the_docs_name_the_commands_of_each_code() -> None:
    rows = doc_table()
    for code, (_, _, cmds) in rows.items():
        want = {f"cachewarm {name}" for name, cmd in ALL if code in epilog_codes(cmd)}
        have = {c for c in cmds if c.startswith("cachewarm ")}
        assert have == want, f"exit {code}: the docs name {sorted(have)}, the epilogs {sorted(want)}"


@pytest.mark.parametrize(("name", "cmd"), ALL, ids=IDS)
def test_every_command_shows_an_example(name: str, cmd: click.Command) -> None:
    """Issue 27: no command's --help had an example."""
    res = CliRunner().invoke(main, [*name.split(), "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    text = res.output.split("Example", 1)
    assert len(text) == 2, f"cachewarm {name} --help has no Example"
    assert f"cachewarm {name} " in text[1], text[1][:300]
