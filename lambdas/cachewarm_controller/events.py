"""What each handler receives, as Powertools Parser models (`parse_event`): the ASL's Parameters for
ValidateInput, the execution's state for every later Task, and for the teardown machine either that
state or the EventBridge status-change event of a stopped warm. The ASL payloads are unchanged; these
models only say what the handlers read from them (other keys, e.g. `claim`, `plan`, `error`, pass by).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, TypeVar

from aws_lambda_powertools.utilities.parser import parse
from cachewarm.contract import inputs
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from cachewarm_controller.errors import InvalidInputError
from cachewarm_controller.model import WarmId, WarmInput, describe_errors
from cachewarm_controller.steps.common import Warm

# $$.Execution.Id: arn:<partition>:states:<region>:<account>:execution:<machine>:<name>
ExecutionArn = Annotated[str, Field(pattern=r"^arn:[a-z-]+:states:[a-z0-9-]*:[0-9]*:execution:[^\s;]+$")]

E = TypeVar("E", bound=BaseModel)


def parse_event(event: object, model: type[E]) -> E:
    """`event` as `model` (Powertools' parser); a mismatch is an InvalidInputError naming each field
    (the ASL's error name for input it should not retry)."""
    try:
        return parse(event=event, model=model)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise InvalidInputError(f"invalid {model.__name__}: {describe_errors(exc)}") from None


def _warm_id_of(raw: object) -> str | None:
    value = raw.get("warm_id") if isinstance(raw, dict) else None
    return value if isinstance(value, str) and inputs.matches(inputs.WARM_ID, value) else None


class _Event(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class ValidateInputEvent(_Event):
    """ValidateInput's Parameters: `{"input": $, "execution_arn": $$.Execution.Id}`. The input stays as
    given: the step validates it (naming every bad field) and may derive the warm id (ASG launches)."""

    input: Any = None
    execution_arn: ExecutionArn

    @property
    def warm_id(self) -> str | None:
        return _warm_id_of(self.input)


class LoopPass(_Event):
    """The previous pass of a looping step (its own last output, under its ResultPath)."""

    passes: int = Field(default=0, ge=0)
    waits: int = Field(default=0, ge=0)
    poll: int = Field(default=0, ge=0)  # CheckProgress's poll counter

    def counters(self) -> dict[str, int]:
        return {"passes": self.passes, "waits": self.waits}


class StepEvent(_Event):
    """The state every Task after ValidateInput gets: ValidateInput's output (`warm_id`,
    `execution_arn`, the validated `input`) plus each step's last output under its ResultPath."""

    warm_id: WarmId
    execution_arn: ExecutionArn
    input: WarmInput
    survey: LoopPass | None = None
    volumes: LoopPass | None = None
    populators: LoopPass | None = None
    attach: LoopPass | None = None
    transport: LoopPass | None = None
    install: LoopPass | None = None
    agents: LoopPass | None = None
    progress: LoopPass | None = None
    verify: LoopPass | None = None

    @model_validator(mode="after")
    def _one_warm_id(self) -> StepEvent:
        if self.warm_id != self.input.warm_id:
            raise ValueError(f"warm_id {self.warm_id!r} is not the input's ({self.input.warm_id!r})")
        return self

    @property
    def warm(self) -> Warm:
        return Warm(self.input, self.execution_arn)

    def loop(self, key: str) -> dict[str, int]:
        """The counters of loop `key`'s previous pass (none on the first)."""
        last = getattr(self, key)
        return last.counters() if isinstance(last, LoopPass) else {}


class StatusChangeDetail(_Event):
    """`detail` of EventBridge's "Step Functions Execution Status Change" (the fields teardown reads)."""

    executionArn: str | None = None
    status: str | None = None
    input: str | None = None  # the execution's input, as JSON text


class TeardownEvent(_Event):
    """Teardown's input: the warm machine's state (`execution_arn`, `input`: its own execution), or
    the teardown machine's Parameters — its state under `event` (the StoppedWarmRule's whole event:
    `detail.executionArn`) and the warm machine it serves, `warm_state_machine_arn`, which its
    definition sets (no input reaches it). `teardown` is the previous pass's output."""

    execution_arn: str | None = None
    input: Any = None
    detail: StatusChangeDetail | None = None
    teardown: dict[str, Any] | None = None
    event: dict[str, Any] | None = None
    warm_state_machine_arn: str | None = None

    @property
    def target_arn(self) -> str | None:
        return self.detail.executionArn if self.detail is not None else self.execution_arn

    @property
    def execution_input(self) -> dict[str, Any]:
        if self.detail is not None:
            try:
                body = json.loads(self.detail.input or "{}")
            except ValueError:
                body = {}
        else:
            body = self.input
        return body if isinstance(body, dict) else {}

    @property
    def warm_id(self) -> str | None:
        return _warm_id_of(self.execution_input)
