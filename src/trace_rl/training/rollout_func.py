"""The `rollout_func` given to TRL's GRPOTrainer, and the one-row-per-seed dataset it reads.

Contract with trl==1.16.0 (measured; `tests/training/test_rollout_contract.py` pins it):
- `rollout_func(prompts, trainer)` gets each dataset prompt already repeated `num_generations` times, consecutively
  (TRL's docstring says "no duplication"; the code duplicates) and must return exactly one completion per entry;
- the returned `prompt_ids` replace the dataset prompt for the loss, so re-sampled seeds and hint-stripped prompts
  are legitimate;
- `env_mask` (1 = sampled by the model, 0 = environment/user tokens) multiplies the loss mask;
- `logprobs` are only used by TRL's vLLM importance-sampling correction; without vLLM TRL recomputes them;
- every other key reaches the reward functions as a keyword argument of the same name (`env_reward`, `success`, ...).
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from typing import Any

from trace_rl.artifacts.store import JsonlStore
from trace_rl.engine.episode import EpisodeLimits
from trace_rl.engine.sampler import TurnSampler
from trace_rl.engine.token_driver import EpisodeResult, EpisodeRunner, initial_messages, require_scored
from trace_rl.errors import UserError
from trace_rl.training.grouping import Group, GroupPlan, SeedTable, collect_groups, split_groups
from trace_rl.training.protocol import TrainEnv
from trace_rl.types import Message

log = logging.getLogger(__name__)


def message_dicts(messages: list[Message]) -> list[dict[str, str]]:
    """Plain role/content dicts for a dataset row (the key the seed is found by)."""
    from trace_rl.models.toolcall_parse import render_message_text

    return [{"role": m.role, "content": render_message_text(m)} for m in messages]


def seed_rows(
    train_env: TrainEnv, seeds: list[int], limits: EpisodeLimits, table: SeedTable
) -> tuple[list[dict[str, Any]], list[int]]:
    """One dataset row per seed (`prompt`, `seed`); seeds whose prompt repeats an earlier one, whose episode ends
    before the agent speaks, or whose task cannot be generated (a per-seed failure, e.g. every draw refused by the
    leak guard) are skipped (returned second)."""
    rows, skipped = [], []
    for seed in seeds:
        try:
            messages = initial_messages(train_env, seed, limits)
        except UserError as exc:
            log.warning("environment %s: seed %d skipped: %s", getattr(train_env, "name", "?"), seed, exc)
            skipped.append(seed)
            continue
        if messages is None:
            skipped.append(seed)
            continue
        prompt = message_dicts(messages)
        if not table.add(prompt, seed):
            skipped.append(seed)
            continue
        rows.append({"prompt": prompt, "seed": seed})
    return rows, skipped


def env_reward(completions: list[Any], env_reward: list[float | None], **kwargs: Any) -> list[float | None]:
    """TRL reward function: the environment's shaped reward computed during the rollout (None = dropped group)."""
    return list(env_reward)


