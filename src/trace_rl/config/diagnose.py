"""`DiagnoseConfig`: the `diagnose` section of a trace-rl config (stage 1b of TRACE), overridable by flags.

Defaults follow TRACE §3.3 (ρ = 0.10, δ = 0.20, up to 10 candidates, K = 8 of N = 10 labeling runs). The structural
and behavioral analyzers are deterministic, so their N runs would all agree: their default is N = 1, K = 1 (the same
aggregation still runs). The probe analyzer (`analyst: probe`, settings in `probe`) samples the agent itself and
averages `probe.samples` moves per label, so its default is N = 1 too.
"""

from __future__ import annotations

import math

from pydantic import Field, model_validator

from trace_rl.config.base import Section

STRUCTURAL = "structural"
BEHAVIORAL = "behavioral"
PROBE = "probe"
DETERMINISTIC = (STRUCTURAL, BEHAVIORAL)  # the analyzers that need no model
NO_ANALYST_MODEL = (*DETERMINISTIC, PROBE)  # the analyzers that need no analyst model (the probe samples the agent)


class ProbeConfig(Section):
    """The probe analyzer (`diagnose/probe.py`): the agent's own move at each decision point of every diagnosed task."""

    policy: str | None = Field(
        None, description="The agent probed: a config `models` name or a spec; default: the rollout's policy."
    )
    adapter: str | None = Field(None, description="A LoRA adapter (its served name) on the probed policy.")
    samples: int = Field(4, ge=1, description="Moves sampled at each decision point of each task.")
    temperature: float | None = Field(None, ge=0.0, description="Sampling temperature (default: the policy's).")
    max_tokens: int | None = Field(None, ge=1, description="Tokens per agent turn (default: the policy's).")
    max_steps: int = Field(6, ge=1, description="Steps of one probe episode (the move is judged on the first turns).")
    max_errors: int = Field(3, ge=1, description="Tool errors that end a probe episode.")
    threshold: float = Field(
        0.5, ge=0.0, le=1.0, description="A decision is LACKING when fewer than this share of its moves are right."
    )
    concurrency: int = Field(16, ge=1, description="Probe episodes in flight.")


PAPER_N_RUNS = 10
PAPER_K_FRACTION = 0.8  # K = 8 of N = 10


class DiagnoseConfig(Section):
    """Stage 1b: contrast successful and failed trajectories, keep capabilities that explain the failures."""

    analyst: str = Field(
        STRUCTURAL,
        description="'structural' (reference-guided, no LLM; needs tasks with gold actions, else the behavioral one "
        "runs instead), 'behavioral' (no LLM, no gold actions: labels observable behavior, contrasting successes and "
        "failures), 'probe' (samples the agent at each decision point of the diagnosed library tasks; see `probe`) "
        "or a model name / spec (config `models` name, openai:<model>[@<url>], scripted, ...).",
    )
    probe: ProbeConfig = Field(default_factory=ProbeConfig, description="Settings of the probe analyzer.")
    n_runs: int | None = Field(
        None,
        ge=1,
        description="Independent labeling runs N (TRACE: 10). Default 10 for an LLM analyst, 1 structural / "
        "behavioral.",
    )
    k: int | None = Field(
        None,
        ge=1,
        description="Runs a capability must pass (K of N). Default ceil(0.8·N): 8 of 10 as the paper's code.",
    )
    rho: float = Field(0.10, ge=0.0, le=1.0, description="Min. coverage of failed rollouts, Cov ≥ ρ (TRACE §3.3).")
    delta: float = Field(0.20, ge=-1.0, le=1.0, description="Min. contrastive gap Δ = ER− − ER+ (TRACE §3.3).")
    max_candidates: int = Field(10, ge=1, description="Discovery returns at most this many capabilities (TRACE: 10).")
    splits: list[str] = Field(["train"], min_length=1, description="Rollout splits to diagnose (test would leak).")
    allow_test_split: bool = Field(
        False, description="Permit test splits in `splits` (leaks test tasks into training; docs/method-notes.md §6.1)."
    )
    batch_size: int = Field(20, ge=1, description="Trajectories per labeling call at most.")
    char_budget: int = Field(48_000, ge=2_000, description="Characters of trajectory summaries per labeling call.")
    discovery_char_budget: int = Field(96_000, ge=2_000, description="Characters of summaries in the discovery call.")
    max_content_chars: int = Field(500, ge=40, description="One message's content in a summary is cut to this.")
    max_trajectory_chars: int = Field(6_000, ge=400, description="One trajectory's summary is cut to this.")
    retries: int = Field(3, ge=0, description="Repair requests after invalid analyst output, per call.")
    concurrency: int = Field(4, ge=1, description="Labeling runs in flight.")
    temperature: float = Field(0.7, ge=0.0, description="Analyst sampling temperature (labeling runs differ by it).")
    discovery_temperature: float = Field(0.2, ge=0.0, description="Analyst temperature for the one discovery call.")
    max_tokens: int = Field(4_096, ge=64, description="Analyst completion budget per call (at most half the context).")
    context_tokens: int | None = Field(
        None,
        ge=256,
        description="The analyst's context length in tokens; default: the model's (local max_position_embeddings, "
        "vLLM max_model_len), else 32768. Prompts are fitted to it (see budget.py of the diagnose package).",
    )
    seed: int = Field(0, description="Shuffling and sampling seed; run i uses seed + i.")
    max_examples: int = Field(8, ge=0, description="Example failed trajectories kept per capability (paper code: 8).")
    structural_evidence: bool = Field(
        True, description="Give the structural analyzer's findings to an LLM analyst as evidence (when gold exists)."
    )

    @model_validator(mode="after")
    def _k_le_n(self) -> DiagnoseConfig:
        """K of N with N as derived (`runs`: a deterministic analyzer's default N is 1), so a config is refused at
        load, before any stage runs."""
        if self.k is not None and self.k > self.runs:
            raise ValueError(f"k ({self.k}) cannot exceed the number of labeling runs ({self.runs})")
        return self

    @property
    def is_structural(self) -> bool:
        return self.analyst == STRUCTURAL

    @property
    def is_deterministic(self) -> bool:
        """A no-LLM analyzer (structural or behavioral): no model client, and N = 1 by default."""
        return self.analyst in DETERMINISTIC

    @property
    def needs_analyst_model(self) -> bool:
        """An LLM analyst: `analyst` names the model that reads the trajectories."""
        return self.analyst not in NO_ANALYST_MODEL

    @property
    def runs(self) -> int:
        """N: the configured value, else 10 for an LLM analyst and 1 for a rule or probe one."""
        if self.n_runs is not None:
            return self.n_runs
        return PAPER_N_RUNS if self.needs_analyst_model else 1

    @property
    def min_passes(self) -> int:
        """K: the configured value, else ceil(0.8·N) (8 of 10, as the paper's code), at least 1."""
        if self.k is not None:
            return self.k
        return max(1, math.ceil(PAPER_K_FRACTION * self.runs - 1e-9))


def is_test_split(split: str) -> bool:
    """Splits that hold evaluation tasks: 'test', 'test_hard', 'heldout', ..."""
    s = split.lower()
    return "test" in s or "heldout" in s or "held_out" in s or s == "eval"


__all__ = ["BEHAVIORAL", "PROBE", "STRUCTURAL", "DiagnoseConfig", "ProbeConfig", "is_test_split"]
