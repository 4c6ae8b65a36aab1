"""The declarative description of a capability environment: `envs/<capability>/spec.json`.

A spec says what is generated (the generator kind and its parameters, difficulty knobs), from which target domain
(tools, DB and policy are the target's own, so schemas match by construction), how episodes are scored (the
capability-exercised checks, the shaped-reward recipe of TRACE App. B, the binary success next to it), the hint shown
to a fraction of each GRPO group, and which seeds make the train and test splits. Everything else in the folder
(generator code, sampled tasks, validation, leak and calibration reports, status) is evidence about the spec.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trace_rl.artifacts.store import atomic_write_json, read_json

SPEC_FORMAT = "trace-rl/capability-env@1"
SPEC_FILE = "spec.json"
STATUS_FILE = "status.json"
TASKS_FILE = "tasks.jsonl"
GENERATOR_FILE = "generator.py"

CheckKind = Literal["verify_before_act", "exact_arguments", "grounded_arguments", "write_coverage", "communicate"]
Component = Literal["capability", "db", "communicate", "progress"]
GeneratorKind = Literal["library_variants", "tau2_variants", "code"]
Status = Literal["ready", "needs_attention"]


class SpecRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CheckSpec(SpecRecord):
    """One capability-exercised check ν_c(x, τ) ∈ [0, 1] (graded, so GRPO groups vary)."""

    kind: CheckKind = Field(
        description="verify_before_act: the gold reads happen before the first write (or at all, when nothing is "
        "written); exact_arguments: the gold writes (or, with no write, the gold reads) are called with the gold "
        "arguments, partial credit per argument; grounded_arguments: id-like argument values were seen earlier in "
        "the conversation (tool results, user messages), not invented; write_coverage: share of the gold writes "
        "made; communicate: share of the required values said to the user."
    )
    weight: float = Field(1.0, ge=0.0)


class RewardSpec(SpecRecord):
    """Shaped reward (TRACE App. B): `alpha * prod(product) + (1 - alpha) * sum_i w_i c_i / sum_i w_i`.

    Components: `capability` = weighted mean of the checks; `db` = final DB equals the gold replay's (0/1);
    `communicate` = share of the required values said; `progress` = share of the gold actions matched (τ² ACTION,
    graded). The binary success next to it is τ²'s: DB × COMMUNICATE == 1 on a stop-terminated episode.
    """

    alpha: float = Field(0.5, ge=0.0, le=1.0, description="Weight of the product term.")
    product: list[Component] = Field(default_factory=lambda: ["capability", "db", "communicate"])
    weights: dict[Component, float] = Field(
        default_factory=lambda: {"capability": 0.4, "db": 0.3, "communicate": 0.15, "progress": 0.15}
    )
    checks: list[CheckSpec] = Field(default_factory=list)
    unscored_scale: float = Field(
        0.0, ge=0.0, le=1.0, description="Multiplier when the episode ended by max steps, errors or timeout (τ²: 0)."
    )


class HintSpec(SpecRecord):
    """Soft guidance appended to the system prompt for a fraction of each group (released TRACE code, §4.5)."""

    text: str = Field(description="Names no tool and no argument.")
    fraction: float = Field(0.25, ge=0.0, le=1.0, description="Share of each group that gets the hinted prompt.")


class GeneratorSpec(SpecRecord):
    """What `make_task(seed)` runs."""

    kind: GeneratorKind = Field(
        description="library_variants: new seeds of the library families of the evidence tasks; tau2_variants: "
        "evidence train tasks re-targeted at other users/orders with re-derived, replay-verified gold actions; "
        "code: an author model's sandboxed generator (generator.py), materialised into tasks.jsonl."
    )
    params: dict[str, Any] = Field(default_factory=dict, description="Kind-specific parameters (see generators).")
    difficulty: int = Field(1, ge=0, le=4, description="Difficulty knob, moved by calibration (0 easiest).")
    seed_base: int = Field(0, description="Generator seed of task seed 0; chosen disjoint from the target's splits.")


class SplitSpec(SpecRecord):
    """Train and test are disjoint seed ranges."""

    train: tuple[int, int] = Field((0, 256), description="[first seed, count).")
    test: tuple[int, int] = Field((100_000, 64), description="[first seed, count).")

    @model_validator(mode="after")
    def _disjoint(self) -> SplitSpec:
        (a, n), (b, m) = self.train, self.test
        if a < b + m and b < a + n:
            raise ValueError("train and test seed ranges overlap")
        return self

    def seeds(self, split: str) -> range:
        if split not in ("train", "test"):
            raise ValueError(f"unknown split '{split}' (train, test)")
        start, count = getattr(self, split)
        return range(start, start + count)


class EnvSpec(SpecRecord):
    """`envs/<capability>/spec.json`."""

    format: Literal["trace-rl/capability-env@1"] = SPEC_FORMAT
    name: str = Field(description="The capability's name (the folder name).")
    definition: str = Field(description="The capability's definition, as diagnosed.")
    target: dict[str, Any] = Field(description="The target EnvConfig (name, task_set, options, ...).")
    tools: list[str] = Field(description="The target tools the agent sees (schemas are the target's own).")
    generator: GeneratorSpec
    reward: RewardSpec
    hint: HintSpec
    splits: SplitSpec = Field(default_factory=SplitSpec)
    intro: str = Field(description="The capability environment's own instructions, placed before the target policy.")
    evidence: dict[str, Any] = Field(
        default_factory=dict, description="Train-split task and trajectory ids the environment was derived from."
    )
    provenance: dict[str, Any] = Field(default_factory=dict, description="Generator, author model, attempt, time.")

    def save(self, folder: Path) -> None:
        atomic_write_json(Path(folder) / SPEC_FILE, self)

    @classmethod
    def load(cls, folder: Path) -> EnvSpec:
        return cls.model_validate(read_json(Path(folder) / SPEC_FILE))


class EnvStatus(SpecRecord):
    """`envs/<capability>/status.json`: final once written; the stage skips folders that have one."""

    status: Status
    reason: str = ""
    attempts: int = 0
    figures: dict[str, Any] = Field(default_factory=dict, description="The last calibration's figures.")
    updated_at: float = 0.0

    def save(self, folder: Path) -> None:
        atomic_write_json(Path(folder) / STATUS_FILE, self)

    @classmethod
    def load(cls, folder: Path) -> EnvStatus | None:
        path = Path(folder) / STATUS_FILE
        return cls.model_validate(read_json(path)) if path.exists() else None


class GeneratedAction(SpecRecord):
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


__all__ = [
    "GENERATOR_FILE",
    "SPEC_FILE",
    "SPEC_FORMAT",
    "STATUS_FILE",
    "TASKS_FILE",
    "CheckSpec",
    "EnvSpec",
    "EnvStatus",
    "GeneratedAction",
    "GeneratedTask",
    "GeneratorSpec",
    "HintSpec",
    "RewardSpec",
    "SplitSpec",
]
