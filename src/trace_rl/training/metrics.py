"""Training metrics as JSONL: one line per logging step, TRL's metrics merged with trace-rl's rollout statistics.

Each line carries `step`, TRL's `reward` / `reward_std` / `frac_reward_zero_std` / `clip_ratio/*` / `kl` (when
beta > 0) / `entropy` / `num_tokens` / `loss` / `learning_rate`, the rollout's own `groups/frac_dropped`,
`groups/frac_resampled`, `env/reward_mean|std`, `env/success_rate`, `env/hinted_fraction`, `tokens/model|env`, and
`step_seconds` (wall time of the optimizer step, rollout included). Only the main process writes.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from trace_rl.artifacts.adapters import metrics_store, read_metrics


class MetricsCallback(TrainerCallback):
    """Appends a JSON line per `on_log` to `path` (keyed by step, so a resumed run's repeats replace earlier ones)."""

    def __init__(self, path: Path, rollout: Any | None = None, *, capability: str = "") -> None:
        self.store = metrics_store(path)
        self.rollout = rollout
        self.capability = capability
        self._step_started: float | None = None
        self._step_times: list[float] = []

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._step_started = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._step_started is not None:
            self._step_times.append(time.perf_counter() - self._step_started)
            self._step_started = None

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        rollout_stats = self.rollout.take_stats() if self.rollout is not None else {}
        if not state.is_world_process_zero or not logs:
            return
        if "train_runtime" in logs:  # the end-of-training summary line
            record = {"step": f"final@{state.global_step}", "capability": self.capability, **logs}
            self.store.append([record])
            return
        record: dict[str, Any] = {"step": state.global_step, "capability": self.capability, "time": time.time()}
        record.update({k: v for k, v in logs.items() if isinstance(v, (int, float, str))})
        record.update(rollout_stats)
        if self._step_times:
            record["step_seconds"] = sum(self._step_times) / len(self._step_times)
            self._step_times = []
        self.store.append([record])


def plot_training(path: Path, out: Path, *, title: str = "") -> Path | None:
    """Per-step curves from metrics.jsonl: environment reward and success, dropped/hinted fractions, step time."""
    rows = read_metrics(path)
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.4))
    for key, label in (
        ("env/reward_mean", "reward (all rollouts)"),
        ("env/success_rate", "success rate"),
        ("groups/frac_dropped", "dropped groups"),
        ("env/hinted_fraction", "hinted share"),
    ):
        if any(key in r for r in rows):
            ax1.plot(steps, [r.get(key, float("nan")) for r in rows], marker="o", ms=3, label=label)
    ax1.set_xlabel("GRPO step")
    ax1.set_ylim(-0.02, 1.02)
    ax1.legend(fontsize=7)
    ax2.plot(steps, [r.get("step_seconds", float("nan")) for r in rows], marker="o", ms=3, label="step")
    ax2.plot(steps, [r.get("rollout/seconds", float("nan")) for r in rows], marker="o", ms=3, label="rollout")
    ax2.set_xlabel("GRPO step")
    ax2.set_ylabel("seconds")
    ax2.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
