"""The real ASL executed by moto's Step Functions interpreter, Lambda tasks in-process."""

from __future__ import annotations

from typing import Any


def test_success_path(world: Any) -> None:
    ex = world.run(world.make_input())
    assert ex.status == "SUCCEEDED", ex.desc
    print(ex.entered())
