"""SSM Run Command wired to this machine, for the one-machine system test.

`LocalAgents` implements the controller's AgentRunner. `send()` renders the real SSM document
(infra/ssm_documents/*.json) with the command's parameters and runs its shell lines with bash; the
final `exec cachewarm agent ...` reaches a shim that records its argv, and that exact argv then runs
the real agent command (click, in a thread of this process, so the agent's status objects land in
the same moto S3 the controller reads). The agent really runs the dumper against a real source
memcached and the populator against real destination memcacheds; only what needs an EC2 instance is
stood in for:

- "127.0.0.1 on instance X" (the dump document's --memcached) is the local memcached serving as X;
- each EBS volume is a local directory (one per volume id, shared by its source and its populator,
  as multi-attach shares the device); mkfs/blkid/findmnt/mount/umount act on a per-device record,
  and fsfreeze/blockdev do nothing (a real fsfreeze on a directory freezes the file system holding
  it: this machine's root);
- the device node exists once attached (moto has no block devices);
- the populator's state directory is a temporary directory instead of /var/lib/cachewarm;
- agents run in threads, so SIGTERM handling (main thread only) is left out.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cachewarm.node_agent.runner import CommandResult, SubprocessRunner
from cachewarm.testing.memcached import MemcachedServer
from cachewarm_controller.model import NodeStats

REPO = Path(__file__).resolve().parents[2]
DOCS = {"cachewarm-dump-agent": "dump-agent.json", "cachewarm-populate-agent": "populate-agent.json"}


@dataclass
class Device:
    """What the kernel would know about one EBS volume on this machine."""

    directory: Path
    fstype: str | None = None
    mounts: list[str] = field(default_factory=list)  # mount options of each mount, in order
    source_unmounted: bool = False  # the controller's teardown unmounted it on the source node


@dataclass
class LocalVolumeRunner:
    """The node agent's CommandRunner: volume commands act on `Device` records; everything else (the
    dumper) really runs."""

    devices: dict[str, Device]
    lock: threading.Lock
    mounted: dict[str, str] = field(default_factory=dict)  # mount point -> options
    real: SubprocessRunner = field(default_factory=SubprocessRunner)

    def _device(self, path: str) -> Device:
        return self.devices[path]

    def run(self, argv: Sequence[str]) -> CommandResult:
        a = list(argv)
        with self.lock:
            if a[0] == "blkid":
                fs = self._device(a[-1]).fstype
                return CommandResult(tuple(a), 0 if fs else 2, f"{fs}\n" if fs else "")
            if a[0] == "mkfs.xfs":
                self._device(a[-1]).fstype = "xfs"
                return CommandResult(tuple(a), 0)
            if a[0] == "findmnt":
                mp = a[a.index("--mountpoint") + 1]
                opts = self.mounted.get(mp)
                return CommandResult(tuple(a), 0 if opts else 1, f"dev xfs {opts}\n" if opts else "")
            if a[0] == "mount":
                opts = a[a.index("-o") + 1]
                dev, mp = a[-2], a[-1]
                self._device(dev).mounts.append(opts)
                self.mounted[mp] = opts
                return CommandResult(tuple(a), 0)
            if a[0] == "umount":
                self.mounted.pop(a[-1], None)
                return CommandResult(tuple(a), 0)
            if a[0] in ("fsfreeze", "blockdev"):
                return CommandResult(tuple(a), 0)
            if a[0] == "mkdir":
                Path(a[-1]).mkdir(parents=True, exist_ok=True)
                return CommandResult(tuple(a), 0)
        return self.real.run(a)

    def stream(self, argv: Sequence[str], on_line: Callable[[str], None]) -> CommandResult:
        return self.real.stream(argv, on_line)


@dataclass
class Command:
    id: str
    document: str
    instance_id: str
    parameters: dict[str, str]
    argv: list[str] = field(default_factory=list)
    exit_code: int | None = None
    error: str = ""
    thread: threading.Thread | None = None


@dataclass
class LocalAgents:
    """The controller's AgentRunner, running the agents on this machine (see the module doc)."""

    work: Path
    sources: dict[str, MemcachedServer]  # instance id -> its memcached
    volume_of: Callable[[str], str]  # device path -> volume id (from the controller's naming)
    commands: dict[str, Command] = field(default_factory=dict)
    devices: dict[str, Device] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    unmounts: list[tuple[tuple[str, ...], str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.bin = self.work / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        shim = self.bin / "cachewarm"
        # Stands in for the installed agent at the end of the document: records the argv it got.
        shim.write_text('#!/bin/sh\nprintf \'%s\\0\' "$@" > "$CACHEWARM_ARGV_OUT"\n')
        shim.chmod(0o755)

    # ---- AgentRunner ----------------------------------------------------------------------------
    def send(self, document: str, instance_id: str, parameters: dict[str, str], comment: str) -> str:
        cmd = Command(str(uuid.uuid4()), document, instance_id, dict(parameters))
        cmd.argv = self._render(cmd)
        cmd.thread = threading.Thread(target=self._run, args=(cmd,), name=f"agent-{cmd.id[:8]}", daemon=True)
        self.commands[cmd.id] = cmd
        cmd.thread.start()
        return cmd.id

    def statuses(self, command_ids: Sequence[str], since_ms: int) -> dict[str, str]:
        out = {}
        for c in command_ids:
            cmd = self.commands.get(c)
            if cmd is None:
                out[c] = "Undeliverable"
            elif cmd.exit_code is None:
                out[c] = "InProgress"
            else:
                out[c] = "Success" if cmd.exit_code == 0 else "Failed"
        return out

    def cancel(self, command_ids: Sequence[str]) -> None:
        # Agents here are threads: nothing to signal. A test that ends with a command still running
        # fails in `join_all`.
        pass

    def unmount(self, instance_ids: Sequence[str], mount_point: str, comment: str) -> None:
        """Teardown's lazy unmount on source nodes: here, the devices those nodes' dumps mounted."""
        self.unmounts.append((tuple(instance_ids), mount_point))
        for cmd in self.commands.values():
            if cmd.instance_id in instance_ids and "memcached" in cmd.parameters:
                self.device(cmd.parameters["device"]).source_unmounted = True

    def online(self, instance_ids: Sequence[str]) -> set[str]:
        return set(instance_ids)

    def memcached_stats(self, instance_ids: Sequence[str], port: int) -> dict[str, NodeStats]:
        out = {}
        for i in instance_ids:
            srv = self.sources.get(i)
            if srv is None:
                out[i] = NodeStats(items=0, bytes=0)
            else:
                st = srv.stats()
                out[i] = NodeStats(items=int(st["curr_items"]), bytes=int(st["bytes"]))
        return out

    # ---- the machine ----------------------------------------------------------------------------
    def device(self, path: str) -> Device:
        with self.lock:
            if path not in self.devices:
                d = self.work / "volumes" / self.volume_of(path)
                d.mkdir(parents=True, exist_ok=True)
                self.devices[path] = Device(d)
            return self.devices[path]

    def _render(self, cmd: Command) -> list[str]:
        """Run the document's shell lines (parameters substituted) up to the agent's argv."""
        doc = json.loads((REPO / "infra" / "ssm_documents" / DOCS[cmd.document]).read_text())
        # What SSM checks before anything runs: every parameter declared and matching its pattern.
        for k, v in cmd.parameters.items():
            spec = doc["parameters"].get(k)
            if spec is None or not re.fullmatch(spec["allowedPattern"], v):
                raise AssertionError(f"{cmd.document}: parameter {k}={v!r} rejected by the document")
        params = {k: p.get("default") for k, p in doc["parameters"].items()}
        params.update(cmd.parameters)
        # This machine's view of the instance: its memcached, the volume's directory.
        if "memcached" in params:
            params["memcached"] = self.sources[cmd.instance_id].address
        params["mount"] = str(self.device(params["device"]).directory)
        lines: list[str] = []
        for step in doc["mainSteps"]:
            for line in step["inputs"]["runCommand"]:
                for k, v in params.items():
                    line = line.replace("{{ " + k + " }}", str(v))
                lines.append(line)
        out = self.work / f"argv-{cmd.id}"
        env = {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}", "CACHEWARM_ARGV_OUT": str(out)}
        r = subprocess.run(
            ["bash", "-c", "\n".join(lines)], env=env, capture_output=True, text=True, check=False
        )
        if r.returncode != 0 or not out.exists():
            raise AssertionError(f"{cmd.document} script failed ({r.returncode}): {r.stderr}")
        argv = out.read_bytes().split(b"\0")[:-1]
        return [a.decode() for a in argv]

    def _run(self, cmd: Command) -> None:
        from cachewarm.cli import main

        argv = list(cmd.argv)
        if argv[:2] == ["agent", "populate"]:
            argv += ["--state-dir", str(self.work / "state" / cmd.instance_id)]
        try:
            main.main(args=argv, prog_name="cachewarm", standalone_mode=False)
            cmd.exit_code = 0
        except SystemExit as e:
            cmd.exit_code = int(e.code or 0)
        except BaseException as e:  # a click usage error or a bug: the command failed
            cmd.exit_code = 2
            cmd.error = repr(e)

    def join_all(self, timeout: float = 60.0) -> list[str]:
        """Wait for every agent thread; returns the ones still running (a leak)."""
        alive = []
        for cmd in self.commands.values():
            assert cmd.thread is not None
            cmd.thread.join(timeout)
            if cmd.thread.is_alive():
                alive.append(f"{cmd.document} on {cmd.instance_id}")
        return alive

    def describe(self) -> str:
        return "\n".join(
            f"{c.document} {c.instance_id}: exit {c.exit_code} {c.error} argv={shlex.join(c.argv)}"
            for c in self.commands.values()
        )


@contextlib.contextmanager
def agent_patches(monkeypatch: Any, agents: LocalAgents) -> Any:
    """Point the real node-agent code at this machine (see the module doc for each stand-in)."""
    from cachewarm.node_agent import cli as agent_cli
    from cachewarm.node_agent.volume import Volume

    monkeypatch.setattr(agent_cli, "_sigterm_raises", contextlib.nullcontext)
    monkeypatch.setattr(agent_cli, "SubprocessRunner", lambda: LocalVolumeRunner(agents.devices, agents.lock))

    def wait_for_device(self: Volume, timeout_s: float) -> None:
        agents.device(self.device)

    monkeypatch.setattr(Volume, "wait_for_device", wait_for_device)
    yield
