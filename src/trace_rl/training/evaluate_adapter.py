"""Before/after evaluation of an adapter on its environment's held-out seeds, with a calibration-style figure.

The same token-level episode loop as training (`EpisodeRunner`), at `eval_temperature`, `eval_trials` episodes per
held-out seed; the base model is the same PEFT model with its adapter disabled. Reported: mean shaped reward, success
rate (reward == 1), their standard errors, and per-seed means — the quantities the synthesis stage calibrates on
(mean reward and success in a target band, share of seeds whose outcome varies) — plus `gold_call_logprob`, the mean
log-likelihood of each held-out task's first gold tool call after its first prompt (dense, so it shows progress
before sampled episodes start to succeed).
"""

from __future__ import annotations

import json
import math
import statistics
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from trace_rl.engine.sampler import HFSampler, TurnSampler
from trace_rl.engine.token_driver import EpisodeRequest, EpisodeResult, EpisodeRunner, require_scored


def summarize(results: list[EpisodeResult], *, label: str, temperature: float) -> dict[str, Any]:
    """Mean reward, success rate, standard errors and per-seed means of a set of episodes."""
    rewards = [r.reward for r in results]
    success = [float(r.success) for r in results]
    per_seed: dict[str, dict[str, float]] = {}
    for seed in sorted({r.seed for r in results}):
        mine = [r for r in results if r.seed == seed]
        per_seed[str(seed)] = {
            "mean_reward": statistics.fmean(r.reward for r in mine),
            "success_rate": statistics.fmean(float(r.success) for r in mine),
        }
    n = len(results)

    def stderr(xs: list[float]) -> float:
        return statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0

    varied = [s for s in per_seed.values() if 0.0 < s["success_rate"] < 1.0]
    return {
        "label": label,
        "episodes": n,
        "seeds": len(per_seed),
        "temperature": temperature,
        "mean_reward": statistics.fmean(rewards) if rewards else 0.0,
        "reward_stderr": stderr(rewards),
        "success_rate": statistics.fmean(success) if success else 0.0,
        "success_stderr": stderr(success),
        "frac_seeds_varied": len(varied) / max(1, len(per_seed)),
        "mean_model_tokens": statistics.fmean(r.model_tokens for r in results) if results else 0.0,
        "terminations": _count(str(r.termination.value if r.termination else None) for r in results),
        "per_seed": per_seed,
    }


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


def evaluate_policy(
    runner: EpisodeRunner,
    model: Any,
    tokenizer: Any,
    seeds: list[int],
    *,
    trials: int,
    label: str,
    use_adapter: bool,
    batch_size: int = 16,
    sampler: TurnSampler | None = None,
) -> tuple[dict[str, Any], list[EpisodeResult]]:
    """Run `trials` episodes per seed with the adapter on or off; returns the summary and the episodes. `sampler`
    samples the episodes when given (a vLLM server with the adapter loaded, or the base model), else `model` does in
    process; the gold-call log-probabilities are always the in-process model's."""

    def context() -> AbstractContextManager[Any]:
        if not use_adapter and hasattr(model, "disable_adapter"):
            return _DisabledAdapter(model)
        return nullcontext(model)

    sampler = sampler or HFSampler(model, tokenizer, model_context=context)
    requests = [EpisodeRequest(seed=s, tag=f"{label}/{t}") for s in seeds for t in range(trials)]
    was_training = bool(getattr(model, "training", False))
    model.eval()
    try:
        results: list[EpisodeResult] = []
        for start in range(0, len(requests), batch_size):
            results.extend(require_scored(runner.run(requests[start : start + batch_size], sampler)))
    finally:
        if was_training:
            model.train()
    summary = summarize(results, label=label, temperature=runner.temperature)
    with context() as active:
        logps = gold_call_logprobs(runner, active, seeds)
    if logps:
        summary["gold_call_logprob"] = statistics.fmean(logps)
    return summary, results


def gold_call_logprobs(runner: EpisodeRunner, model: Any, seeds: list[int]) -> list[float]:
    """log p(first gold tool call as one line of JSON + end of turn | first prompt), per seed with gold actions.

    A dense view of what sampling hides for weak models: it rises long before sampled episodes start to succeed.
    """
    import torch

    from trace_rl.engine.episode import EpisodeLimits
    from trace_rl.engine.prompt import agent_tools
    from trace_rl.engine.token_driver import initial_messages

    codec, env = runner.codec, runner.train_env
    stop = runner.codec.tokenizer.eos_token or ""
    out: list[float] = []
    device = next(model.parameters()).device
    for seed in seeds:
        task = env.make_task(seed)
        actions = (task.evaluation_criteria.actions if task.evaluation_criteria else None) or []
        messages = initial_messages(env, seed, EpisodeLimits(max_steps=runner.limits.max_steps))
        if not actions or messages is None:
            continue
        tools = agent_tools(env, env.make_env(task))
        prompt = codec.prompt_ids(messages, tools)
        call = codec.encode(json.dumps({"name": actions[0].name, "arguments": actions[0].arguments}) + stop)
        ids = torch.tensor([prompt + call], device=device)
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
        logp = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(call, device=device).unsqueeze(-1))
        out.append(float(logp.sum()))
    return out


class _DisabledAdapter:
    """`with model.disable_adapter():` yielding the model."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self._ctx: Any = None

    def __enter__(self) -> Any:
        self._ctx = self.model.disable_adapter()
        self._ctx.__enter__()
        return self.model

    def __exit__(self, *exc: Any) -> None:
        self._ctx.__exit__(*exc)


def plot_before_after(before: dict[str, Any], after: dict[str, Any], path: Path, *, title: str = "") -> Path:
    """Two panels: mean reward and success rate (± s.e.) before/after; per-seed success-rate histogram."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6))
    labels = ["mean reward", "success rate"]
    xs = range(len(labels))
    width = 0.38
    for offset, summary, color in ((-width / 2, before, "#9aa5b1"), (width / 2, after, "#2f6fdf")):
        values = [summary["mean_reward"], summary["success_rate"]]
        errors = [summary["reward_stderr"], summary["success_stderr"]]
        bars = ax1.bar(
            [x + offset for x in xs], values, width, yerr=errors, capsize=3, color=color, label=summary["label"]
        )
        for bar, value in zip(bars, values, strict=True):
            ax1.annotate(
                f"{value:.2f}",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=8,
                xytext=(0, 2),
                textcoords="offset points",
            )
    ax1.set_xticks(list(xs), labels)
    ax1.set_ylim(0, 1.05)
    ax1.set_title(f"held-out seeds (n={after['seeds']}, T={after['temperature']})", fontsize=9)
    ax1.legend(fontsize=8)
    bins = [i / 10 for i in range(11)]
    for summary, color in ((before, "#9aa5b1"), (after, "#2f6fdf")):
        rates = [s["mean_reward"] for s in summary["per_seed"].values()]
        ax2.hist(rates, bins=bins, alpha=0.6, color=color, label=summary["label"])
    ax2.set_xlabel("per-seed mean reward")
    ax2.set_ylabel("seeds")
    ax2.set_title("per-seed reward (calibration view)", fontsize=9)
    ax2.legend(fontsize=8)
    if "gold_call_logprob" in before and "gold_call_logprob" in after:
        gold = f"log p(gold first call): {before['gold_call_logprob']:.1f} → {after['gold_call_logprob']:.1f}"
        title = f"{title}\n{gold}" if title else gold
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
