"""Slow: every arm on the library with the tiny random model — real LoRA adapters in a `LocalClient`, the paper's
label-logit router, GRPO on target really trained by TRL (with the checkpoint kept for the curve), GEPA with a
scripted reflection LM. Checks the machinery end to end, not the scores (the model is random).

    .venv/bin/python -m pytest -m slow tests/evaluate/test_evaluate_tiny.py
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from tests.artifacts.builders import write_capabilities_file

from trace_rl.artifacts.store import RunDir, atomic_write_json
from trace_rl.config import EnvConfig, ModelConfig, TraceConfig
from trace_rl.config.evaluate import EvaluateConfig
from trace_rl.evaluate.stage import run_evaluate

pytestmark = pytest.mark.slow


def test_every_arm_on_the_tiny_model(tmp_path: Path) -> None:
    from trace_rl.models.resolve import resolve_model_path
    from trace_rl.models.tiny import make_lora_adapter

    tiny = resolve_model_path("tiny")
    run = RunDir(tmp_path / "run")
    cfg = TraceConfig(
        env=EnvConfig(name="library", options={"n_train": 10, "n_test": 4}, max_steps=4),
        models={"policy": ModelConfig(kind="tiny", model="tiny", max_tokens=8, temperature=0.0, device="cpu")},
    )
    run.ensure(config=cfg.model_dump(mode="json"))
    train_cfg = {"model": "tiny", "max_steps": 2, "num_generations": 2, "groups_per_step": 1, "max_turn_tokens": 8,
                 "max_episode_tokens": 48, "max_turns": 2, "device": "cpu", "bf16": "false", "eval": False,
                 "log_trajectories": True}  # fmt: skip  # data: packed, not one key per line
    for seed, name in enumerate(("lookup_answer", "copy_selection")):
        folder = run.root / "adapters" / name
        make_lora_adapter(tiny, folder, seed=seed)
        atomic_write_json(folder / "train_config.json", {"config": train_cfg, "capability": name})
        atomic_write_json(folder / "done.json", {"capability": name, "finished_at": time.time(), "steps": 2})
    write_capabilities_file(
        run,
        [
            {"name": "lookup_answer", "definition": "Answering questions from the catalogue records."},
            {"name": "copy_selection", "definition": "Picking the one copy that satisfies every condition."},
        ],
    )
    ecfg = EvaluateConfig.model_validate(
        {
            "trials": 1,
            "task_limit": 2,
            "concurrency": 1,
            "samples": 100,
            "gepa": {"val_tasks": 2, "train_tasks": 2, "minibatch_size": 2},
            "single_best": {"tasks": 1},
            "curve": {"fractions": [0.5], "trials": 1},
        }
    )

    def reflection(prompt: object) -> str:
        return "```\nLook the record up first, then answer with the exact value.\n```"

    comparison = run_evaluate(run, cfg, ecfg, reflection_lm=reflection, echo=print)
    names = [a.name for a in comparison.arms]
    assert names == ["base", "trace", "grpo_target", "gepa", "single_best"], comparison.details["skipped"]
    arm = {a.name: a for a in comparison.arms}
    assert arm["trace"].rollout_budget == 8  # 2 adapters × 2 steps × G=1 × K=2, nominal (no training log)
    assert sum(arm["trace"].details["routes"].values()) == 2
    assert arm["grpo_target"].details["budget"]["steps"] == 4
    assert arm["grpo_target"].rollout_budget >= 8
    kept = run.root / "evaluate" / "grpo_target" / "train" / "kept" / "step-2" / "adapter_model.safetensors"
    assert kept.is_file()
    assert any(
        p.arm == "grpo_target" and 0 < p.budget < arm["grpo_target"].rollout_budget for p in comparison.budget_curve
    )
    gepa = json.loads((run.root / "evaluate" / "gepa" / "result.json").read_text())
    assert gepa["rollouts_charged"] <= 8
    for a in comparison.arms:
        assert a.details["episodes"]["scored"] == 2, (a.name, a.details["episodes"])
