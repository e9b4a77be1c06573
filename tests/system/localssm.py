"""SSM Run Command wired to this machine, for the one-machine system test.

`LocalAgents` implements the controller's AgentRunner. `send()` checks the parameters as SSM does
(declared, matching `allowedPattern`, required ones given or defaulted — with the defaults the stack
fills in), sends the command to moto's SSM too (the real SendCommand call, for its id), and runs each
instance's part in a thread, as the SSM agent would: the document's real shell lines with bash, on
this machine's view of the instance (machine.py):

- memcached-stats: its script, with 127.0.0.1:<port> the local memcached serving as that node;
- install-agent: stood in for (no bundle is built here): it puts a `cachewarm` reporting the
  document's `agentVersion` on the instance, as install-agent.sh does; before it, the instance has
  none and the agent documents' own check exits 127;
- dump-agent, populate-agent, verify-agent: their script (the version check included) up to the final
  `exec cachewarm agent ...`, which reaches the installed shim; that exact argv then runs the real
  agent command (click, in this thread, so its status and verify objects land in the moto S3 the
  controller reads) against real memcacheds and the volume's directory;
- unmount: the local equivalent of its script on the host's mount table (busy while an agent of
  that host still runs on the mount: it retries, then fails, as the script does).

What an instance sees differently is mapped: 127.0.0.1:<port> on a source node is its local
memcached; a source node's private IP:<port> (verify's and populate's --source) is that node's local
memcached; `mount` is the volume's local directory (with the S3 transport's `device` none, a directory of the
host's own); the populator's state directory is a temporary directory.
Agents run in threads, so SIGTERM handling (main thread only) is left out and `cancel` stops nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import subprocess
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cachewarm import __version__
from cachewarm_controller.agents import Invocation, SsmAgentRunner

from tests.controller.names import DOCUMENT_NAMES
from tests.system.machine import Host, LocalVolumeRunner, Machine

REPO = Path(__file__).resolve().parents[2]
DOCS_DIR = REPO / "infra" / "ssm_documents"
INSTALL_SCRIPT = REPO / "infra" / "cachewarm_infra" / "install" / "install-agent.sh"
STEMS = {name: stem for stem, name in DOCUMENT_NAMES.items()}
NODE_PORT = 11211  # memcached's port on a node (the input's source.memcached_port)
REFUSED = "1"  # a local port nobody listens on: "connection refused", as on a node without memcached
UNMOUNT_TRIES, UNMOUNT_PAUSE_S = 12, 0.25  # the document's 12 tries, 10 s apart, scaled down
_PLACEHOLDER = re.compile(r"\{\{ *(\w+) *\}\}")


def stack_defaults() -> dict[str, str]:
    """What the stack fills in (infra/cachewarm_infra/compute.py, Artifacts.parameter_defaults): the
    artifacts' places and checksums, and the agent version this checkout is."""
    assets = "s3://cdk-assets-local"
    return {
        "installScriptUrl": f"{assets}/install-agent.sh",
        "installScriptSha256": hashlib.sha256(INSTALL_SCRIPT.read_bytes()).hexdigest(),
        # No bundle or tarball is built for the system test: the install is stood in for.
        "agentBundleUrl": f"{assets}/cachewarm-agent.tar.gz",
        "agentBundleSha256": "0" * 64,
        "dumperTarballUrl": f"{assets}/cachewarm-dump.tar.gz",
        "dumperTarballSha256": "0" * 64,
        "agentVersion": __version__,
    }


@dataclass
class Run:
    """One instance's part of a command."""

    instance_id: str
    exit_code: int | None = None
    output: str = ""
    argv: list[str] = field(default_factory=list)  # what the document exec'd (agent documents)
    thread: threading.Thread | None = None


@dataclass
class Command:
    id: str
    document: str  # the document's stem (infra/ssm_documents/<stem>.json)
    parameters: dict[str, str]  # as sent, defaults filled in
    comment: str
    sent_ms: int
    runs: dict[str, Run] = field(default_factory=dict)


