"""`trace-rl train`: the typer command function (registered in cli.py) and `python -m trace_rl.train` for accelerate.

    trace-rl train --run runs/demo [--capability NAME] --backend trl
    trace-rl train --run runs/demo --env library:lookup_answer --model smollm2-135m --steps 12 ...
    accelerate launch --num_processes 2 -m trace_rl.train --run runs/demo ...

Settings come from `TrainConfig` defaults, then the `stages.train` section of `--config`, then `--set key=value`
(any TrainConfig field, YAML-typed), then the dedicated flags.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError

from trace_rl.config import ExecutorConfig, executor_with, format_validation_error, load_config
from trace_rl.errors import UserError
from trace_rl.config.train import TrainConfig


def quiet_defaults() -> None:
    """Environment defaults for training on shared CPUs, set before torch is imported (explicit values win):
    passive OpenMP waiting (spin-waiting made torch 3-5x slower under contention, offline-models.md §6), offline hub,
    no TRL experimental-API banner."""
    for key, value in (
        ("OMP_WAIT_POLICY", "PASSIVE"),
        ("HF_HUB_OFFLINE", "1"),
        ("TRANSFORMERS_OFFLINE", "1"),
        ("TRL_EXPERIMENTAL_SILENCE", "1"),
        ("TOKENIZERS_PARALLELISM", "false"),
    ):
        os.environ.setdefault(key, value)


def build_config(config: Path | None, sets: list[str] | None, flags: dict[str, Any]) -> TrainConfig:
    """TrainConfig from YAML (`stages.train`), `--set key=value` overrides and explicit flags (last wins)."""
    data: dict[str, Any] = {}
    if config is not None:
        data.update(load_config(config).stages.get("train", {}))
    for item in sets or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--set {item!r}: expected key=value")
        data[key.strip()] = yaml.safe_load(value)
    data.update({k: v for k, v in flags.items() if v is not None})
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as err:
        raise UserError(format_validation_error(err, "train config")) from None


def train_command(
    run: Annotated[Path, typer.Option("--run", help="Run directory, e.g. runs/demo.")],
    capability: Annotated[str | None, typer.Option("--capability", help="Train only this capability.")] = None,
    backend: Annotated[str, typer.Option("--backend", help="Training engine (trl).")] = "trl",
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML config (section stages.train).")] = None,
    env: Annotated[
        str | None, typer.Option("--env", help="library:<family>[,...]: train on these instead of the run's envs.")
    ] = None,
    mix: Annotated[bool, typer.Option("--mix", help="Multi-capability baseline: one adapter on all envs.")] = False,
    model: Annotated[str | None, typer.Option("--model", help="Base model: folder or alias (smollm2-135m).")] = None,
    steps: Annotated[int | None, typer.Option("--steps", help="GRPO iterations (optimizer steps).")] = None,
    num_generations: Annotated[int | None, typer.Option("--num-generations", "-k", help="K per group.")] = None,
    groups: Annotated[int | None, typer.Option("--groups", "-g", help="G groups per iteration.")] = None,
    lr: Annotated[float | None, typer.Option("--lr", help="Learning rate.")] = None,
    max_turn_tokens: Annotated[int | None, typer.Option("--max-turn-tokens")] = None,
    max_episode_tokens: Annotated[int | None, typer.Option("--max-episode-tokens")] = None,
    max_turns: Annotated[int | None, typer.Option("--max-turns")] = None,
    hint_fraction: Annotated[float | None, typer.Option("--hint-fraction")] = None,
    eval_trials: Annotated[int | None, typer.Option("--eval-trials")] = None,
    held_out: Annotated[int | None, typer.Option("--held-out", help="Number of held-out seeds.")] = None,
    bf16: Annotated[str | None, typer.Option("--bf16", help="auto | true | false")] = None,
    device: Annotated[str | None, typer.Option("--device", help="auto | cpu | cuda")] = None,
    sets: Annotated[list[str] | None, typer.Option("--set", help="Any TrainConfig field: key=value.")] = None,
    executor: Annotated[
        str | None, typer.Option("--executor", help="local | ray: one Ray task per capability (config: executor).")
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option("--ray-address", help="Ray cluster: auto or ray://host:10001 (default: local).")
    ] = None,
) -> None:
    """Train one LoRA adapter per capability with multi-turn GRPO (stage 3)."""
    quiet_defaults()
    from trace_rl.train.stage import run_train

    flags: dict[str, Any] = {
        "backend": backend,
        "model": model,
        "max_steps": steps,
        "num_generations": num_generations,
        "groups_per_step": groups,
        "learning_rate": lr,
        "max_turn_tokens": max_turn_tokens,
        "max_episode_tokens": max_episode_tokens,
        "max_turns": max_turns,
        "hint_fraction": hint_fraction,
        "eval_trials": eval_trials,
        "bf16": bf16,
        "device": device,
    }
    cfg = build_config(config, sets, flags)
    if held_out is not None:
        cfg = cfg.model_copy(update={"held_out_seeds": list(range(1_000_000, 1_000_000 + held_out))})
    base = load_config(config).executor if config is not None else ExecutorConfig()
    ex = executor_with(base, executor, ray_address)
    results = run_train(run, cfg, capability=capability, env_spec=env, mix=mix, command=" ".join(sys.argv), executor=ex)
    if not results:
        typer.echo("nothing to train: no capability environment passed calibration (see envs/*/status.json)")
    for r in results:
        if r.skipped:
            typer.echo(f"{r.capability}: already trained ({r.adapter_dir})")
            continue
        line = f"{r.capability}: {r.steps} steps -> {r.adapter_dir}"
        if r.eval_before and r.eval_after:
            line += (
                f" | held-out reward {r.eval_before['mean_reward']:.3f} -> {r.eval_after['mean_reward']:.3f},"
                f" success {r.eval_before['success_rate']:.3f} -> {r.eval_after['success_rate']:.3f}"
            )
            if "gold_call_logprob" in r.eval_before and "gold_call_logprob" in r.eval_after:
                line += (
                    f", log p(gold call) {r.eval_before['gold_call_logprob']:.1f}"
                    f" -> {r.eval_after['gold_call_logprob']:.1f}"
                )
        typer.echo(line)


def main(argv: list[str] | None = None) -> int:
    """`python -m trace_rl.train ...` (e.g. under `accelerate launch`): the same command, one-line user errors."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(train_command)
    try:
        app(args=argv, prog_name="trace-rl train", standalone_mode=False)
    except UserError as exc:
        typer.echo(f"error: {exc}", err=True)
        return 2
    return 0
