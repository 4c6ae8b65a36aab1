"""Train and test splits: which (family, seed) pairs each holds, from disjoint seed ranges.

Task i of a split has family `families[i % len(families)]` (round robin; repeat a family in the list to weight it)
and seed `base + SPLIT_OFFSET[split] + start + i`, with `base = seed_option * SEED_STRIDE` and `start` the split's
`train_start` / `test_start` option (0 by default: two runs with test starts at least `n_test` apart evaluate on
disjoint tasks, with the same train tasks). Train seeds lie in
[base, base + 1,000,000) and test seeds in [base + 1,000,000, base + 2,000,000), so the splits never share a world or
a task; later stages that vary train tasks with new seeds should draw them from `fresh_train_seeds`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trace_rl.envs.library.families import FAMILIES
from trace_rl.envs.library.prompt import PROMPT_VERSION, PROMPT_VERSIONS

SPLIT_RANGE = 1_000_000
SPLIT_OFFSET = {"train": 0, "test": SPLIT_RANGE}
SEED_STRIDE = 10_000_000
FRESH_OFFSET = 2 * SPLIT_RANGE  # seeds for synthesized variants: neither train nor test


class SplitOptions(BaseModel):
    """`EnvConfig.options` of the library domain."""

    model_config = ConfigDict(extra="forbid")

    n_train: int = Field(200, ge=0, lt=SPLIT_RANGE)
    n_test: int = Field(100, ge=0, lt=SPLIT_RANGE)
    seed: int = Field(0, ge=0, description="Shifts every split's seed range (a new library of tasks).")
    train_start: int = Field(0, ge=0, lt=SPLIT_RANGE, description="First seed of the train split, in its range.")
    test_start: int = Field(0, ge=0, lt=SPLIT_RANGE, description="First seed of the test split, in its range.")
    families: list[str] = Field(default_factory=lambda: list(FAMILIES), min_length=1)
    prompt: str = Field(PROMPT_VERSION, description="The agent prompt's version (its worked examples).")

    @model_validator(mode="after")
    def _inside(self) -> SplitOptions:
        for split in ("train", "test"):
            start, n = getattr(self, f"{split}_start"), getattr(self, f"n_{split}")
            if start + n > SPLIT_RANGE:
                raise ValueError(
                    f"{split}_start + n_{split} = {start + n} leaves the {split} range ({SPLIT_RANGE:,} seeds)"
                )
        return self

    @field_validator("prompt")
    @classmethod
    def _prompt_known(cls, value: str) -> str:
        if value not in PROMPT_VERSIONS:
            raise ValueError(f"unknown prompt '{value}' (known: {', '.join(PROMPT_VERSIONS)})")
        return value

    @field_validator("families")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        unknown = [f for f in value if f not in FAMILIES]
        if unknown:
            raise ValueError(f"unknown families {unknown} (known: {', '.join(FAMILIES)})")
        return value


def split_seeds(split: str, options: SplitOptions) -> list[tuple[str, int]]:
    """The (family, seed) pairs of a split, in order."""
    n = options.n_train if split == "train" else options.n_test
    start = options.train_start if split == "train" else options.test_start
    base = options.seed * SEED_STRIDE + SPLIT_OFFSET[split] + start
    fams = options.families
    return [(fams[i % len(fams)], base + i) for i in range(n)]


def split_seed_span(target_options: dict | None) -> range:
    """Every seed the train and test ranges of a library target (its `EnvConfig.options`) can hold: what a
    generator of fresh tasks must never draw."""
    options = SplitOptions.model_validate(target_options or {})
    low = options.seed * SEED_STRIDE + SPLIT_OFFSET["train"]
    return range(low, low + 2 * SPLIT_RANGE)


def held_out_seed_range(options: SplitOptions) -> range:
    base = options.seed * SEED_STRIDE + SPLIT_OFFSET["test"]
    return range(base, base + SPLIT_RANGE)


def fresh_train_seeds(n: int, *, start: int = 0, options: SplitOptions | None = None) -> list[int]:
    """`n` seeds outside both splits' ranges, for generating new training variants of a family."""
    options = options or SplitOptions()
    base = options.seed * SEED_STRIDE + FRESH_OFFSET + start
    return list(range(base, base + n))
