"""`cachewarm agent dump|populate` flags: checked against the contract's patterns before anything runs."""

from __future__ import annotations

import pytest
from cachewarm.contract import inputs
from cachewarm.node_agent.cli import agent_group
from cachewarm.node_agent.errors import ExitCode
from click.testing import CliRunner

from tests.node_agent.support import BUCKET

HOSTILE = [
    "warm-1\n",
    "; rm -rf /",
    "$(reboot)",
    "`id`",
    "a\nrm -rf /",
    "a'b",
    'a"b',
    "a b",
    "a|b",
    "a&&b",
    "../../etc",
]
BASE = {
    "--warm-id": "warm-1",
    "--node-id": "i-0123456789abcdef0",
    "--device": "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0",
    "--mount": "/mnt/cachewarm",
    "--status-bucket": BUCKET,
    "--status-prefix": "warms",
}


@pytest.mark.parametrize("flag", ["--warm-id", "--node-id", "--device", "--mount", "--status-bucket", "--to"])
def test_cli_rejects_hostile_values(flag: str) -> None:
    for bad in HOSTILE:
        if flag in ("--device", "--mount") and bad == "../../etc":
            continue  # not a shell risk; a path pattern allows dots
        args = {**BASE, "--to": "10.0.0.1:11211", flag: bad}
        argv = ["populate", *[x for kv in args.items() for x in kv]]
        res = CliRunner().invoke(agent_group, argv)
        assert res.exit_code == ExitCode.USAGE, (flag, bad, res.output)
        assert "Invalid value" in res.output


def test_cli_patterns_accept_what_the_controller_sends() -> None:
    # The agent checks its flags against these (cachewarm.contract.inputs).
    assert inputs.matches(inputs.WARM_ID, "warm-2026-11-22")
    assert inputs.matches(inputs.DEVICE, BASE["--device"])
    assert inputs.matches(inputs.STATUS_PREFIX, "warms")
    assert inputs.matches(inputs.ENDPOINT, "ip-10-0-0-1.ec2.internal:11211")


@pytest.mark.parametrize("bad", ["rw,norecovery", "ro", "ro,norecovery;id", "ro,norecovery,rw"])
def test_cli_refuses_reader_mount_options_that_could_write(bad: str) -> None:
    args = {**BASE, "--to": "10.0.0.1:11211", "--mount-options": bad}
    res = CliRunner().invoke(agent_group, ["populate", *[x for kv in args.items() for x in kv]])
    assert res.exit_code == ExitCode.USAGE and "--mount-options" in res.output, res.output


def test_cli_defaults_for_the_shared_volume() -> None:
    def default(cmd: str, opt: str) -> object:
        return next(p.default for p in agent_group.commands[cmd].params if p.name == opt)

    assert default("populate", "mount_options") == "ro,norecovery"
    assert default("dump", "publish_interval") == 1.0
