"""Populators in another region than the controller's: the S3 transport's cross-region warm.

The bucket stays in the source region (the controller's); the populators are launched, commanded and
terminated in `s3.destination_region` through that region's EC2 and SSM endpoints. `RegionClients`
is what one region's factory call gives (Deps.regions, one client pair per region, made on first use);
`RoutedAgents` is the AgentRunner the steps use once the plan names the populators: a command to a
populator goes to the destination region's SSM, and its id is recorded as `<region>/<command id>`
(SSM command ids are per region), so every later lookup or cancel reaches the region that has it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cachewarm_controller.agents import AgentRunner, Invocation


@dataclass(frozen=True)
class RegionClients:
    """One region's EC2 client and SSM runner."""

    ec2: Any
    agents: AgentRunner


RegionFactory = Callable[[str], RegionClients]
_SEP = "/"


@dataclass(frozen=True)
class RoutedAgents:
    """Commands to `remote_ids` (the populators) through `remote` (their region's SSM), all others
    through `home`. A command goes to one region: a batch mixing both is a bug, refused."""

    home: AgentRunner
    remote: AgentRunner
    region: str
    remote_ids: frozenset[str]

    def _is_remote(self, instance_ids: Sequence[str]) -> bool:
        remote = {i in self.remote_ids for i in instance_ids}
        if len(remote) > 1:
            raise ValueError(
                f"one SSM command cannot reach instances of two regions ({self.region} and the "
                f"controller's): {', '.join(instance_ids[:5])}"
            )
        return remote == {True}

    def _route(self, command_id: str) -> tuple[AgentRunner, str]:
        head, sep, rest = command_id.partition(_SEP)
        if sep and head == self.region:
            return self.remote, rest
        return self.home, command_id

    def send(
        self, document: str, instance_ids: Sequence[str], parameters: Mapping[str, str], comment: str
    ) -> str:
        if self._is_remote(instance_ids):
            return f"{self.region}{_SEP}{self.remote.send(document, instance_ids, parameters, comment)}"
        return self.home.send(document, instance_ids, parameters, comment)

    def find_sent(self, document: str, instance_id: str, since_ms: int, comment: str) -> str | None:
        if self._is_remote([instance_id]):
            found = self.remote.find_sent(document, instance_id, since_ms, comment)
            return None if found is None else f"{self.region}{_SEP}{found}"
        return self.home.find_sent(document, instance_id, since_ms, comment)

    def command_states(self, command_ids: Sequence[str]) -> dict[str, str]:
        by_runner: dict[int, tuple[AgentRunner, dict[str, str]]] = {}
        for cid in command_ids:
            runner, raw = self._route(cid)
            by_runner.setdefault(id(runner), (runner, {}))[1][raw] = cid
        out: dict[str, str] = {}
        for runner, names in by_runner.values():
            for raw, state in runner.command_states(list(names)).items():
                out[names.get(raw, raw)] = state
        return out

    def invocations(self, command_id: str) -> dict[str, Invocation]:
        runner, raw = self._route(command_id)
        return runner.invocations(raw)

    def cancel(self, command_ids: Sequence[str]) -> None:
        for cid in command_ids:
            runner, raw = self._route(cid)
            runner.cancel([raw])

    def online(self, instance_ids: Sequence[str]) -> set[str]:
        remote = [i for i in instance_ids if i in self.remote_ids]
        home = [i for i in instance_ids if i not in self.remote_ids]
        return (self.home.online(home) if home else set()) | (self.remote.online(remote) if remote else set())
