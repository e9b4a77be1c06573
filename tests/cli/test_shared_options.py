"""One option vocabulary: an option both `cachewarm warm` / `verify` / `populate` and `cachewarm agent`
take has the same name, type, default and help in every command that has it, and the dump document
(what the controller sends) defaults to what the CLIs do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from cachewarm.cli_types import Matching
from cachewarm.contract import inputs
from cachewarm.datapath.cli_options import protection_of
from cachewarm.exitcodes import ExitCode
from cachewarm.shared_options import SHARED

from tests.cli.support import run
from tests.cli.test_help import ALL

DUMP_DOCUMENT = Path(__file__).resolve().parents[2] / "infra/ssm_documents/dump-agent.json"


def described(opt: click.Option) -> dict[str, Any]:
    """What a user sees of an option and what it accepts."""
    kind: Any = type(opt.type).__name__
    if isinstance(opt.type, click.Choice):
        kind = (kind, tuple(opt.type.choices))
    elif isinstance(opt.type, Matching):
        kind = (kind, opt.type.pattern, getattr(opt.type, "lo", None), getattr(opt.type, "hi", None))
    return {
        "opts": (tuple(opt.opts), tuple(opt.secondary_opts)),
        "type": kind,
        "default": opt.default,
        "show_default": opt.show_default,
        "help": opt.help,
        "metavar": opt.metavar,
        "flag_value": opt.flag_value,
        "required": opt.required,
    }


def holders(flag: str) -> dict[str, click.Option]:
    return {
        name: opt
        for name, cmd in ALL
        for opt in cmd.params
        if isinstance(opt, click.Option) and flag in opt.opts
    }


# Which commands must carry each shared option (at least these: a new command may add one).
EXPECTED = {
    "--mode": {"populate", "warm", "agent populate", "agent stream"},
    "--threads": {"warm", "agent dump", "agent stream"},
    "--ttl-tolerance": {"verify", "agent verify"},
    "--adaptive": {"warm", "agent dump", "agent stream"},
    "--order": {"warm", "agent dump", "agent stream"},
    "--crawl-sleep-us": {"warm", "agent dump", "agent stream"},
}


@pytest.mark.parametrize("flag", sorted(SHARED))
def test_a_shared_option_is_the_same_in_every_command(flag: str) -> None:
    found = holders(flag)
    assert EXPECTED[flag] <= set(found), f"{flag}: missing from {EXPECTED[flag] - set(found)}"
    (reference,) = click.command()(SHARED[flag](lambda **_: None)).params
    want = described(reference)  # type: ignore[arg-type]
    for name, opt in found.items():
        assert described(opt) == want, f"cachewarm {name} {flag} differs from shared_options"


def test_the_dump_document_defaults_to_what_the_clis_do() -> None:
    params = json.loads(DUMP_DOCUMENT.read_text())["parameters"]
    for flag, param in (
        ("--adaptive", "adaptive"),
        ("--order", "order"),
        ("--crawl-sleep-us", "crawlSleepUs"),
    ):
        (opt,) = {o.default for o in holders(flag).values()}
        assert params[param]["default"] == opt, (
            f"{param} defaults to {params[param]['default']}, {flag} to {opt}"
        )
        assert params[param]["allowedPattern"] == inputs.SSM_PARAMETERS[param]


def protection(adaptive: str = "on", order: str = "recency", sleep: str = "server", **former: Any) -> Any:
    flags = {"no_adaptive": False, "adaptive_target": None, "source_crawl_sleep_us": None} | former
    return protection_of(None, {"adaptive": adaptive, "order": order, "crawl_sleep_us": sleep, **flags})


def test_the_adaptive_guard_is_on_unless_turned_off() -> None:
    assert {opt.default for opt in holders("--adaptive").values()} == {"on"}
    assert protection().adaptive
    assert not protection("off").adaptive
    # The former spellings give what the shared ones do.
    assert protection(no_adaptive=True) == protection("off")
    assert protection(order="crawl", adaptive_target=2.5, source_crawl_sleep_us=300) == protection(
        "2.5", "crawl", "300"
    )


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--adaptive", "1.01"], "--adaptive"),
        (["--adaptive", "maybe"], "--adaptive"),
        (["--crawl-sleep-us", "1000001"], "--crawl-sleep-us"),
        (["--order", "lru"], "--order"),
        (["--threads", "0"], "--threads"),
        (["--no-adaptive", "--adaptive", "2"], "--no-adaptive"),
        (["--adaptive", "off", "--adaptive-target", "2"], "--adaptive-target"),
    ],
)
def test_bad_protection_flags_are_one_usage_error(flags: list[str], named: str, tmp_path: Path) -> None:
    args = ["warm", "--source", "127.0.0.1:1", "--target", "127.0.0.1:2", "--workdir", str(tmp_path), *flags]
    r = run(args)
    assert r.returncode == ExitCode.USAGE, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.lower().startswith("error:")]
    assert len(errors) == 1 and named in errors[0] and "Traceback" not in r.stderr, r.stderr
    assert "^(" not in errors[0], "the error says what is allowed in words, not as the pattern"


@pytest.mark.parametrize(
    ("source", "flags", "guarded"),
    [
        ("127.0.0.1:1", [], False),  # a lab warm: the guard would measure our own processes
        ("localhost:1", [], False),
        ("127.0.0.1:1", ["--adaptive", "on"], True),
        ("127.0.0.1:1", ["--adaptive", "2"], True),
        ("10.1.2.3:11211", [], True),  # a source elsewhere may have live clients
        ("10.1.2.3:11211", ["--adaptive", "off"], False),
    ],
)
def test_warm_guards_a_source_unless_every_memcached_is_on_this_machine(
    source: str, flags: list[str], guarded: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cachewarm.cli import main
    from cachewarm.datapath import warm
    from click.testing import CliRunner

    seen: list[Any] = []

    def run_warm(cfg: Any, display: Any) -> Any:
        seen.append(cfg.source_protection)
        raise SystemExit(0)

    monkeypatch.setattr(warm, "run_warm", run_warm)
    args = ["warm", "--source", source, "--target", "127.0.0.1:2", "--workdir", str(tmp_path), *flags]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0 and len(seen) == 1, res.output
    assert seen[0].adaptive is guarded
