"""`EvaluateConfig`: the `evaluate` section of a trace-rl config (stage 5 of TRACE), overridable by flags.

Defaults follow TRACE where it says something (§4.1: same user simulator and decoding for every arm; §4.2: every
training baseline gets the summed budget of the capability adapters, GEPA the same rollout budget) and the fixes of
docs/method-notes.md §6.2 where it does not (k ≥ 3 trials with recorded seeds, pass^k with bootstrap intervals over
tasks, paired differences to the base on the same tasks and seeds). Our documented defaults for what the paper leaves
open (docs/method-notes.md §5): one rollout = one episode; the GEPA reflection LM is the base model itself (the paper's
base model played every role) unless a `reflection_model` is named; GRPO on target trains on the target's *train*
split.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from trace_rl.config.base import MAX_TRIALS, Section

ARMS = ("base", "trace", "trace_guarded", "grpo_target", "gepa", "single_best", "multi_capability")
DEFAULT_ARMS = tuple(a for a in ARMS if a != "trace_guarded")  # the paper's six; the guarded TRACE is ours, opt-in


class GepaConfig(Section):
    """The GEPA baseline: reflective optimisation of the capability descriptions appended to the system prompt."""

    reflection_model: str | None = Field(
        None, description="Model name (in `models`) or spec of the reflection LM; None: the policy's base model."
    )
    budget: int | None = Field(
        None, ge=1, description="max_metric_calls in rollouts (one metric call = one episode); None: the TRACE total."
    )
    train_tasks: int | None = Field(
        32, ge=1, description="Target train-split tasks GEPA reflects on (None: all but the validation tasks)."
    )
    val_tasks: int = Field(8, ge=1, description="Target train-split tasks GEPA scores candidates on (disjoint).")
    minibatch_size: int = Field(3, ge=1, description="reflection_minibatch_size (GEPA default 3).")
    candidate_selection: Literal["pareto", "current_best", "epsilon_greedy"] = Field("pareto")
    score: Literal["success", "reward"] = Field(
        "success",
        description="Per-episode score GEPA maximises: the success label (pass rate, as the paper) or reward.",
    )
    reflection_max_tokens: int = Field(1024, ge=16, description="Tokens per reflection-LM answer.")
    reflection_temperature: float = Field(0.7, ge=0.0)
    seed: int = Field(0, description="GEPA's RNG seed.")
    episode_seed: int = Field(
        17, description="Every GEPA episode of a task uses one seed, so candidates are compared on the same episode."
    )


class SingleBestConfig(Section):
    """Which one adapter the 'single best adapter' arm uses, chosen without looking at the test split."""

    select: Literal["train", "train_eval", "test"] = Field(
        "train",
        description="train: the best pass rate on target train-split tasks (costs rollouts, recorded); train_eval: "
        "the best held-out gain recorded by the train stage (free, measured on its own environment); test: the best "
        "on the test split itself (an oracle, leaks; reported as such).",
    )
    tasks: int = Field(10, ge=1, description="Target train tasks per adapter for select=train.")
    trials: int = Field(1, ge=1, description="Trials per task for select=train.")


class GuardConfig(Section):
    """The `trace_guarded` arm's held-in regression guard (ours, not in TRACE): the routed agent and the base model
    play the target's train tasks; an adapter is kept only where it does not do worse than base on the train tasks
    the router sends to it (evaluate/arms/trace_guarded.py)."""

    tasks: int | None = Field(None, ge=1, description="Target train tasks played (the first N; None: all).")
    trials: int = Field(3, ge=1, le=MAX_TRIALS, description="Trials per train task (the same trial seeds for both).")
    score: Literal["success", "reward"] = Field("success", description="What the paired difference is taken of.")
    min_delta: float = Field(
        0.0,
        description="Keep an adapter whose paired difference to base (adapter − base, on the train tasks routed to "
        "it; success rate or mean reward) is at least this.",
    )
    keep_unrouted: bool = Field(
        True, description="Keep an adapter the router sent no train task to (there is no evidence against it)."
    )


class CurveConfig(Section):
    """Score-vs-rollout-budget points for TRACE, GRPO on target and GEPA (the paper's Fig. 4)."""

    enabled: bool = Field(True, description="Evaluate intermediate points (each costs a test-split evaluation).")
    fractions: list[float] = Field(
        default_factory=lambda: [0.25, 0.5, 0.75],
        description="Budget fractions for GRPO checkpoints and GEPA candidates (1.0 is the arm itself). TRACE's "
        "points are its capability prefixes (1, 2, … adapters), as in the paper, and, at each fraction where every "
        "capability adapter kept a Trainer checkpoint at that fraction of its steps, the router over those "
        "checkpoints.",
    )
    trials: int = Field(1, ge=1, description="Trials per task at a curve point (pass^1 is plotted).")

    @field_validator("fractions")
    @classmethod
    def _fractions(cls, value: list[float]) -> list[float]:
        if any(not 0.0 < f < 1.0 for f in value):
            raise ValueError("curve fractions must lie strictly between 0 and 1")
        return sorted(set(value))


class EvaluateConfig(Section):
    """Stage 5: the routed agent against the base and the paper's baselines on held-out tasks."""

    arms: list[str] = Field(
        default_factory=lambda: list(DEFAULT_ARMS),
        description=f"Arms to run: {', '.join(ARMS)} (default: all but trace_guarded).",
    )
    split: str = Field("test", description="Target split evaluated (held out from every earlier stage).")
    out: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="Evaluate into `evaluate@<out>/` instead of `evaluate/`: another split or test range of the same "
        "run, kept apart (baseline adapters trained by evaluate stay shared under evaluate/).",
    )
    trials: int = Field(
        3, ge=1, le=MAX_TRIALS, description="Trials per task (TRACE used 1; docs/method-notes.md §6.2)."
    )
    seed: int = Field(300, description="Base seed; trial seeds derive from it, identical for every arm (paired).")
    task_limit: int | None = Field(None, ge=1, description="Only the first N tasks of the split.")
    concurrency: int = Field(4, ge=1, description="Episodes in flight.")
    policy: str | None = Field(None, description="Base policy model name or spec; None: the run's rollout.policy.")
    user: str | None = Field(None, description="User simulator ('scripted' or a model); None: the run's rollout.user.")
    temperature: float | None = Field(None, ge=0.0, description="Policy temperature; None: the run's rollout setting.")
    max_tokens: int | None = Field(None, ge=1, description="Policy max tokens per turn; None: the run's setting.")
    budget: int | None = Field(
        None, ge=1, description="Training rollout budget to match; None: the sum over the trained capability adapters."
    )
    train_baselines: bool = Field(
        True, description="Train missing baseline adapters (GRPO on target, multi-capability) at the matched budget."
    )
    train: dict[str, Any] = Field(
        default_factory=dict, description="TrainConfig overrides for baseline training (default: the adapters' own)."
    )
    gepa: GepaConfig = Field(default_factory=GepaConfig)
    single_best: SingleBestConfig = Field(default_factory=SingleBestConfig)
    guard: GuardConfig = Field(default_factory=GuardConfig)
    curve: CurveConfig = Field(default_factory=CurveConfig)
    samples: int = Field(1000, ge=1, description="Bootstrap resamples per interval.")
    level: float = Field(0.95, gt=0.0, lt=1.0, description="Confidence level.")
    bootstrap_seed: int = Field(0, description="Bootstrap RNG seed (reports are reproducible).")

    @field_validator("arms")
    @classmethod
    def _arms(cls, value: list[str]) -> list[str]:
        unknown = [a for a in value if a not in ARMS]
        if unknown:
            raise ValueError(f"unknown arms {unknown} (known: {', '.join(ARMS)})")
        if not value:
            raise ValueError("select at least one arm")
        ordered = [a for a in ARMS if a in value]
        if "base" not in ordered:  # differences to base need it; base is cheap and always evaluated
            ordered.insert(0, "base")
        return ordered


__all__ = ["ARMS", "DEFAULT_ARMS", "CurveConfig", "EvaluateConfig", "GepaConfig", "GuardConfig", "SingleBestConfig"]