class GroupRollout:
    """TRL `rollout_func`: K episodes per seed through `EpisodeRunner`, grouped, filtered and hint-stripped."""

    def __init__(
        self,
        train_env: TrainEnv,
        runner: EpisodeRunner,
        plan: GroupPlan,
        table: SeedTable,
        sampler_for: Callable[[Any], TurnSampler],
        *,
        trajectories: JsonlStore | None = None,
    ) -> None:
        self.train_env = train_env
        self.runner = runner
        self.plan = plan
        self.table = table
        self.sampler_for = sampler_for
        self.trajectories = trajectories
        self.pending_stats: list[dict[str, float]] = []
        self.calls = 0
        self._calls_at: dict[int, int] = {}  # optimizer step -> rollout_func calls made for it (this process)

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        started = time.perf_counter()
        gen0, env0 = self.runner.generation_s, self.runner.env_s
        group_prompts = split_groups(prompts, self.plan.k)
        seeds = [self.table.seed_of(p) for p in group_prompts]
        step = int(getattr(getattr(trainer, "state", None), "global_step", 0) or 0)
        sampler = self.sampler_for(trainer)
        groups = collect_groups(
            seeds,
            self.plan,
            lambda reqs: require_scored(self.runner.run(reqs, sampler)),
            step=step,
            hints_available=self.train_env.has_hint(),
        )
        out = self._output(groups)
        self.calls += 1
        self._calls_at[step] = call = self._calls_at.get(step, 0) + 1
        stats = self._stats(groups)
        stats["rollout/seconds"] = time.perf_counter() - started
        stats["rollout/generation_seconds"] = self.runner.generation_s - gen0
        stats["rollout/env_seconds"] = self.runner.env_s - env0
        self.pending_stats.append(stats)
        if self.trajectories is not None:
            self._log(groups, step, call)
        return out

    def _output(self, groups: list[Group]) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {
            k: []
            for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "env_reward", "success", "seed", "hinted")
        }
        for group in groups:
            for ep in group.episodes:
                out["prompt_ids"].append(list(ep.base_prompt_ids))
                out["completion_ids"].append(list(ep.completion_ids))
                out["logprobs"].append(list(ep.logprobs))
                out["env_mask"].append([0] * len(ep.env_mask) if group.dropped else list(ep.env_mask))
                out["env_reward"].append(None if group.dropped else float(ep.reward))
                out["success"].append(ep.success)
                out["seed"].append(group.seed)
                out["hinted"].append(ep.hinted)
        return out

    def _stats(self, groups: list[Group]) -> dict[str, float]:
        episodes: list[EpisodeResult] = [ep for g in groups for ep in g.episodes]
        rewards = [ep.reward for ep in episodes]
        n = max(1, len(groups))
        return {
            "groups/count": float(len(groups)),
            "groups/frac_dropped": sum(g.dropped for g in groups) / n,
            "groups/frac_resampled": sum(g.attempts > 0 for g in groups) / n,
            "groups/resample_attempts": float(sum(g.attempts for g in groups)),
            "env/reward_mean": statistics.fmean(rewards) if rewards else 0.0,
            "env/reward_std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
            "env/success_rate": statistics.fmean(float(ep.success) for ep in episodes) if episodes else 0.0,
            "env/hinted_fraction": statistics.fmean(float(ep.hinted) for ep in episodes) if episodes else 0.0,
            "env/turns_mean": statistics.fmean(len(ep.turns) for ep in episodes) if episodes else 0.0,
            "tokens/model": float(sum(ep.model_tokens for ep in episodes)),
            "tokens/env": float(sum(ep.env_tokens for ep in episodes)),
            "tokens/prompt": float(sum(len(ep.base_prompt_ids) for ep in episodes)),
        }

    def _log(self, groups: list[Group], step: int, call: int) -> None:
        """Ids number the calls within their optimizer step, so a step redone after a resume (killed before its
        checkpoint) writes the same ids again: the last record wins and the rollout budget counts the step once."""
        records = []
        for gi, group in enumerate(groups):
            for k, ep in enumerate(group.episodes):
                traj = ep.trajectory(
                    env=self.train_env.name, split="train", trial=k, capability=self.train_env.name
                ).model_dump(mode="json")
                traj["id"] = f"{self.train_env.name}/train/step{step}/call{call}/g{gi}/{k}"
                traj["metadata"].update(
                    {"step": step, "group": gi, "dropped": group.dropped, "seeds_tried": group.seeds_tried}
                )
                records.append(traj)
        self.trajectories.append(records)  # type: ignore[union-attr]

    def take_stats(self) -> dict[str, float]:
        """Mean of the stats gathered since the last call (the metrics callback logs them)."""
        pending, self.pending_stats = self.pending_stats, []
        if not pending:
            return {}
        keys = pending[0].keys()
        return {k: statistics.fmean(p[k] for p in pending) for k in keys}
