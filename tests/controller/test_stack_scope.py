"""Issue 26, Medium 3: what the controller creates carries this stack's own tag (its IAM conditions
name it, so two stacks in one account cannot touch each other's), and populators launch only from
this stack's template."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from cachewarm.contract.tags import STACK
from cachewarm_controller.errors import InvalidInputError
from cachewarm_controller.steps.planning import validate

from tests.controller.steps_support import finish, through_agents


def test_volumes_and_populators_carry_the_stack_tag(world: Any) -> None:
    w = through_agents(world)
    inv = world.inventory()
    assert inv.volumes and inv.instances
    for resource in [*inv.volumes, *inv.instances]:
        assert {"Key": STACK, "Value": "cachewarm-test"} in resource["Tags"]
    finish(world, w)


def test_an_input_naming_another_launch_template_is_refused(world: Any) -> None:
    before = world.deps.settings
    world.deps.settings = dataclasses.replace(before, launch_template_id=world.template_id)
    try:
        validate(world.make_input(), world.deps)
        for populator in (
            {"launch_template_id": "lt-0123456789abcdef0"},
            {"launch_template_name": "anything"},
        ):
            with pytest.raises(InvalidInputError, match="not this stack's populator template"):
                validate(world.make_input(populator=populator), world.deps)
    finally:
        world.deps.settings = before  # the world is shared by the module's tests


def test_an_input_naming_another_volume_key_is_refused(world: Any) -> None:
    ours = "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-3333-4444-555555555555"
    before = world.deps.settings
    world.deps.settings = dataclasses.replace(before, kms_key_id=ours)
    try:
        validate(world.make_input(volume={"kms_key_id": ours}), world.deps)
        validate(world.make_input(), world.deps)
        with pytest.raises(InvalidInputError, match="not this stack's key"):
            validate(world.make_input(volume={"kms_key_id": "alias/someone-elses"}), world.deps)
    finally:
        world.deps.settings = before
