"""RoutedAgents (cachewarm_controller.regions): a cross-region warm's commands go to the region of
the instances they name, and a command id recorded as `<region>/<id>` is looked up and cancelled
there — never in the controller's region, whose SSM has no such id."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest
from cachewarm_controller.agents import Invocation
from cachewarm_controller.regions import RoutedAgents


@dataclass
class Runner:
    name: str
    log: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)

    def send(
        self, document: str, instance_ids: Sequence[str], parameters: Mapping[str, str], comment: str
    ) -> str:
        self.log.append(("send", self.name, tuple(instance_ids)))
        return f"cmd-{self.name}-{len(self.log)}"

    def find_sent(self, document: str, instance_id: str, since_ms: int, comment: str) -> str | None:
        return f"found-{self.name}"

    def command_states(self, command_ids: Sequence[str]) -> dict[str, str]:
        self.log.append(("states", self.name, tuple(command_ids)))
        return {c: f"Success@{self.name}" for c in command_ids}

    def invocations(self, command_id: str) -> dict[str, Invocation]:
        return {"i": Invocation("i", f"Success@{self.name}")}

    def cancel(self, command_ids: Sequence[str]) -> None:
        self.log.append(("cancel", self.name, tuple(command_ids)))

    def online(self, instance_ids: Sequence[str]) -> set[str]:
        return set(instance_ids)


def routed() -> tuple[RoutedAgents, Runner, Runner]:
    home, far = Runner("home"), Runner("far")
    return RoutedAgents(home, far, "us-west-2", frozenset({"i-far1", "i-far2"})), home, far


def test_sends_go_to_the_instances_region_and_far_ids_carry_it() -> None:
    agents, home, far = routed()
    assert agents.send("doc", ["i-src"], {}, "c") == "cmd-home-1"
    assert home.log == [("send", "home", ("i-src",))]
    assert agents.send("doc", ["i-far1", "i-far2"], {}, "c") == "us-west-2/cmd-far-1"
    assert agents.find_sent("doc", "i-far1", 0, "c") == "us-west-2/found-far"
    assert agents.find_sent("doc", "i-src", 0, "c") == "found-home"
    with pytest.raises(ValueError, match="two regions"):
        agents.send("doc", ["i-src", "i-far1"], {}, "c")
    assert far.log == [("send", "far", ("i-far1", "i-far2"))]


def test_lookups_and_cancels_follow_the_recorded_region() -> None:
    agents, home, far = routed()
    states = agents.command_states(["cmd-a", "us-west-2/cmd-b"])
    assert states == {"cmd-a": "Success@home", "us-west-2/cmd-b": "Success@far"}
    assert ("states", "far", ("cmd-b",)) in far.log and ("states", "home", ("cmd-a",)) in home.log
    assert agents.invocations("us-west-2/cmd-b")["i"].status == "Success@far"
    agents.cancel(["us-west-2/cmd-b", "cmd-a"])
    assert ("cancel", "far", ("cmd-b",)) in far.log and ("cancel", "home", ("cmd-a",)) in home.log
    assert agents.online(["i-src", "i-far2"]) == {"i-src", "i-far2"}


def test_the_destination_regions_settings_are_read_from_the_stacks_json() -> None:
    """DESTINATION_REGION_SETTINGS (the stack writes it from each region's stack): the fixed VPC,
    template, log group and document names per region; a region without settings, or JSON of
    another shape, stops the Lambda before any step runs."""
    import json

    from cachewarm_controller.handlers import remote_regions
    from cachewarm_controller.steps.common import Documents

    home = Documents("d", "p", "v", "i", "u", "s")
    raw = json.dumps(
        {
            "us-west-2": {
                "vpc_id": "vpc-0123456789abcdef0",
                "launch_template_id": "lt-0123456789abcdef0",
                "agent_log_group": "far-logs",
                "documents": {"populate-agent": "far-p", "memcached-stats": "far-s", "other": "x"},
            }
        }
    )
    [(region, far)] = remote_regions(raw, ("us-west-2",), home).items()
    assert region == "us-west-2"
    assert (far.vpc_id, far.launch_template_id, far.agent_log_group) == (
        "vpc-0123456789abcdef0",
        "lt-0123456789abcdef0",
        "far-logs",
    )
    assert far.documents == {"p": "far-p", "s": "far-s"}
    with pytest.raises(RuntimeError, match="lacks eu-west-1"):
        remote_regions(raw, ("us-west-2", "eu-west-1"), home)
    with pytest.raises(RuntimeError, match="not the stack's JSON"):
        remote_regions(json.dumps({"us-west-2": {"vpc_id": "v"}}), ("us-west-2",), home)
    assert remote_regions(None, (), home) == {}