def _load(stem: str) -> dict[str, Any]:
    return dict(json.loads((DOCS_DIR / f"{stem}.json").read_text()))


def checked_parameters(stem: str, sent: Mapping[str, str]) -> dict[str, str]:
    """SSM's checks before anything runs; returns every parameter's value (defaults filled in)."""
    spec = _load(stem)["parameters"]
    defaults = stack_defaults()
    out: dict[str, str] = {}
    for k, p in spec.items():
        if k in sent:
            out[k] = sent[k]
        elif k in defaults:
            out[k] = defaults[k]
        elif "default" in p:
            out[k] = p["default"]
        else:
            raise AssertionError(f"{stem}: required parameter {k} not given")
    for k, v in out.items():
        if k not in spec or not re.fullmatch(spec[k]["allowedPattern"], v):
            raise AssertionError(f"{stem}: parameter {k}={v!r} rejected by the document")
    unknown = sorted(set(sent) - set(spec))
    if unknown:
        raise AssertionError(f"{stem}: undeclared parameters {unknown}")
    return out


@dataclass
class LocalAgents:
    """The controller's AgentRunner, running the documents on this machine (see the module doc)."""

    machine: Machine
    ssm: Any = None  # moto's SSM: each command is really sent there too
    commands: dict[str, Command] = field(default_factory=dict)
    unmounts: list[tuple[tuple[str, ...], str]] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)

    # ---- AgentRunner ----------------------------------------------------------------------------
    def send(
        self, document: str, instance_ids: Sequence[str], parameters: Mapping[str, str], comment: str
    ) -> str:
        stem = STEMS[document]
        params = checked_parameters(stem, parameters)
        if self.ssm is not None:
            cid = SsmAgentRunner(self.ssm).send(document, instance_ids, parameters, comment)
        else:
            cid = str(uuid.uuid4())
        cmd = Command(cid, stem, params, comment[:100], int(time.time() * 1000))
        if stem == "unmount":
            self.unmounts.append((tuple(instance_ids), params["mount"]))
        self.commands[cid] = cmd
        for iid in instance_ids:
            run = Run(iid)
            run.thread = threading.Thread(
                target=self._invoke, args=(cmd, run), name=f"ssm-{cid[:8]}-{iid}", daemon=True
            )
            cmd.runs[iid] = run
        for run in cmd.runs.values():
            assert run.thread is not None
            run.thread.start()
        return cid

    def find_sent(self, document: str, instance_id: str, since_ms: int, comment: str) -> str | None:
        for cid, cmd in self.commands.items():
            if (
                cmd.document == STEMS[document]
                and instance_id in cmd.runs
                and cmd.sent_ms >= since_ms - 60_000
                and cmd.comment == comment[:100]
            ):
                return cid
        return None

    def command_states(self, command_ids: Sequence[str]) -> dict[str, str]:
        out = {}
        for c in command_ids:
            cmd = self.commands.get(c)
            codes = [r.exit_code for r in cmd.runs.values()] if cmd else []
            if cmd is None:
                out[c] = "Undeliverable"
            elif None in codes:
                out[c] = "InProgress"
            else:
                out[c] = "Success" if all(code == 0 for code in codes) else "Failed"
        return out

    def invocations(self, command_id: str) -> dict[str, Invocation]:
        out = {}
        for iid, r in self.commands[command_id].runs.items():
            if r.exit_code is None:
                out[iid] = Invocation(iid, "InProgress")
            else:
                status = "Success" if r.exit_code == 0 else "Failed"
                out[iid] = Invocation(iid, status, r.exit_code, r.output[-24_000:])
        return out

    def cancel(self, command_ids: Sequence[str]) -> None:
        # Agents here are threads: nothing to signal. One still running when the test ends fails it
        # in `join_all`.
        self.cancelled.extend(command_ids)

    def online(self, instance_ids: Sequence[str]) -> set[str]:
        return set(instance_ids)

    # ---- one instance's part ----------------------------------------------------------------------
    def _invoke(self, cmd: Command, run: Run) -> None:
        host = self.machine.host(run.instance_id)
        self.machine.current.host = host
        try:
            if cmd.document == "install-agent":
                # What install-agent.sh does, minus the download: the version it was told.
                host.install(cmd.parameters["agentVersion"])
                run.output = f"install-agent: cachewarm {host.agent_version} ready\n"
                run.exit_code = 0
            elif cmd.document == "unmount":
                run.exit_code, run.output = self._unmount(host, cmd.parameters["mount"])
            else:
                self._script(cmd, run, host)
        except BaseException as e:  # a bug here or in the agent: the command failed, visibly
            run.output += f"\n{e!r}"
            run.exit_code = 2

    def _local_view(self, cmd: Command, host: Host) -> dict[str, str]:
        """The parameters as this machine must see them (see the module doc)."""
        p = dict(cmd.parameters)
        if cmd.document == "memcached-stats":
            mc = host.memcached
            p["port"] = str(mc.port) if mc and p["port"] == str(NODE_PORT) else REFUSED
        if cmd.document == "dump-agent":
            _, port = p["memcached"].rsplit(":", 1)
            mc = host.memcached
            p["memcached"] = mc.address if mc and port == str(NODE_PORT) else f"127.0.0.1:{REFUSED}"
        if cmd.document == "verify-agent":
            ip, port = p["source"].rsplit(":", 1)
            node = self.machine.at_ip(ip)
            mc = node.memcached if node else None
            p["source"] = mc.address if mc and port == str(NODE_PORT) else f"127.0.0.1:{REFUSED}"
        if cmd.document == "populate-agent" and p.get("recheckSource", "none") != "none":
            # The populator re-checks against its source node's private address: its stand-in memcached.
            ip, port = p["recheckSource"].rsplit(":", 1)
            node = self.machine.at_ip(ip)
            mc = node.memcached if node else None
            p["recheckSource"] = mc.address if mc and port == str(NODE_PORT) else f"127.0.0.1:{REFUSED}"
        if "to" in p:
            # The destination nodes' private addresses (what the controller resolved from their tags)
            # reach their stand-in memcacheds on this machine.
            p["to"] = ",".join(self.machine.destination(e) for e in p["to"].split(","))
        if "device" in p:
            if p["device"] == "none":  # the S3 transport: `mount` is a directory on the instance's disk
                # (short: the agent's --mount takes at most 8 path segments)
                local = str(self.machine.work / "disks" / host.instance_id)
            else:
                local = str(self.machine.device(p["device"]).directory)
            host.aliases[p["mount"]] = local
            p["mount"] = local
        return p

    def _script(self, cmd: Command, run: Run, host: Host) -> None:
        """Run the document's shell lines; if they exec the agent, run that argv in-process."""
        doc = _load(cmd.document)
        params = self._local_view(cmd, host)
        lines = []
        for step in doc["mainSteps"]:
            for line in step["inputs"]["runCommand"]:
                lines.append(_PLACEHOLDER.sub(lambda m: params[m.group(1)], line))
        timeout = int(
            _PLACEHOLDER.sub(lambda m: params[m.group(1)], doc["mainSteps"][0]["inputs"]["timeoutSeconds"])
        )
        out = host.home / f"argv-{cmd.id}"
        env = host.env({**os.environ, "CACHEWARM_ARGV_OUT": str(out)})
        r = subprocess.run(
            ["bash", "-c", "\n".join(lines)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
        run.output = r.stdout + r.stderr
        if r.returncode != 0 or not out.exists():
            run.exit_code = r.returncode
            return
        run.argv = [a.decode() for a in out.read_bytes().split(b"\0")[:-1]]
        run.exit_code = self._agent(run.argv, host)

    def _agent(self, argv: list[str], host: Host) -> int:
        from cachewarm.cli import main

        if argv[:2] == ["agent", "populate"]:
            argv = [*argv, "--state-dir", str(host.home / "state")]
        try:
            main.main(args=argv, prog_name="cachewarm", standalone_mode=False)
        except SystemExit as e:
            return int(e.code or 0)
        return 0

    def _unmount(self, host: Host, mount: str) -> tuple[int, str]:
        """unmount.json on this machine: not mounted → exit 0; busy → retry, then exit 1."""
        local = host.aliases.get(mount)
        out = ""
        for attempt in range(1, UNMOUNT_TRIES + 1):
            with self.machine.lock:
                if local is None or local not in host.mounts:
                    return 0, out + f"not mounted: {mount}\n"
                busy = self._holders(host, local)
                if not busy:
                    device, _ = host.mounts.pop(local)
                    self.machine.devices[device].unmounted_on.append(host.instance_id)
                    return 0, out + f"unmounted {mount}\n"
            out += f"try {attempt}: {mount} is busy: {', '.join(busy)}\n"
            time.sleep(UNMOUNT_PAUSE_S)
        return 1, out + f"cannot unmount {mount}: still busy after {UNMOUNT_TRIES} tries\n"

    def _holders(self, host: Host, local: str) -> list[str]:
        """The agents of `host` still running on the mount point `local`."""
        return [
            f"{c.document} {c.id}"
            for c in list(self.commands.values())  # other threads send meanwhile
            for r in c.runs.values()
            if r.instance_id == host.instance_id and r.exit_code is None and local in r.argv
        ]

    # ---- for the test ---------------------------------------------------------------------------
    def join_all(self, timeout: float = 60.0) -> list[str]:
        """Wait for every command's threads; returns the ones still running (a leak)."""
        alive = []
        for cmd in self.commands.values():
            for r in cmd.runs.values():
                assert r.thread is not None
                r.thread.join(timeout)
                if r.thread.is_alive():
                    alive.append(f"{cmd.document} on {r.instance_id}")
        return alive

    def runs(self, document: str) -> list[Run]:
        """Every instance's part of every command of one document (by stem)."""
        return [r for c in self.commands.values() if c.document == document for r in c.runs.values()]

    def describe(self) -> str:
        return "\n".join(
            f"{c.document} {r.instance_id}: exit {r.exit_code} argv={shlex.join(r.argv)} "
            f"output={r.output.strip()[-500:]!r}"
            for c in self.commands.values()
            for r in c.runs.values()
        )


@contextlib.contextmanager
def agent_patches(monkeypatch: Any, machine: Machine) -> Any:
    """Point the real node-agent code at this machine (see machine.py for each stand-in)."""
    from cachewarm.node_agent import lifecycle
    from cachewarm.node_agent.errors import AgentError, ExitCode
    from cachewarm.node_agent.volume import Volume

    monkeypatch.setattr(lifecycle, "sigterm_raises", contextlib.nullcontext)
    # Each agent writes its status objects under its own instance's ARN (what IMDS would give it).
    from cachewarm.contract.status import instance_arn
    from cachewarm.node_agent import identity

    monkeypatch.setattr(
        identity,
        "this_instance_arn",
        lambda *a, **k: instance_arn("us-east-1", "123456789012", machine.current.host.instance_id),
    )
    # The agent builds its runner in the thread running its command: on that command's host.
    monkeypatch.setattr(
        lifecycle, "SubprocessRunner", lambda: LocalVolumeRunner(machine, machine.current.host)
    )

    def wait_for_device(self: Volume, timeout_s: float) -> None:
        host: Host = machine.current.host
        deadline = time.monotonic() + timeout_s
        while not machine.device_present(self.device, host.instance_id):
            if time.monotonic() >= deadline:
                raise AgentError(ExitCode.VOLUME, f"device {self.device} not attached to {host.instance_id}")
            time.sleep(0.05)
        machine.device(self.device)

    monkeypatch.setattr(Volume, "wait_for_device", wait_for_device)
    yield
