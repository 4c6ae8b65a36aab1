"""Helpers for the kill -9 tests: a tiny `trace-rl run` where every stage does real work, run as a subprocess, and
a snapshot of a run directory's deterministic content."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from trace_rl.faults import ENV_VAR

# The tiny random model fails every task, so calibration is opened wide (every range [0, 1], no group checks) to get
# both environments `ready`: train, route and evaluate's TRACE arm then run too. Rollout and evaluate run one episode
# at a time, so each append holds one trajectory and a kill after append n leaves exactly n. Training seeds start at
# 40: the leak guard rejects every draw of seed 19 of structured_data_reasoning on this world.
CONFIG = """
run: {{name: faults, runs_dir: {runs_dir}}}
models:
  policy: {{kind: tiny, model: tiny, temperature: 0.7, max_tokens: 16, device: cpu}}
env: {{name: library, options: {{n_train: 4, n_test: 3}}, max_steps: 8, max_errors: 3}}
rollout: {{policy: policy, user: scripted, split: train, trials: 2, concurrency: 1}}
diagnose: {{analyst: structural}}
synthesize: {{generator: target, author: null, policy: policy, groups: 2, samples: 2, max_attempts: 1,
             max_tokens: 16, concurrency: 2, validation_seeds: 2,
             acceptance: {{reward_range: [0, 1], success_range: [0, 1], min_std: 0, min_informative: 0,
                          max_constant: 1, max_all_success: null, max_all_zero: null}}}}
train: {{model: tiny, max_steps: 2, save_steps: 1, num_generations: 2, groups_per_step: 1, max_turn_tokens: 16,
        max_episode_tokens: 256, max_turns: 2, eval_trials: 1, held_out_seeds: [1000001], device: cpu,
        resample_attempts: 0, train_seed_start: 40}}
route: {{tasks_per_env: 2}}
evaluate: {{arms: [base, trace], trials: 1, concurrency: 1, curve: {{enabled: false}}}}
"""
ROLLOUT_EPISODES = 8  # 4 train tasks x 2 trials
EVAL_EPISODES = 3  # 3 test tasks x 1 trial, per arm


def write_config(folder: Path) -> tuple[Path, Path]:
    """(config file, run directory) under `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "config.yaml"
    config.write_text(CONFIG.format(runs_dir=folder / "runs"))
    return config, folder / "runs" / "faults"


def start_run(config: Path, log: Path, fault: str | None = None) -> subprocess.Popen[bytes]:
    """`trace-rl run --config <config>` in a fresh process, output to `log`; `fault`: a `TRACE_RL_FAULT_AT` point.
    One torch thread per process: the reference run shares the machine with the killed ones."""
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE"})
    env.update({"TOKENIZERS_PARALLELISM": "false", "TRL_EXPERIMENTAL_SILENCE": "1", "OMP_NUM_THREADS": "1"})
    if fault is not None:
        env[ENV_VAR] = fault
    argv = [sys.executable, "-m", "trace_rl.cli", "run", "--config", str(config)]
    with log.open("wb") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)


def finish(proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 600) -> tuple[int, str]:
    """Wait for a run; (exit code, the end of its output)."""
    code = proc.wait(timeout_s)
    return code, log.read_text(errors="replace")[-4000:]


# keys whose values are clocks or durations (they differ between any two runs)
VOLATILE = re.compile(r"time|_at$|seconds|_s$|wall|elapsed|duration|created|latency|runtime|per_second|per_s$")


def normalize(value: Any, run: Path) -> Any:
    """`value` without clock and duration fields, with the run directory's path replaced by `<run>`."""
    if isinstance(value, dict):
        return {k: normalize(v, run) for k, v in value.items() if not VOLATILE.search(k)}
    if isinstance(value, list):
        return [normalize(v, run) for v in value]
    if isinstance(value, str):
        return value.replace(str(run.parent.parent), "<root>")
    return value


def jsonl_records(path: Path) -> list[dict[str, Any]]:
    """Every line, parsed (a torn line fails the test: none of the kill points may leave one)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def by_id(path: Path, run: Path, key: str = "id") -> dict[str, Any]:
    """Last record per key, normalized (the stores' own rule: the last record of a key wins)."""
    return {str(r[key]): normalize(r, run) for r in jsonl_records(path)}


def read(path: Path, run: Path) -> Any:
    return normalize(json.loads(path.read_text()), run)
