"""Train and test splits: which (family, seed) pairs each holds, from disjoint seed ranges.

Task i of a split has family `families[i % len(families)]` (round robin; repeat a family in the list to weight it)
and seed `base + SPLIT_OFFSET[split] + i`, with `base = seed_option * SEED_STRIDE`. Train seeds lie in
[base, base + 1,000,000) and test seeds in [base + 1,000,000, base + 2,000,000), so the splits never share a world or
a task; later stages that vary train tasks with new seeds should draw them from `fresh_train_seeds`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from trace_rl.envs.library.families import FAMILIES

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
    families: list[str] = Field(default_factory=lambda: list(FAMILIES), min_length=1)

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
    base = options.seed * SEED_STRIDE + SPLIT_OFFSET[split]
    fams = options.families
    return [(fams[i % len(fams)], base + i) for i in range(n)]


def held_out_seed_range(options: SplitOptions) -> range:
    base = options.seed * SEED_STRIDE + SPLIT_OFFSET["test"]
    return range(base, base + SPLIT_RANGE)


def fresh_train_seeds(n: int, *, start: int = 0, options: SplitOptions | None = None) -> list[int]:
    """`n` seeds outside both splits' ranges, for generating new training variants of a family."""
    options = options or SplitOptions()
    base = options.seed * SEED_STRIDE + FRESH_OFFSET + start
    return list(range(base, base + n))
