"""What a `code` generator's `generate(seed, api)` returns for one seed: the contract between an author model's
sandboxed generator and `CapabilityEnvironment.make_task` (validated before use, then turned into a τ²-shaped task).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class GeneratedAction(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class GeneratedTask(BaseModel):
    """What a `code` generator's `generate(seed, api)` returns for one seed (validated before use).

    `world` selects the target state the task starts from (library: {"world_seed": int}; τ²: {}), `data_patch` is
    deep-merged into it (added or changed records), `gold_actions` solve the task, `communicate_info` must be said
    to the user, `capability_steps` index the gold actions that exercise the capability.
    """

    model_config = ConfigDict(extra="ignore")

    request: str = Field(min_length=1, description="The user's opening message.")
    reason_for_call: str = ""
    known_info: str = ""
    unknown_info: str = ""
    facts: dict[str, str] = Field(default_factory=dict, description="What the user answers when asked (email, ...).")
    world: dict[str, Any] = Field(default_factory=dict)
    data_patch: dict[str, Any] | None = None
    gold_actions: list[GeneratedAction] = Field(min_length=1)
    communicate_info: list[str] = Field(default_factory=list)
    capability_steps: list[int] = Field(default_factory=list)
    difficulty: str | int | None = None

    @model_validator(mode="after")
    def _steps_in_range(self) -> GeneratedTask:
        bad = [i for i in self.capability_steps if not 0 <= i < len(self.gold_actions)]
        if bad:
            raise ValueError(f"capability_steps {bad} are not indices of gold_actions")
        return self


__all__ = ["GeneratedAction", "GeneratedTask"]
