"""Calibration: roll the base policy out on G seeds × K samples and decide whether GRPO can learn from the
environment (released TRACE code; docs/method-notes.md §2).

Figures: mean shaped reward, its population std, success rate (binary, DB × COMMUNICATE), per-group shares of
informative (non-constant reward), constant, all-success and all-zero groups, groups informative on the outcome (mixed
success, docs/method-notes.md §7), unbiased pass@k for k = 1, 2, 4, … ≤ K, and a per-variant breakdown. Acceptance
defaults to the released code's thresholds (`AcceptanceConfig`). A failure carries a direction: `too_hard`, `too_easy`
or `uninformative`, which the stage turns into a difficulty move or a regeneration. Episodes use the environment's
scripted user and, as GRPO's groups will, its hinted prompt on `round(hint.fraction × K)` samples of each group
(`training/grouping.py`; the released code's config gives calibration a hint ratio too), the unhinted prompt on the
rest, run with `run_episode` on one event loop, `concurrency` at a time. The figures report that share
(`hinted_share`) and the success of the hinted and unhinted samples apart.

`log_calibration` files one attempt's figures with the run's tracker (`run.report_to`), step = attempt number, under
`calibration/<capability>/...` (numeric figures only: pass_at_k/<k>, by_variant/<v>/..., accepted as 0/1).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from trace_rl.config.synthesize import AcceptanceConfig
from trace_rl.engine.episode import EpisodeLimits
from trace_rl.engine.text_driver import EpisodeSpec, domain_agent, run_episode
from trace_rl.envs.synthetic.environment import CapabilityEnvironment
from trace_rl.models.base import ModelClient, SamplingParams
from trace_rl.tracking import Tracker, flat_metrics
from trace_rl.types import Trajectory


@dataclass
class Rollout:
    seed: int
    sample: int
    reward: float
    success: bool
    trajectory: Trajectory
    variant: str = ""


@dataclass
class CalibrationResult:
    figures: dict[str, Any]
    checks: dict[str, dict[str, Any]]
    accepted: bool
    direction: str | None
    rollouts: list[Rollout] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "direction": self.direction,
            "figures": self.figures,
            "checks": self.checks,
        }


def bounded(limits: EpisodeLimits, agent_turns: int | None) -> EpisodeLimits:
    """`limits` with at most `agent_turns` agent turns (None: unchanged)."""
    if agent_turns is None:
        return limits
    turns = agent_turns if limits.max_turns is None else min(limits.max_turns, agent_turns)
    return dataclasses.replace(limits, max_turns=turns)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one group with n samples and c successes: 1 − C(n−c, k) / C(n, k)."""
    if k > n:
        return float("nan")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def figures(rollouts: list[Rollout], samples: int) -> dict[str, Any]:
    groups: dict[int, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        groups[r.seed].append(r)
    rewards = [r.reward for r in rollouts]
    n_groups = len(groups) or 1
    const = [g for g in groups.values() if max(x.reward for x in g) - min(x.reward for x in g) <= 1e-9]
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= samples]
    by_variant: dict[str, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        by_variant[r.variant].append(r)
    return {
        "n_rollouts": len(rollouts),
        "groups": len(groups),
        "samples": samples,
        "mean_reward": _round(statistics.fmean(rewards)) if rewards else 0.0,
        "reward_std": _round(statistics.pstdev(rewards)) if len(rewards) > 1 else 0.0,
        "success_rate": _round(sum(r.success for r in rollouts) / len(rollouts)) if rollouts else 0.0,
        "informative_groups": _round(1 - len(const) / n_groups),
        "constant_groups": _round(len(const) / n_groups),
        "all_success_groups": _round(sum(all(x.success for x in g) for g in groups.values()) / n_groups),
        "all_zero_groups": _round(sum(all(x.reward == 0 for x in g) for g in groups.values()) / n_groups),
        "outcome_informative_groups": _round(sum(len({x.success for x in g}) > 1 for g in groups.values()) / n_groups),
        "pass_at_k": {
            str(k): _round(statistics.fmean(pass_at_k(len(g), sum(x.success for x in g), k) for g in groups.values()))
            for k in ks
            if groups
        },
        "by_variant": {
            v: {
                "n": len(rs),
                "mean_reward": _round(statistics.fmean(x.reward for x in rs)),
                "success_rate": _round(sum(x.success for x in rs) / len(rs)),
            }
            for v, rs in sorted(by_variant.items())
        },
        "terminations": _count(str(r.trajectory.termination) for r in rollouts),
    }


def _round(x: float) -> float:
    return round(float(x), 4)


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for i in items:
        out[i] += 1
    return dict(sorted(out.items()))


def judge(fig: dict[str, Any], acc: AcceptanceConfig) -> tuple[dict[str, dict[str, Any]], bool, str | None]:
    """Apply the thresholds; the direction says which way to move when they fail."""
    lo_r, hi_r = acc.reward_range
    lo_s, hi_s = acc.success_range
    checks: dict[str, dict[str, Any]] = {
        "mean_reward": {"value": fig["mean_reward"], "range": [lo_r, hi_r], "ok": lo_r <= fig["mean_reward"] <= hi_r},
        "success_rate": {
            "value": fig["success_rate"],
            "range": [lo_s, hi_s],
            "ok": lo_s <= fig["success_rate"] <= hi_s,
        },
        "reward_std": {"value": fig["reward_std"], "min": acc.min_std, "ok": fig["reward_std"] >= acc.min_std},
        "informative_groups": {
            "value": fig["informative_groups"],
            "min": acc.min_informative,
            "ok": fig["informative_groups"] >= acc.min_informative,
        },
        "constant_groups": {
            "value": fig["constant_groups"],
            "max": acc.max_constant,
            "ok": fig["constant_groups"] <= acc.max_constant,
        },
    }
    if acc.max_all_success is not None:
        v = fig["all_success_groups"]
        checks["all_success_groups"] = {"value": v, "max": acc.max_all_success, "ok": v <= acc.max_all_success}
    if acc.max_all_zero is not None:
        v = fig["all_zero_groups"]
        checks["all_zero_groups"] = {"value": v, "max": acc.max_all_zero, "ok": v <= acc.max_all_zero}
    accepted = all(c["ok"] for c in checks.values())
    direction = None
    if not accepted:
        easy = fig["mean_reward"] > hi_r or fig["success_rate"] > hi_s
        hard = fig["mean_reward"] < lo_r or fig["success_rate"] < lo_s
        if easy or (not hard and not checks.get("all_success_groups", {}).get("ok", True)):
            direction = "too_easy"
        elif hard or not checks.get("all_zero_groups", {}).get("ok", True):
            direction = "too_hard"
        else:
            direction = "uninformative"
    return checks, accepted, direction


async def collect(
    cap_env: CapabilityEnvironment,
    client: ModelClient,
    *,
    seeds: list[int],
    samples: int,
    temperature: float,
    max_tokens: int | None,
    concurrency: int,
    limits: EpisodeLimits,
    model_name: str = "",
    adapter: str | None = None,
    hinted: bool = False,
    hinted_per_group: int = 0,
) -> list[Rollout]:
    """K samples of each seed's task with the policy (`adapter` on it, when given; the environment's hint in every
    prompt when `hinted`, else in the first `hinted_per_group` samples of each seed); infra failures are dropped."""
    base = getattr(client, "cfg", None)
    sampling = SamplingParams(
        temperature=temperature,
        top_p=getattr(base, "top_p", 1.0),
        top_k=getattr(base, "top_k", 0),
        max_tokens=max_tokens or getattr(base, "max_tokens", 512),
    )
    prompts = (cap_env.system_prompt(hinted=False), cap_env.system_prompt(hinted=True))
    gate = asyncio.Semaphore(concurrency)

    async def one(seed: int, k: int) -> Rollout | None:
        with_hint = hinted or k < hinted_per_group
        async with gate:
            task = cap_env.make_task(seed)
            env = cap_env.make_env()
            agent = domain_agent(
                cap_env,
                client,
                system_prompt=prompts[with_hint],
                tools=cap_env.tool_schemas_for(task),
                sampling=sampling,
                adapter=adapter,
            )
            spec = EpisodeSpec(
                env=f"synthetic:{cap_env.name}",
                split="calibration",
                trial=k,
                seed=seed * 1000 + k,
                model=model_name or client.name,
                adapter=adapter,
                capability=cap_env.name,
                trajectory_id=f"synthetic:{cap_env.name}/calibration/{task.id}/{k}",
            )
            traj = await run_episode(
                env=env, task=task, agent=agent, user=cap_env.scripted_user(task), spec=spec, limits=limits
            )
            if traj.is_infra_failure:
                return None
            reward, success = cap_env.reward(task, traj)
            traj.metadata["shaped_reward"] = reward
            traj.metadata["hinted"] = with_hint
            variant = str(task.metadata.get("variant") or task.metadata.get("family") or "")
            return Rollout(seed, k, reward, success, traj, variant.split("/")[0])

    done = await asyncio.gather(*(one(s, k) for s in seeds for k in range(samples)))
    return [r for r in done if r is not None]


async def calibrate(
    cap_env: CapabilityEnvironment,
    client: ModelClient,
    *,
    groups: int,
    samples: int,
    acceptance: AcceptanceConfig,
    temperature: float = 0.7,
    max_tokens: int | None = None,
    concurrency: int = 8,
    limits: EpisodeLimits | None = None,
    seeds: list[int] | None = None,
    model_name: str = "",
) -> CalibrationResult:
    """G seeds (the first of the train split, unless given) × K samples; figures and acceptance."""
    seeds = seeds if seeds is not None else list(cap_env.spec.splits.seeds("train"))[:groups]
    hinted = round(cap_env.spec.hint.fraction * samples) if cap_env.spec.hint.text else 0  # as GRPO's groups
    rollouts = await collect(
        cap_env,
        client,
        seeds=seeds,
        samples=samples,
        temperature=temperature,
        max_tokens=max_tokens,
        concurrency=concurrency,
        limits=bounded(limits or EpisodeLimits(), cap_env.agent_turns),
        model_name=model_name,
        hinted_per_group=hinted,
    )
    fig = figures(rollouts, samples)
    fig["infra_failures"] = len(seeds) * samples - len(rollouts)
    fig["hinted_share"] = _round(hinted / samples) if samples else 0.0
    for name, part in (("hinted", True), ("unhinted", False)):
        chosen = [r.success for r in rollouts if bool(r.trajectory.metadata.get("hinted")) is part]
        fig[f"{name}_success_rate"] = _round(sum(chosen) / len(chosen)) if chosen else None
    checks, accepted, direction = judge(fig, acceptance)
    return CalibrationResult(fig, checks, accepted, direction, rollouts)


def log_calibration(tracker: Tracker, capability: str, attempt: int, result: CalibrationResult) -> dict[str, float]:
    """One calibration attempt's figures and verdict to `tracker` at step `attempt`; returns what was logged."""
    metrics = flat_metrics({**result.figures, "accepted": result.accepted}, f"calibration/{capability}")
    tracker.log(metrics, step=attempt)
    return metrics


__all__ = [
    "CalibrationResult",
    "Rollout",
    "calibrate",
    "collect",
    "figures",
    "judge",
    "log_calibration",
    "pass_at_k",
]
