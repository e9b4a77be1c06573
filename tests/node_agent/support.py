"""Stand-ins shared by the node agent's tests: a scripted command runner, a fake clock, volumes on
a temporary directory, and where a test's status objects live."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cachewarm.contract.status import StatusLocation
from cachewarm.node_agent.runner import CommandResult
from cachewarm.node_agent.volume import Volume

BUCKET = "cachewarm-status-test"


@dataclass
class FakeRunner:
    """Answers commands from a script: `answers[argv[0]]` is a result or a list consumed in order.
    It remembers what it mounted: `findmnt` on such a mount point answers with it."""

    answers: dict[str, Any] = field(default_factory=dict)
    calls: list[list[str]] = field(default_factory=list)
    stream_lines: list[str] = field(default_factory=list)
    stream_effect: Callable[[], int] = lambda: 0
    mounted: dict[str, str] = field(default_factory=dict)  # mount point -> "device xfs options"

    def run(self, argv: Sequence[str]) -> CommandResult:
        self.calls.append(list(argv))
        a = list(argv)
        if a[0] == "findmnt" and a[-1] in self.mounted:
            return CommandResult(tuple(a), 0, self.mounted[a[-1]] + "\n")
        ans = self.answers.get(a[0], (0, ""))
        if isinstance(ans, list):
            ans = ans.pop(0) if len(ans) > 1 else ans[0]
        rc, out = ans
        if rc == 0 and a[0] == "mount":
            self.mounted[a[-1]] = f"{a[-2]} xfs {a[a.index('-o') + 1]}"
        if rc == 0 and a[0] == "umount":
            self.mounted.pop(a[-1], None)
        return CommandResult(tuple(a), rc, out, "boom" if rc else "")

    def stream(self, argv: Sequence[str], on_line: Callable[[str], None]) -> CommandResult:
        self.calls.append(list(argv))
        for line in self.stream_lines:
            on_line(line)
        rc = self.stream_effect()
        return CommandResult(tuple(argv), rc, "", "dumper: SERVER_ERROR out of memory" if rc else "")

    def commands(self) -> list[str]:
        return [c[0] for c in self.calls]


@dataclass
class FakeClock:
    t: float = 0.0
    sleeps: int = 0

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.sleeps += 1
        self.t += s


def volume(tmp_path: Path, runner: FakeRunner, clock: FakeClock | None = None) -> Volume:
    device = tmp_path / "dev-nvme1n1"
    device.write_bytes(b"")
    clock = clock or FakeClock()
    return Volume(str(device), tmp_path / "mnt", runner, sleep=clock.sleep, clock=clock.now, poll_s=5)


NOT_MOUNTED = (1, "")
BLANK = (2, "")  # blkid -p: no signature
XFS = (0, "xfs\n")
MOUNTED_RW = (0, "/dev/nvme1n1 xfs rw,noatime\n")


def where(role: str = "dump", node: str = "i-0123456789abcdef0") -> StatusLocation:
    writer = f"arn:aws:ec2:us-east-1:123456789012:instance/{node}"
    return StatusLocation(BUCKET, "warms", "warm-1", role, node, writer)  # type: ignore[arg-type]


def read_status(s3: Any, loc: StatusLocation) -> dict[str, Any]:
    return json.loads(s3.get_object(Bucket=BUCKET, Key=loc.key)["Body"].read())
