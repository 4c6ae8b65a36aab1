"""One capability's training as a `WorkJob`: in the job's own process (`inline`) or under `accelerate launch`.

`inline` calls the backend in the worker process (one device: the GPU Ray assigned through CUDA_VISIBLE_DEVICES, or
the CPU). `accelerate` is for an adapter that needs several GPUs (the paper's 30B agent: 4-8 80 GB GPUs per adapter):
the Ray task holds `gpus_per_train_job` GPUs and runs

    accelerate launch --num_processes <gpus> [--config_file <accelerate_config>] \\
        -m trace_rl.train --run <run> --capability <name> --config <run>/train/<name>/launch.yaml

on them (DeepSpeed / FSDP come from the accelerate config). The launched command writes the same adapter folder; it
does not touch the manifest's stage record (`TRACE_RL_SUBJOB=1`), which the driver owns.
"""

from __future__ import annotations

import functools
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from trace_rl.config import ExecutorConfig
from trace_rl.errors import UserError
from trace_rl.executor.base import WorkJob
from trace_rl.artifacts.store import atomic_write_text, read_json

SUBJOB_ENV = "TRACE_RL_SUBJOB"


def train_inline(backend: Any, env: Any, cfg: Any, adapter_dir: Path, work_dir: Path) -> Any:
    return backend.train(env, cfg, adapter_dir=adapter_dir, work_dir=work_dir)


def accelerate_command(
    run_root: Path, name: str, config_file: Path, processes: int, accelerate_config: Path | None
) -> list[str]:
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(processes)]
    if accelerate_config is not None:
        cmd += ["--config_file", str(accelerate_config)]
    return [*cmd, "-m", "trace_rl.train", "--run", str(run_root), "--capability", name, "--config", str(config_file)]


def train_accelerate(
    run_root: Path, name: str, cfg: Any, processes: int, accelerate_config: Path | None, adapter_dir: Path
) -> Any:
    """Run the launched training to completion, then read its result back from the adapter folder."""
    from trace_rl.training.protocol import AdapterResult

    config_file = run_root / "train" / name / "launch.yaml"
    atomic_write_text(config_file, yaml.safe_dump({"stages": {"train": cfg.model_dump(mode="json")}}))
    cmd = accelerate_command(run_root, name, config_file, processes, accelerate_config)
    done = subprocess.run(cmd, env={**os.environ, SUBJOB_ENV: "1"}, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"training '{name}' under accelerate exited with {done.returncode}: {' '.join(cmd)}")
    summary = read_json(adapter_dir / "done.json")
    return AdapterResult(
        capability=name, adapter_dir=adapter_dir, steps=int(summary.get("steps") or 0),
        resumed_from=summary.get("resumed_from"), wall_s=float(summary.get("wall_s") or 0.0), summary=summary,
    )  # fmt: skip


def train_job(
    ex: ExecutorConfig | None,
    *,
    name: str,
    backend: Any,
    env: Any,
    cfg: Any,
    run_root: Path,
    from_run: bool,
) -> WorkJob[Any]:
    """The job training capability `name` into `<run>/adapters/<name>` (work files in `<run>/train/<name>`)."""
    ex = ex or ExecutorConfig()
    adapter_dir, work_dir = run_root / "adapters" / name, run_root / "train" / name
    gpus, cpus = (ex.gpus_per_train_job, ex.cpus_per_train_job) if ex.kind == "ray" else (0.0, 1.0)
    if ex.kind == "ray" and ex.train_launcher == "accelerate":
        if not from_run:
            raise UserError("executor.train_launcher 'accelerate' trains the run's synthesized environments only")
        processes = max(1, math.floor(gpus))
        launch_cfg = ex.accelerate_config.resolve() if ex.accelerate_config else None  # the worker's cwd differs
        fn = functools.partial(train_accelerate, run_root.resolve(), name, cfg, processes, launch_cfg, adapter_dir)
    else:
        fn = functools.partial(train_inline, backend, env, cfg, adapter_dir, work_dir)
    return WorkJob(name=f"train:{name}", fn=fn, num_gpus=gpus, num_cpus=cpus)


__all__ = ["SUBJOB_ENV", "accelerate_command", "train_job"]
