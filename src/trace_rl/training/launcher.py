"""The one way to launch an adapter's training, in one of three modes, used by the train stage and by evaluate's
training baselines (GRPO on the target, the multi-capability adapter).

- `inline` (`InlineLauncher`): the backend's `train` in the calling process (one device: the GPU Ray assigned
  through CUDA_VISIBLE_DEVICES, or the CPU). The train stage's default; also any injected backend (tests).
- `spawned` (`SpawnedLauncher`): a fresh `spawn` child process rebuilds the environment from a picklable recipe and
  trains with the config's backend, so the trainer's memory (GRPO on full-vocabulary logits peaks at many GB) goes
  back to the system before the caller continues. Evaluate's baselines train this way.
- `accelerate` (`AccelerateLauncher`): for an adapter that needs several GPUs (the paper's 30B agent: 4-8 80 GB GPUs
  per adapter), the Ray task holds `gpus_per_train_job` GPUs and runs

      accelerate launch --num_processes <gpus> [--config_file <accelerate_config>] \\
          -m trace_rl.cli.train --run <run> --capability <name> --config <run>/train/<name>/launch.yaml

  on them (DeepSpeed / FSDP come from the accelerate config). The launched command writes the same adapter folder; it
  does not touch the manifest's stage record (`TRACE_RL_SUBJOB=1`), which the driver owns.

Every mode trains `AdapterJob` (name, config, adapter and work folders) and returns its `AdapterResult`; the modes
that train in another process read it back from the adapter's `done.json`. `train_job` wraps one launch as the
`WorkJob` an executor runs (one Ray task per capability, with its GPUs).
"""

from __future__ import annotations

import functools
import math
import multiprocessing
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import yaml

from trace_rl.artifacts.adapters import is_done, read_done
from trace_rl.artifacts.layout import AdapterLayout, RunLayout
from trace_rl.artifacts.store import atomic_write_text
from trace_rl.config import ExecutorConfig
from trace_rl.config.train import TrainConfig
from trace_rl.errors import UserError
from trace_rl.executor.base import WorkJob
from trace_rl.training.backends import make_backend
from trace_rl.training.protocol import AdapterResult, TrainEnv, TrainerBackend

SUBJOB_ENV = "TRACE_RL_SUBJOB"


class TrainingFailed(RuntimeError):
    """A training in another process ended without a finished adapter."""

    def __init__(self, message: str, exit_code: int | None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class AdapterJob:
    """One adapter to train: its name, its config, and the folders of its adapter and of its work files."""

    name: str
    cfg: TrainConfig
    adapter_dir: Path
    work_dir: Path


class Launcher(Protocol):
    """Trains one `AdapterJob` somewhere and returns what it produced."""

    mode: str

    def launch(self, job: AdapterJob) -> AdapterResult: ...


def result_from_folder(job: AdapterJob) -> AdapterResult:
    """The result of a training that ran in another process, from the adapter's `done.json`."""
    adapter = AdapterLayout(job.adapter_dir)
    done = read_done(adapter)
    if done is None:
        raise UserError(f"no {adapter.done}: the training of '{job.name}' finished without marking the adapter done")
    return AdapterResult(
        capability=job.name,
        adapter_dir=job.adapter_dir,
        steps=done.steps or 0,
        resumed_from=done.resumed_from,
        wall_s=done.wall_s,
        summary=done.model_dump(mode="json"),
    )


@dataclass(frozen=True)
class InlineLauncher:
    """In this process, with a backend already built."""

    env: TrainEnv
    backend: TrainerBackend
    mode: ClassVar[str] = "inline"

    def launch(self, job: AdapterJob) -> AdapterResult:
        return self.backend.train(self.env, job.cfg, adapter_dir=job.adapter_dir, work_dir=job.work_dir)


def _spawned_main(job: AdapterJob, env_recipe: Callable[[], TrainEnv]) -> None:
    """Entry point of the spawned training process."""
    backend = make_backend(job.cfg.backend)
    backend.train(env_recipe(), job.cfg, adapter_dir=job.adapter_dir, work_dir=job.work_dir)


@dataclass(frozen=True)
class SpawnedLauncher:
    """In a spawned child process that builds its environment with `env_recipe` (picklable: a module-level function
    or a `functools.partial` of one)."""

    env_recipe: Callable[[], TrainEnv]
    mode: ClassVar[str] = "spawned"

    def launch(self, job: AdapterJob) -> AdapterResult:
        args = (job, self.env_recipe)
        proc = multiprocessing.get_context("spawn").Process(target=_spawned_main, args=args, name=f"train-{job.name}")
        proc.start()
        try:
            proc.join()
        except BaseException:
            proc.terminate()
            proc.join()
            raise
        if proc.exitcode != 0 or not is_done(job.adapter_dir):
            raise TrainingFailed(f"training '{job.name}' in a child process exited with {proc.exitcode}", proc.exitcode)
        return result_from_folder(job)


def accelerate_command(
    run_root: Path, name: str, config_file: Path, processes: int, accelerate_config: Path | None
) -> list[str]:
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(processes)]
    if accelerate_config is not None:
        cmd += ["--config_file", str(accelerate_config)]
    return [
        *cmd,
        "-m",
        "trace_rl.cli.train",
        "--run",
        str(run_root),
        "--capability",
        name,
        "--config",
        str(config_file),
    ]


@dataclass(frozen=True)
class AccelerateLauncher:
    """Under `accelerate launch` on `processes` GPUs: the run's synthesized environment `job.name`."""

    run_root: Path
    processes: int
    accelerate_config: Path | None = None
    mode: ClassVar[str] = "accelerate"

    def launch(self, job: AdapterJob) -> AdapterResult:
        """Run the launched training to completion, then read its result back from the adapter folder."""
        config_file = RunLayout(self.run_root).train_work(job.name).launch_config
        atomic_write_text(config_file, yaml.safe_dump({"train": job.cfg.model_dump(mode="json")}))
        cmd = accelerate_command(self.run_root, job.name, config_file, self.processes, self.accelerate_config)
        done = subprocess.run(cmd, env={**os.environ, SUBJOB_ENV: "1"}, check=False)
        if done.returncode != 0:
            raise TrainingFailed(
                f"training '{job.name}' under accelerate exited with {done.returncode}: {' '.join(cmd)}",
                done.returncode,
            )
        return result_from_folder(job)


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
    layout = RunLayout(run_root)
    job = AdapterJob(
        name=name, cfg=cfg, adapter_dir=layout.adapter(name).folder, work_dir=layout.train_work(name).folder
    )
    gpus, cpus = (ex.gpus_per_train_job, ex.cpus_per_train_job) if ex.kind == "ray" else (0.0, 1.0)
    launcher: Launcher
    if ex.kind == "ray" and ex.train_launcher == "accelerate":
        if not from_run:
            raise UserError("executor.train_launcher 'accelerate' trains the run's synthesized environments only")
        launch_cfg = ex.accelerate_config.resolve() if ex.accelerate_config else None  # the worker's cwd differs
        launcher = AccelerateLauncher(run_root.resolve(), max(1, math.floor(gpus)), launch_cfg)
    else:
        launcher = InlineLauncher(env, backend)
    return WorkJob(name=f"train:{name}", fn=functools.partial(launcher.launch, job), num_gpus=gpus, num_cpus=cpus)


__all__ = [
    "SUBJOB_ENV",
    "AccelerateLauncher",
    "AdapterJob",
    "InlineLauncher",
    "Launcher",
    "SpawnedLauncher",
    "TrainingFailed",
    "accelerate_command",
    "result_from_folder",
    "train_job",
]
