"""GRPO groups for TRACE (paper §3.4): group by seed, keep only informative groups, optional hints.

- **Group by seed.** One dataset row per seed; TRL repeats each row `num_generations` (K) times, so K consecutive
  entries of `rollout_func`'s prompts are one group. `rollout_func` receives only the prompts, so the seed is recovered
  with a `SeedTable` keyed by the rendered prompt; a later seed whose prompt collides with an earlier one is skipped
  when the dataset is built.
- **Informative groups, by outcome.** The paper drops groups whose rewards are all equal. Shaped rewards make almost
  every group "vary" by noise, so by default a group counts as informative only when its *success labels* differ
  (`filter_on="outcome"`; `reward`, `both` and `none` are the alternatives).
- **Dynamic re-sampling** (released code, DAPO-style): uninformative groups are re-run on new seeds, up to
  `resample_attempts` times or until `min_informative_fraction` of the groups are informative; the prompt ids actually
  used are returned to the trainer. Groups still uninformative are **dropped**: their reward is None (TRL then gives
  them zero advantage and leaves them out of the group baselines) and their env_mask is all zeros (no token reaches the
  loss). Departure: with `loss_type="grpo"` TRL still divides by the full batch size, so dropping scales the step by
  the kept fraction instead of renormalising over the kept groups (Adam makes this nearly invisible).
- **Hints** (released code only; off unless `hint_fraction` or the environment's spec asks for them):
  `round(hint_fraction * K)` entries of each group are rolled out with the hinted system prompt; the prompt ids
  returned to the trainer are rendered with the base prompt, so the update is computed as if the policy had acted
  without the hint (off-policy by construction; logged). Environments with a `hint_prefix(task)` also force the
  opening tokens of hinted episodes' first turn (`engine/token_driver.py`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trace_rl.engine.token_driver import EpisodeRequest, EpisodeResult


def prompt_key(prompt: Any) -> str:
    """A stable key for a dataset prompt (a list of chat-message dicts, or a string)."""
    if isinstance(prompt, str):
        return prompt
    return json.dumps([{"role": m.get("role"), "content": m.get("content")} for m in prompt], ensure_ascii=False)


class SeedTable:
    """Rendered prompt → seed."""

    def __init__(self) -> None:
        self._seeds: dict[str, int] = {}

    def add(self, prompt: Any, seed: int) -> bool:
        """Register a seed; False (and nothing stored) when an earlier seed has the same prompt."""
        key = prompt_key(prompt)
        if key in self._seeds:
            return False
        self._seeds[key] = seed
        return True

    def seed_of(self, prompt: Any) -> int:
        key = prompt_key(prompt)
        if key not in self._seeds:
            raise KeyError("rollout_func got a prompt that is not in the training dataset (seed lookup failed)")
        return self._seeds[key]

    def __len__(self) -> int:
        return len(self._seeds)


def split_groups(prompts: Sequence[Any], k: int) -> list[Any]:
    """The prompt of each group of K consecutive entries; raises if TRL's duplication contract does not hold."""
    if k < 1 or len(prompts) % k:
        raise RuntimeError(
            f"rollout_func got {len(prompts)} prompts, not a multiple of num_generations={k}: TRL's rollout_func "
            "contract changed (pinned trl==1.16.0 repeats each prompt num_generations times)"
        )
    groups = []
    for start in range(0, len(prompts), k):
        chunk = [prompt_key(p) for p in prompts[start : start + k]]
        if len(set(chunk)) != 1:
            raise RuntimeError(
                "rollout_func got a group of num_generations consecutive prompts that differ: TRL's rollout_func "
                "contract changed (pinned trl==1.16.0 passes each prompt repeated num_generations times)"
            )
        groups.append(prompts[start])
    return groups


def hint_slots(k: int, fraction: float) -> list[bool]:
    """Which of the K entries of a group get the hinted prompt (the last round(fraction * K))."""
    n = min(k, round(fraction * k))
    return [False] * (k - n) + [True] * n


def is_informative(episodes: Sequence[EpisodeResult], filter_on: str, *, tol: float = 1e-6) -> bool:
    """Whether a group carries learning signal under the filter."""
    outcomes = {e.success for e in episodes}
    rewards = [e.reward for e in episodes]
    reward_varies = (max(rewards) - min(rewards)) > tol if rewards else False
    if filter_on == "outcome":
        return len(outcomes) > 1
    if filter_on == "reward":
        return reward_varies
    if filter_on == "both":
        return len(outcomes) > 1 and reward_varies
    return True


@dataclass
class Group:
    """One group's final episodes and how it got them."""

    seed: int
    episodes: list[EpisodeResult]
    informative: bool
    attempts: int = 0  # re-samples used
    seeds_tried: list[int] = field(default_factory=list)

    @property
    def dropped(self) -> bool:
        return not self.informative


@dataclass
class GroupPlan:
    k: int
    filter_on: str = "outcome"
    resample_attempts: int = 0
    min_informative_fraction: float = 1.0
    hint_fraction: float = 0.0
    resample_seed_start: int = 500_000


def resample_seed(start: int, step: int, group: int, attempt: int) -> int:
    """A fresh seed for re-sampling, deterministic in (step, group, attempt) so a resumed run reproduces it."""
    return start + (step * 1024 + group) * 8 + attempt


def collect_groups(
    seeds: Sequence[int],
    plan: GroupPlan,
    run: Any,
    *,
    step: int = 0,
    hints_available: bool = True,
) -> list[Group]:
    """Roll out K episodes per seed, re-sample uninformative groups, and mark the rest dropped.

    `run(requests) -> results` runs a batch of `EpisodeRequest`s (all groups of a round together).
    """
    slots = hint_slots(plan.k, plan.hint_fraction if hints_available else 0.0)

    def requests(seed: int, tag: str) -> list[EpisodeRequest]:
        return [EpisodeRequest(seed=seed, hinted=h, tag=tag) for h in slots]

    batch = [r for g, s in enumerate(seeds) for r in requests(s, f"g{g}a0")]
    results = run(batch)
    groups = []
    for g, seed in enumerate(seeds):
        eps = results[g * plan.k : (g + 1) * plan.k]
        informative = is_informative(eps, plan.filter_on)
        groups.append(Group(seed=seed, episodes=eps, informative=informative, seeds_tried=[seed]))
    for attempt in range(1, plan.resample_attempts + 1):
        informative = sum(g.informative for g in groups)
        if not groups or informative / len(groups) >= plan.min_informative_fraction:
            break
        todo = [i for i, g in enumerate(groups) if not g.informative]
        new_seeds = {i: resample_seed(plan.resample_seed_start, step, i, attempt) for i in todo}
        batch = [r for i in todo for r in requests(new_seeds[i], f"g{i}a{attempt}")]
        results = run(batch)
        for n, i in enumerate(todo):
            eps = results[n * plan.k : (n + 1) * plan.k]
            g = groups[i]
            g.attempts = attempt
            g.seeds_tried.append(new_seeds[i])
            g.seed, g.episodes, g.informative = new_seeds[i], eps, is_informative(eps, plan.filter_on)
    return groups
