"""The records of a capability environment, `envs/<capability>/`: written by synthesize, read by training, routing,
evaluation and the report.

- `spec.json` (`EnvSpec`): what is generated (the generator kind and its parameters, difficulty knobs), from which
  target domain (tools, DB and policy are the target's own, so schemas match by construction), how episodes are
  scored (the capability-exercised checks, the shaped-reward recipe of TRACE App. B, the binary success next to it),
  the hint shown to a fraction of each GRPO group, and which seeds make the train and test splits. Everything else in
  the folder (generator code, sampled tasks, validation, leak and calibration reports, status) is evidence about it.
- `status.json` (`EnvStatus`): final once written (ready | needs_attention); synthesize skips folders that have one.
- `calibration.json` (`CalibrationFile`): every calibration attempt with the base policy and its figures and checks.
- `tasks.jsonl`: the task pool of an author-written generator (one `Task` per line, keyed by its synthetic seed).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trace_rl.artifacts.layout import EnvLayout, RunLayout
from trace_rl.artifacts.store import atomic_write_json, atomic_write_text, read_model
from trace_rl.errors import UserError, first_problem
from trace_rl.types import Task

SPEC_FORMAT = "trace-rl/capability-env@1"

CheckKind = Literal[
    "verify_before_act", "exact_arguments", "grounded_arguments", "write_coverage", "communicate", "decision"
]
Component = Literal["capability", "db", "communicate", "progress"]
GeneratorKind = Literal[
    "library_variants", "library_decisions", "tau2_variants", "toolsandbox_scenarios", "target_reseed", "code"
]
RewardSource = Literal["shaped", "target"]
SuccessRule = Literal["target", "decision"]
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
        "made; communicate: share of the required values said to the user; decision: the agent's move at the task's "
        "decision point (library_decisions), 1 when it exercises the capability."
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
    source: RewardSource = Field(
        "shaped",
        description="shaped: the formula above over the gold replay (τ²-shaped targets); target: the target "
        "environment's own score (ToolSandbox similarity), success when it is 1. With `target` the fields above are "
        "unused.",
    )
    success: SuccessRule = Field(
        "target",
        description="target: τ²'s DB × COMMUNICATE == 1 on a stop-terminated episode; decision: the `decision` check "
        "is 1 (a decision task is one move: what follows it, and how the episode ends, do not count).",
    )


class HintSpec(SpecRecord):
    """Soft guidance appended to the system prompt for a fraction of each group (released TRACE code;
    docs/method-notes.md §3)."""

    text: str = Field(description="Names no tool and no argument.")
    fraction: float = Field(0.25, ge=0.0, le=1.0, description="Share of each group that gets the hinted prompt.")


class GeneratorSpec(SpecRecord):
    """What `make_task(seed)` runs."""

    kind: GeneratorKind = Field(
        description="library_variants: new seeds of the library families of the evidence tasks; library_decisions: "
        "library tasks opened at the decision point where the capability decides the outcome; tau2_variants: "
        "evidence train tasks re-targeted at other users/orders with re-derived, replay-verified gold actions; "
        "toolsandbox_scenarios: the evidence scenarios' train-split families with their augmentations (distraction "
        "tools, scrambled names and descriptions); target_reseed: an imported target's fresh seeds or rows (OpenEnv, "
        "verifiers), scored by its own reward; code: an author model's sandboxed generator (generator.py), "
        "materialised into tasks.jsonl."
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


class EnvStatus(SpecRecord):
    """`envs/<capability>/status.json`: final once written; the stage skips folders that have one."""

    status: Status
    reason: str = ""
    attempts: int = 0
    figures: dict[str, Any] = Field(default_factory=dict, description="The last calibration's figures.")
    updated_at: float = 0.0


class CalibrationAttempt(SpecRecord):
    """One calibration of the environment with the base policy (synthesize/calibrate.py `CalibrationResult`)."""

    attempt: int
    difficulty: int
    generator: str
    accepted: bool
    direction: str | None = Field(None, description="too_easy | too_hard | uninformative when not accepted.")
    figures: dict[str, Any] = Field(default_factory=dict, description="mean_reward, success_rate, group counts, ...")
    checks: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="figure -> {value, ok, range | min | max}: the acceptance checks."
    )


class CalibrationFile(SpecRecord):
    """`envs/<capability>/calibration.json`."""

    accepted: bool
    acceptance: dict[str, Any] = Field(default_factory=dict, description="The acceptance ranges used.")
    policy: str | None = None
    groups: int = 0
    samples: int = 0
    temperature: float | None = None
    attempts: list[CalibrationAttempt] = Field(default_factory=list)
    final: CalibrationAttempt | None = None


def read_env_spec(env: EnvLayout) -> EnvSpec:
    """`spec.json` of a capability environment; UserError when the folder has none or it is malformed."""
    if not env.spec.exists():
        raise UserError(f"{env.folder} is not a capability environment (no {env.spec.name})")
    return read_model(env.spec, EnvSpec, "capability environment spec")


def write_env_spec(env: EnvLayout, spec: EnvSpec) -> None:
    atomic_write_json(env.spec, spec)


def read_env_status(env: EnvLayout) -> EnvStatus | None:
    """`status.json`, or None while the environment is unfinished."""
    return read_model(env.status, EnvStatus, "environment status") if env.status.exists() else None


def write_env_status(env: EnvLayout, status: EnvStatus) -> None:
    atomic_write_json(env.status, status)


def env_states(run: RunLayout) -> list[tuple[EnvLayout, str | None]]:
    """Every capability environment folder of the run with its status (None: unfinished), in name order."""
    out = []
    for env in run.envs():
        status = read_env_status(env)
        out.append((env, status.status if status is not None else None))
    return out


def read_task_pool(env: EnvLayout) -> list[Task]:
    """`tasks.jsonl`: the tasks an author-written generator produced at synthesis time (empty when there is none)."""
    if not env.tasks.exists():
        return []
    tasks = []
    for number, line in enumerate(env.tasks.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            tasks.append(Task.model_validate_json(line))
        except ValidationError as exc:
            raise UserError(f"{env.tasks}, line {number}: not a task ({first_problem(exc)})") from None
    return tasks


def write_task_pool(env: EnvLayout, tasks: list[Task]) -> None:
    lines = [t.model_dump_json() for t in tasks]
    atomic_write_text(env.tasks, "\n".join(lines) + ("\n" if lines else ""))


def read_calibration(env: EnvLayout) -> CalibrationFile | None:
    """`calibration.json`, or None when synthesize has not written one."""
    return read_model(env.calibration, CalibrationFile, "calibration file") if env.calibration.exists() else None


def write_calibration(env: EnvLayout, calibration: CalibrationFile) -> None:
    atomic_write_json(env.calibration, calibration)


__all__ = [
    "SPEC_FORMAT",
    "CalibrationAttempt",
    "CalibrationFile",
    "CheckSpec",
    "EnvSpec",
    "EnvStatus",
    "GeneratorSpec",
    "HintSpec",
    "RewardSpec",
    "SplitSpec",
    "env_states",
    "read_calibration",
    "read_env_spec",
    "read_env_status",
    "read_task_pool",
    "write_calibration",
    "write_env_spec",
    "write_env_status",
    "write_task_pool",
]
