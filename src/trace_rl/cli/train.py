"""`trace-rl train`: the typer command (registered in cli/app.py) and `python -m trace_rl.cli.train` for accelerate.

    trace-rl train --run runs/demo [--capability NAME] --backend trl
    trace-rl train --run runs/demo --env library:lookup_answer --model smollm2-135m --steps 12 ...
    accelerate launch --num_processes 2 -m trace_rl.cli.train --run runs/demo ...

Settings come from `--config` (else the config recorded in the run's manifest, else the `TrainConfig` defaults for a
run with no manifest yet, e.g. one `train --env ...` creates), then `--set key=value` (any TrainConfig field,
YAML-typed), then the dedicated flags; the train stage (`train/stage.py`) runs with them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from trace_rl.artifacts.store import RunDir
from trace_rl.config import TraceConfig, executor_with, load_config, section_with
from trace_rl.errors import UserError
from trace_rl.stage import StageContext, command_line, load_run_config, run_stage
from trace_rl.training.defaults import quiet_defaults


def build_config(
    config: Path | None, sets: list[str] | None, flags: dict[str, Any], run: RunDir | None = None
) -> TraceConfig:
    """The config (`--config`, else the one recorded in `run`'s manifest, else the defaults) with `--set key=value`
    (YAML-typed) and then the flags (None: not given) applied to its `train` section; one line per problem, naming
    `train.<field>`."""
    cfg = load_run_config(run, config) if run is not None and run.exists() else load_config(config)
    changes: dict[str, Any] = {}
    for item in sets or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--set {item!r}: expected key=value")
        changes[key.strip()] = yaml.safe_load(value)
    changes.update({k: v for k, v in flags.items() if v is not None})
    cfg.train = section_with(cfg.train, changes, "train", "trace-rl train")
    return cfg


def train_command(
    ctx: typer.Context,
    run: Annotated[Path, typer.Option("--run", help="Run directory, e.g. runs/demo.")],
    capability: Annotated[str | None, typer.Option("--capability", help="Train only this capability.")] = None,
    backend: Annotated[str, typer.Option("--backend", help="Training engine (trl).")] = "trl",
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="YAML config (section train, executor).")
    ] = None,
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
    from trace_rl.train.stage import TrainStage

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
        "held_out_seeds": list(range(1_000_000, 1_000_000 + held_out)) if held_out is not None else None,
    }
    run_dir = RunDir(run)
    cfg = build_config(config, sets, flags, run_dir)
    cfg.executor = executor_with(cfg.executor, executor, ray_address)
    stage = TrainStage(capability=capability, env_spec=env, mix=mix)
    run_stage(stage, StageContext(cfg, run_dir, command=command_line(ctx), echo=typer.echo))


def main(argv: list[str] | None = None) -> int:
    """`python -m trace_rl.cli.train ...` (e.g. under `accelerate launch`): the same command, the same exit codes."""
    from trace_rl.cli.runner import run_app

    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(train_command)
    return run_app(app, argv, "trace-rl train")


__all__ = ["build_config", "main", "train_command"]

if __name__ == "__main__":
    sys.exit(main())
