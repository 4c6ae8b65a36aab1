"""Which environments a training run trains on: the run directory's synthesized capability environments that passed
calibration (`envs/<capability>/` whose `status.json` says `ready`; the others are listed and skipped), environments
named on the command line (`library:<family>`, the stand-in capability), or given directly; and the uniform mix of a
run's calibrated environments (the multi-capability baseline, one adapter named `multi`).

Used by the train stage and by evaluate's multi-capability baseline, so both pick the same environments.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from trace_rl.artifacts.environments import env_states
from trace_rl.artifacts.layout import ENVS_DIR, MIX_ADAPTER
from trace_rl.artifacts.store import RunDir
from trace_rl.config import EnvConfig
from trace_rl.envs.synthetic import load_train_env
from trace_rl.errors import UserError
from trace_rl.training.envs import MixTrainEnv, domain_split_env, library_family_env
from trace_rl.training.protocol import TrainEnv


def load_synthesized_env(folder: Path) -> TrainEnv:
    """The capability environment synthesized in `folder`."""
    return load_train_env(Path(folder))


def run_envs(run_root: Path) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Environment folders of a run that passed calibration, and the others with their status (skipped)."""
    ready: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    for env, status in env_states(RunDir(Path(run_root))):
        if status == "ready":
            ready.append(env.folder)
        else:
            skipped.append((env.folder, status or "unfinished"))
    return ready, skipped


def env_from_spec(spec: str) -> TrainEnv:
    """`library:<family>` on the command line (a stand-in capability environment), or any environment name
    (`openenv:<folder>`, `verifiers:<module>`, `toolsandbox:<set>`, `tau2:<domain>`): GRPO on its train split's
    tasks (seed s plays task s mod n), scored by the environment itself."""
    prefix, _, rest = spec.partition(":")
    if prefix == "library" and rest:
        return library_family_env(rest)
    try:
        env = domain_split_env(spec.replace(":", "_").replace("/", "_"), EnvConfig(name=spec), "train")
        if not env.train_seeds:
            raise UserError("its train split has no task")
        return env
    except UserError as exc:
        raise UserError(
            f"unknown training environment '{spec}' ({exc}): use library:<family>, an environment name, or a run's "
            f"{ENVS_DIR}/<capability>/"
        ) from None


def select_envs(
    run: RunDir,
    *,
    envs: Mapping[str, TrainEnv] | None = None,
    env_spec: str | None = None,
    capability: str | None = None,
) -> tuple[dict[str, TrainEnv], list[tuple[str, str]]]:
    """The environments to train (name → env) and the run's environments skipped with their status."""
    skipped: list[tuple[str, str]] = []
    if envs is not None:
        chosen = dict(envs)
    elif env_spec is not None:
        built = [env_from_spec(one.strip()) for one in env_spec.split(",") if one.strip()]
        chosen = {env.name: env for env in built}
    else:
        ready, not_ready = run_envs(run.root)
        skipped = [(folder.name, status) for folder, status in not_ready]
        names = [f.name for f in ready]
        if capability is not None and capability not in names:
            known = ", ".join(names) or "none passed calibration"
            raise UserError(f"capability '{capability}' has no calibrated environment in {run.envs_dir} ({known})")
        chosen = {f.name: load_synthesized_env(f) for f in ready if capability in (None, f.name)}
    if capability is not None:
        if capability not in chosen:
            raise UserError(f"unknown capability '{capability}' (available: {', '.join(chosen) or 'none'})")
        chosen = {capability: chosen[capability]}
    return chosen, skipped


def run_mix_env(run_root: Path) -> MixTrainEnv:
    """A uniform mix of the run's calibrated capability environments (the train stage's `--mix`); UserError if none."""
    chosen, skipped = select_envs(RunDir(Path(run_root)))
    if not chosen:
        why = ", ".join(f"{n}: {s}" for n, s in skipped) or "no envs/ folder"
        raise UserError(f"no calibrated capability environment to mix ({why})")
    return MixTrainEnv(MIX_ADAPTER, list(chosen.values()))


__all__ = ["env_from_spec", "load_synthesized_env", "run_envs", "run_mix_env", "select_envs"]
