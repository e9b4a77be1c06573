"""This machine's view of the EC2 instances of the system test (tests/system/localssm.py runs the
SSM documents against it): one `Host` per instance, one `Device` per EBS volume.

- A source node's memcached is a real local memcached (on 127.0.0.1, as the documents ask).
- Each EBS volume is a local directory, shared by its source and its populator as multi-attach
  shares the device; mkfs/blkid act on the `Device` record, mount/umount/findmnt on the host's mount
  table (each host has its own, as each instance has its own kernel), and fsfreeze/blockdev do
  nothing (a real fsfreeze on a directory freezes the file system holding it: this machine's root).
- The device node exists once the volume is attached to the host (the test's attacher says so).
- An instance has no `cachewarm` until the install-agent document put one there: a shim reporting
  the installed version and recording the argv the document `exec`s (the agent then runs
  in-process, see localssm.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cachewarm.node_agent.runner import CommandResult, SubprocessRunner
from cachewarm.testing.memcached import MemcachedServer

# An instance's PATH: the system's directories only (this machine's own `cachewarm` is elsewhere).
INSTANCE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
# `umount` of something not mounted (util-linux's exit code).
UMOUNT_NOT_MOUNTED = 32


@dataclass
class Device:
    """What the kernels would know about one EBS volume."""

    directory: Path
    fstype: str | None = None
    mounts: list[str] = field(default_factory=list)  # mount options of each mount, in order (any host)
    writers: set[str] = field(default_factory=set)  # instances that mounted it read-write
    unmounted_on: list[str] = field(default_factory=list)  # instances whose unmount document unmounted it


@dataclass
class Host:
    """One instance as this machine stands in for it."""

    instance_id: str
    home: Path
    memcached: MemcachedServer | None = None  # a source node's memcached
    private_ip: str | None = None
    agent_version: str | None = None  # what the install-agent document installed
    mounts: dict[str, tuple[str, str]] = field(default_factory=dict)  # local mount point -> (device, options)
    # The node's mount point (documents' `mount`) -> the local directory standing in for it.
    aliases: dict[str, str] = field(default_factory=dict)

    @property
    def bin(self) -> Path:
        return self.home / "bin"

    def install(self, version: str) -> None:
        """What install-agent.sh leaves: a `cachewarm` on the PATH that reports `version`. Here it
        records the argv it is run with (to $CACHEWARM_ARGV_OUT) for localssm.py to run in-process."""
        self.bin.mkdir(parents=True, exist_ok=True)
        shim = self.bin / "cachewarm"
        shim.write_text(
            "#!/bin/sh\n"
            f"if [ \"$1\" = --version ]; then echo 'cachewarm, version {version}'; exit 0; fi\n"
            'printf \'%s\\0\' "$@" > "$CACHEWARM_ARGV_OUT"\n'
        )
        shim.chmod(0o755)
        self.agent_version = version

    def env(self, base: dict[str, str]) -> dict[str, str]:
        return {**base, "PATH": f"{self.bin}:{INSTANCE_PATH}"}


@dataclass
class Machine:
    """The hosts and volumes; `current` is the host whose command this thread runs."""

    work: Path
    volume_of: Callable[[str], str]  # device path -> volume id
    attached: Callable[[str, str], bool] = lambda volume_id, instance_id: True
    hosts: dict[str, Host] = field(default_factory=dict)
    devices: dict[str, Device] = field(default_factory=dict)  # device path -> its record
    destinations: dict[str, str] = field(default_factory=dict)  # "<private ip>:11211" -> local address
    lock: threading.Lock = field(default_factory=threading.Lock)
    current: threading.local = field(default_factory=threading.local)

    def host(self, instance_id: str) -> Host:
        with self.lock:
            if instance_id not in self.hosts:
                self.hosts[instance_id] = Host(instance_id, self.work / "instances" / instance_id)
            return self.hosts[instance_id]

    def add_source(self, instance_id: str, private_ip: str, memcached: MemcachedServer) -> Host:
        # The documents ask memcached on 127.0.0.1 (stats, dump): the stand-in must listen there.
        assert memcached.host == "127.0.0.1", memcached.address
        h = self.host(instance_id)
        h.memcached, h.private_ip = memcached, private_ip
        return h

    def add_destination(self, private_ip: str, memcached: MemcachedServer) -> None:
        """A destination node: `<private_ip>:11211` reaches `memcached` on this machine."""
        self.destinations[f"{private_ip}:11211"] = memcached.address

    def destination(self, endpoint: str) -> str:
        """Where a destination endpoint the controller sent is reached here (unknown: refused)."""
        return self.destinations.get(endpoint, "127.0.0.1:1")

    def at_ip(self, ip: str) -> Host | None:
        return next((h for h in self.hosts.values() if h.private_ip == ip), None)

    def device(self, path: str) -> Device:
        with self.lock:
            if path not in self.devices:
                d = self.work / "volumes" / self.volume_of(path)
                d.mkdir(parents=True, exist_ok=True)
                self.devices[path] = Device(d)
            return self.devices[path]

    def device_present(self, path: str, instance_id: str) -> bool:
        """The device node shows up on an instance once the volume is attached there."""
        return self.attached(self.volume_of(path), instance_id)


@dataclass
class LocalVolumeRunner:
    """The node agent's CommandRunner on one host: volume commands act on the machine's records;
    everything else (the dumper) really runs."""

    machine: Machine
    host: Host
    real: SubprocessRunner = field(default_factory=SubprocessRunner)

    def run(self, argv: Sequence[str]) -> CommandResult:
        a = list(argv)
        m, h = self.machine, self.host
        if a[0] in ("blkid", "mkfs.xfs", "mount"):
            dev = m.device(a[-2] if a[0] == "mount" else a[-1])
        with m.lock:
            if a[0] == "blkid":
                fs = dev.fstype
                return CommandResult(tuple(a), 0 if fs else 2, f"{fs}\n" if fs else "")
            if a[0] == "mkfs.xfs":
                dev.fstype = "xfs"
                return CommandResult(tuple(a), 0)
            if a[0] == "findmnt":
                mp = a[a.index("--mountpoint") + 1]
                found = h.mounts.get(mp)
                out = f"{found[0]} xfs {found[1]}\n" if found else ""
                return CommandResult(tuple(a), 0 if found else 1, out)
            if a[0] == "mount":
                opts = a[a.index("-o") + 1]
                mp = a[-1]
                dev.mounts.append(opts)
                if "rw" in opts.split(","):
                    dev.writers.add(h.instance_id)
                h.mounts[mp] = (a[-2], opts)
                return CommandResult(tuple(a), 0)
            if a[0] == "umount":
                if h.mounts.pop(a[-1], None) is None:
                    return CommandResult(tuple(a), UMOUNT_NOT_MOUNTED, "", f"umount: {a[-1]}: not mounted.")
                return CommandResult(tuple(a), 0)
            if a[0] in ("fsfreeze", "blockdev"):
                return CommandResult(tuple(a), 0)
            if a[0] == "mkdir":
                Path(a[-1]).mkdir(parents=True, exist_ok=True)
                return CommandResult(tuple(a), 0)
        return self.real.run(a)

    def stream(self, argv: Sequence[str], on_line: Callable[[str], None]) -> CommandResult:
        return self.real.stream(argv, on_line)
