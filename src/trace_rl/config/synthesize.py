"""`SynthesizeConfig`: the `synthesize` section of a trace-rl config (stage 2 of TRACE)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from trace_rl.config.base import Section


class AcceptanceConfig(Section):
    """Calibration acceptance; defaults are the released TRACE code's (`pipeline/calibrate_environment.py`),
    docs/method-notes.md §2. The paper's own targets (mean 0.3-0.6, std > 0.2, > 60% varied groups) are stricter."""

    reward_range: tuple[float, float] = Field((0.2, 0.6), description="Mean shaped reward must lie in it.")
    success_range: tuple[float, float] = Field((0.2, 0.6), description="Binary success rate must lie in it.")
    min_std: float = Field(0.05, description="Population std of the shaped reward, at least.")
    min_informative: float = Field(0.5, description="Share of groups whose rewards are not all equal, at least.")
    max_constant: float = Field(0.5, description="Share of all-constant groups, at most.")
    max_all_success: float | None = Field(0.2, description="Share of all-success groups, at most (None: unchecked).")
    max_all_zero: float | None = Field(0.2, description="Share of all-zero-reward groups, at most (None: unchecked).")


class SandboxConfig(Section):
    """Limits for author-written generator code (one child process per run of the generator)."""

    cpu_s: int = Field(20, ge=1, description="RLIMIT_CPU seconds.")
    wall_s: float = Field(60.0, gt=0, description="Wall-clock limit; the process group is killed after it.")
    memory_mb: int = Field(1536, ge=256, description="RLIMIT_AS (address space), MiB.")
    file_mb: int = Field(16, ge=1, description="RLIMIT_FSIZE: largest file the child may write, MiB.")
    disk_mb: int = Field(64, ge=1, description="Size of the child's only writable directory (a tmpfs), MiB.")
    bwrap: str | None = Field(None, description="bubblewrap binary; None: $TRACE_RL_BWRAP, else `bwrap` on PATH.")


class SynthesizeConfig(Section):
    """Stage 2: one capability-targeted environment per selected capability, calibrated before training."""

    generator: Literal["target", "llm", "auto"] = Field(
        "auto",
        description="target: seeded variants of the target's own train tasks (no LLM); llm: an author model writes "
        "a sandboxed generator; auto: target where it covers the evidence, else llm when an author is configured.",
    )
    library_tasks: Literal["decisions", "variants"] = Field(
        "decisions",
        description="Library target, generator target: decisions: evidence tasks opened at the decision point the "
        "capability decides, scored on that move (Definition 2); variants: whole re-seeded tasks of the evidence "
        "families (closer to GRPO on the target).",
    )
    author: str | None = Field("author", description="Model name (in `models`) of the author LLM; None: no LLM.")
    author_attempts: int = Field(3, ge=1, description="Author rewrites after failed validation, per attempt.")
    author_max_tokens: int = Field(4096, ge=256)
    author_temperature: float = 0.7
    policy: str = Field("policy", description="Model name of the base policy rolled out for calibration.")
    calibrate: bool = Field(True, description="Roll out the base policy and apply the acceptance thresholds.")
    groups: int = Field(16, ge=1, description="G: seeds per calibration (TRACE code: 100).")
    samples: int = Field(8, ge=1, description="K: rollouts per seed (TRACE code: 16).")
    temperature: float = Field(0.7, description="Calibration sampling temperature (TRACE code: 0.7).")
    max_tokens: int | None = Field(None, description="Per-turn token cap for calibration rollouts.")
    concurrency: int = Field(8, ge=1, description="Calibration episodes in flight.")
    max_steps: int | None = Field(None, description="Episode step limit; default: the target's env.max_steps.")
    acceptance: AcceptanceConfig = Field(default_factory=AcceptanceConfig)
    max_attempts: int = Field(5, ge=1, description="Calibration attempts before `needs_attention` (TRACE code: 5).")
    stop_without_success: bool = Field(
        False,
        description="End calibration at an attempt where no sample succeeded, hinted or not: GRPO would get no "
        "positive group from such a base policy, and the moves have nothing to move toward (ours; off: the released "
        "code's fixed number of attempts).",
    )
    initial_difficulty: int = Field(1, ge=0, le=4, description="Starting difficulty knob (0 easiest, 4 hardest).")
    validation_seeds: int = Field(16, ge=1, description="Seeds whose tasks must replay and score before calibration.")
    min_sensitivity: float = Field(
        0.9,
        ge=0.0,
        le=1.0,
        description="Share of validated tasks whose reward drops when the capability's step is "
        "removed (Definition 2: the capability must be necessary).",
    )
    leak_sample: int = Field(16, ge=1, description="Tasks per split the leak check scans (every draw is also guarded).")
    train_seeds: int = Field(256, ge=1, description="Size of the train split (seed range).")
    test_seeds: int = Field(64, ge=1, description="Size of the test split (a disjoint seed range).")
    hint_fraction: float = Field(0.25, ge=0.0, le=1.0, description="Share of each group with the hinted prompt.")
    alpha: float = Field(0.5, ge=0.0, le=1.0, description="Shaped reward: weight of the product term (App. B).")
    weights: dict[str, float] = Field(
        default_factory=lambda: {"capability": 0.4, "db": 0.3, "communicate": 0.15, "progress": 0.15},
        description="Shaped reward: weights of the additive term (capability, db, communicate, progress).",
    )
    unscored_scale: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Shaped reward multiplier for episodes cut by max steps, errors or timeout "
        "(τ²: 0; a small value keeps partial credit for small models that rarely stop on their own).",
    )
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    tau2_tries: int = Field(12, ge=1, description="Variant draws per seed before a τ² seed gives up.")

    @field_validator("weights")
    @classmethod
    def _weights(cls, value: dict[str, float]) -> dict[str, float]:
        return _check_weights(value)


COMPONENTS = ("capability", "db", "communicate", "progress")


def _check_weights(value: dict[str, float]) -> dict[str, float]:
    unknown = sorted(set(value) - set(COMPONENTS))
    if unknown:
        raise ValueError(f"unknown reward components {unknown} (known: {', '.join(COMPONENTS)})")
    if not any(w > 0 for w in value.values()):
        raise ValueError("at least one weight must be positive")
    return value


__all__ = ["AcceptanceConfig", "SandboxConfig", "SynthesizeConfig"]
