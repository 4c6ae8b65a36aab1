"""The records next to a trained adapter, `adapters/<capability>/`: written by the trainer (training/trl_backend.py),
read by the train stage (resume), route (the base model), evaluate (budgets, baselines) and the report.

- `train_config.json` (`TrainRecord`): the TrainConfig the adapter was trained with and the setup it ran on;
- `done.json` (`DoneRecord`): written last, so its presence means the adapter is complete;
- `eval_before.json` / `eval_after.json` (`EvalSummary`): base vs adapter on held-out seeds of its environment;
- `baseline.json` (`BaselineRecord`): for a baseline evaluate trained itself, what it was trained for;
- `metrics.jsonl`: one line of training metrics per logging step (training/metrics.py lists the fields).

The TrainConfig inside `train_config.json` stays a plain mapping here: old runs keep their old config fields, and the
reader of the config (`config.train.TrainConfig`) decides what it accepts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from trace_rl.artifacts.layout import MIX_ADAPTER, AdapterLayout, RunLayout
from trace_rl.artifacts.store import JsonlStore, atomic_write_json, read_model

M = TypeVar("M", bound=BaseModel)


class AdapterRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TrainRecord(AdapterRecord):
    """`train_config.json`: written when training starts."""

    config: dict[str, Any] = Field(description="The TrainConfig, as JSON.")
    capability: str = ""
    model_path: str = ""
    device: str = ""
    bf16: bool = False
    world_size: int = 1
    batch: dict[str, Any] = Field(default_factory=dict, description="micro, accumulation, groups.")
    dataset: dict[str, Any] = Field(default_factory=dict, description="Seeds and rows of the training dataset.")
    backend: str = ""
    sampler: str = Field("", description="Who sampled the rollouts: vllm | transformers (older runs: hf).")
    hint_fraction: float = 0.0


class EvalSummary(AdapterRecord):
    """`eval_before.json` (the base model) / `eval_after.json` (the adapter) on held-out seeds."""

    label: str = Field("", description="base | adapter.")
    episodes: int
    seeds: int = 0
    temperature: float | None = None
    mean_reward: float
    reward_stderr: float = 0.0
    success_rate: float
    success_stderr: float = 0.0
    frac_seeds_varied: float = 0.0
    mean_model_tokens: float = 0.0
    terminations: dict[str, int] = Field(default_factory=dict)
    per_seed: dict[str, dict[str, float]] = Field(default_factory=dict, description="seed -> mean reward, success.")
    gold_call_logprob: float | None = Field(None, description="Mean log p of the first gold call (when measured).")


class DoneRecord(AdapterRecord):
    """`done.json`: the adapter is complete."""

    capability: str
    finished_at: float = 0.0
    steps: int | None = None
    resumed_from: str | None = None
    wall_s: float = 0.0
    eval_before: dict[str, int | float] | None = Field(None, description="Headline of eval_before.json.")
    eval_after: dict[str, int | float] | None = Field(None, description="Headline of eval_after.json.")


class BaselineRecord(AdapterRecord):
    """`baseline.json`: a baseline adapter evaluate trained itself (GRPO on target, multi-capability)."""

    name: str
    max_steps: int
    keep_steps: list[int] = Field(default_factory=list, description="Steps whose checkpoints were kept for the curve.")


def _read(path: Path, model: type[M]) -> M:
    return read_model(path, model, path.name)


def _read_optional(path: Path, model: type[M]) -> M | None:
    return _read(path, model) if path.exists() else None


def read_train_record(adapter: AdapterLayout) -> TrainRecord | None:
    return _read_optional(adapter.train_config, TrainRecord)


def write_train_record(adapter: AdapterLayout, record: TrainRecord) -> None:
    atomic_write_json(adapter.train_config, record.model_dump(mode="json", exclude_unset=True))


def read_done(adapter: AdapterLayout) -> DoneRecord | None:
    """`done.json`, or None while the adapter is unfinished."""
    return _read_optional(adapter.done, DoneRecord)


def write_done(adapter: AdapterLayout, record: DoneRecord) -> None:
    atomic_write_json(adapter.done, record)


def is_done(folder: Path | AdapterLayout) -> bool:
    """A finished adapter: its weights and the done marker (written last) exist."""
    adapter = folder if isinstance(folder, AdapterLayout) else AdapterLayout(folder)
    return adapter.weights.is_file() and adapter.done.is_file()


def read_eval(path: Path) -> EvalSummary | None:
    """An `eval_before.json` / `eval_after.json`, or None when it was not written."""
    return _read_optional(path, EvalSummary)


def write_eval(path: Path, summary: EvalSummary | dict[str, Any]) -> EvalSummary:
    """Validate and write an evaluation summary; returns it as a record."""
    record = summary if isinstance(summary, EvalSummary) else EvalSummary.model_validate(summary)
    atomic_write_json(path, record.model_dump(mode="json", exclude_none=True))
    return record


def write_baseline(adapter: AdapterLayout, record: BaselineRecord) -> None:
    atomic_write_json(adapter.baseline, record)


def metrics_store(path: Path) -> JsonlStore:
    """`metrics.jsonl`: one line per logging step, keyed by step (a resumed run's repeats replace earlier lines)."""
    return JsonlStore(path, key=lambda r: str(r["step"]))


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The metric lines of a training run, latest per step, in step order (the final summary line excluded)."""
    rows = [r for r in metrics_store(path).latest().values() if isinstance(r.get("step"), int)]
    return sorted(rows, key=lambda r: r["step"])


def capability_adapters(run: RunLayout) -> dict[str, Path]:
    """Capability name -> adapter folder for every PEFT adapter under adapters/ (the `multi` baseline excluded)."""
    return {a.name: a.folder for a in run.adapters() if a.is_peft() and a.name != MIX_ADAPTER}


def adapters_base_model(run: RunLayout) -> str | None:
    """The base model the run's adapters were trained on (the first train_config.json that names one)."""
    for adapter in run.adapters():
        record = read_train_record(adapter)
        model = (record.config.get("model") if record else None) or None
        if model:
            return str(model)
    return None


__all__ = [
    "BaselineRecord",
    "DoneRecord",
    "EvalSummary",
    "TrainRecord",
    "adapters_base_model",
    "capability_adapters",
    "is_done",
    "metrics_store",
    "read_done",
    "read_eval",
    "read_metrics",
    "read_train_record",
    "write_baseline",
    "write_done",
    "write_eval",
    "write_train_record",
]
