"""`trace-rl import`: a log file (rollout/importers.py) checked against its environment and written as a run.

The reference is the file's own tasks when it carries them (τ² results.json, v1 `info.task`, JSONL `task`), else
the environment's. A τ² file's tasks are compared with the environment's task set by id (gold actions and facts to
tell): without `--task-set` the first set that matches them all is chosen (`head`, then `v0.2`); a task missing
from the set, or whose gold differs, is an error naming the tasks (`allow_mismatch` imports anyway, the file's
tasks staying the reference). v1 tasks have ids of their own; each is matched to the τ² task with the same user and
the same gold writes, recorded as `metadata.tau2_task_id` (unmatched ones are counted in a warning).

The run gets `rollout/trajectories.jsonl`, `rollout/reference_tasks.json`, a manifest whose config names the
environment and makes `imported` diagnose's default split, and an `import` stage record (source, format, models,
counts) that `view` and `report` show.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trace_rl.artifacts.store import JsonlStore, RunDir
from trace_rl.artifacts.trajectories import IMPORT_STAGE, ReferenceTasks, write_reference_tasks
from trace_rl.config import EnvConfig
from trace_rl.errors import UserError
from trace_rl.rollout.importers import IMPORTED_SPLIT, ImportedLog, read_log
from trace_rl.types import Task

TASK_SETS = ("head", "v0.2")


@dataclass
class ImportResult:
    run: RunDir
    log: ImportedLog
    task_set: str | None
    warnings: list[str] = field(default_factory=list)

    @property
    def line(self) -> str:
        ts = self.log.trajectories
        ok = sum(bool(t.success) for t in ts)
        models = ", ".join(sorted({t.model for t in ts if t.model})) or "-"
        return (
            f"imported {len(ts)} episodes ({ok} succeeded, {len(ts) - ok} failed) of {len({t.task_id for t in ts})} "
            f"tasks from {self.log.format} file; env {self.log.env}"
            + (f" (task set {self.task_set})" if self.task_set else "")
            + f"; model {models}; split {IMPORTED_SPLIT}"
        )


def _gold_key(task: Task, is_write: Callable[[str], bool] | None = None) -> str:
    """Gold actions (name, arguments) and facts to tell, as one comparable string."""
    criteria = task.evaluation_criteria
    if criteria is None:
        return ""
    actions = [
        (a.name, a.arguments)
        for a in criteria.actions or []
        if a.requestor == "assistant" and (is_write is None or is_write(a.name))
    ]
    facts = sorted(criteria.communicate_info or []) if is_write is None else []
    return json.dumps([actions, facts], sort_keys=True, default=str)


def compare_tasks(file_tasks: Sequence[Task], env_tasks: Sequence[Task]) -> tuple[list[str], list[str]]:
    """(ids the environment lacks, ids whose gold actions or facts differ)."""
    by_id = {t.id: t for t in env_tasks}
    missing = [t.id for t in file_tasks if t.id not in by_id]
    differ = [t.id for t in file_tasks if t.id in by_id and _gold_key(t) != _gold_key(by_id[t.id])]
    return missing, differ


def _ids(ids: Sequence[str]) -> str:
    return ", ".join(ids[:12]) + (f" … ({len(ids)} in all)" if len(ids) > 12 else "")


def _domain(env: str, task_set: str | None, data_dir: Path | None) -> Any:
    from trace_rl.envs.registry import load_domain

    data: dict[str, Any] = {"name": env}
    if task_set:
        data["task_set"] = task_set
    if data_dir:
        data["data_dir"] = data_dir
    try:
        cfg = EnvConfig.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"--task-set / --env: {exc.errors()[0]['msg']}") from None
    return load_domain(cfg.name, cfg)


def _all_tasks(domain: Any) -> list[Task]:
    return domain.tasks("base") if "base" in domain.splits() else [t for s in domain.splits() for t in domain.tasks(s)]


def choose_task_set(
    log: ImportedLog, task_set: str | None, data_dir: Path | None, allow_mismatch: bool, warnings: list[str]
) -> tuple[str | None, list[Task]]:
    """The environment's task set the file's tasks match, and the reference tasks (see the module docstring)."""
    if not log.env.startswith("tau2:"):
        return task_set, log.tasks
    candidates = [task_set] if task_set else list(TASK_SETS)
    problems = []
    for ts in candidates:
        try:
            env_tasks = _all_tasks(_domain(log.env, ts, data_dir))
        except UserError as exc:
            if log.tasks:
                warnings.append(f"could not check the file's tasks against {log.env}: {exc}")
                return task_set, log.tasks
            raise
        if log.own_task_ids:
            _match_v1(log.tasks, env_tasks, _write_kinds(_domain(log.env, ts, data_dir)), warnings)
            return ts, log.tasks
        if not log.tasks:  # no tasks in the file: the environment's are the reference
            wanted = sorted({t.task_id for t in log.trajectories})
            known = {t.id for t in env_tasks}
            absent = [i for i in wanted if i not in known]
            if absent:
                raise UserError(f"tasks {_ids(absent)} of the file are not in {log.env} task set {ts}")
            return ts, [t for t in env_tasks if t.id in set(wanted)]
        missing, differ = compare_tasks(log.tasks, env_tasks)
        if not missing and not differ:
            return ts, log.tasks
        parts = [f"{len(differ)} differ in gold actions or facts ({_ids(differ)})"] if differ else []
        parts += [f"{len(missing)} are not in it ({_ids(missing)})"] if missing else []
        problems.append(f"task set {ts}: " + "; ".join(parts))
    message = f"the file's tasks do not match {log.env}: " + " | ".join(problems)
    if allow_mismatch:
        warnings.append(message + " (imported anyway; the file's tasks are the reference)")
        return task_set, log.tasks
    raise UserError(
        message + "; pass --task-set for the set the run was scored on, or --allow-task-mismatch to keep the "
        "file's tasks as the reference"
    )


def _user_id(task: Task) -> str | None:
    meta = task.metadata.get("user_id")
    if meta:
        return str(meta)
    text = json.dumps(task.user_scenario or "", default=str)
    for word in text.replace('"', " ").replace(".", " ").split():
        if word.count("_") >= 2 and word.rsplit("_", 1)[-1].isdigit():
            return word
    return None


def _write_kinds(domain: Any) -> Callable[[str], bool]:
    try:
        tools = domain.make_env().tools
        kinds = {name: bool(tools.mutates_state(name)) for name in tools.tool_names}
    except Exception:
        kinds = {}
    return lambda name: kinds.get(name, not name.startswith(("get_", "search_", "list_", "calculate", "think")))


def _match_v1(
    v1_tasks: list[Task], env_tasks: list[Task], is_write: Callable[[str], bool], warnings: list[str]
) -> None:
    """Record the τ² task each v1 task is (same user, same gold writes) as `metadata.tau2_task_id`."""
    index: dict[tuple[str | None, str], list[str]] = {}
    for t in env_tasks:
        index.setdefault((_user_id(t), _gold_key(t, is_write)), []).append(t.id)
    unmatched = []
    for t in v1_tasks:
        hits = index.get((_user_id(t), _gold_key(t, is_write)), [])
        if hits:
            t.metadata["tau2_task_id"] = hits[0]
        else:
            unmatched.append(t.id)
    if unmatched:
        warnings.append(
            f"{len(unmatched)} of {len(v1_tasks)} v1 tasks match no τ² task by user and gold writes "
            f"({_ids(unmatched)}); their own gold actions stay the reference"
        )


def import_log(
    path: Path | str,
    run: RunDir,
    *,
    fmt: str = "auto",
    env: str | None = None,
    task_set: str | None = None,
    data_dir: Path | None = None,
    model: str | None = None,
    user_model: str | None = None,
    allow_mismatch: bool = False,
    command: str | None = None,
) -> ImportResult:
    """Read `path`, check it against its environment and write it as run `run` (which must hold no episodes)."""
    if run.trajectories.exists() and run.trajectories.stat().st_size:
        raise UserError(f"{run.root} already holds episodes ({run.trajectories}); import into a new run directory")
    log = read_log(path, fmt, env=env, model=model, user_model=user_model)
    if not log.trajectories:
        raise UserError(f"{path}: no episodes in the file")
    warnings = list(log.warnings)
    chosen, reference = choose_task_set(log, task_set, data_dir, allow_mismatch, warnings)
    env_section: dict[str, Any] = {"name": log.env}
    if chosen:
        env_section["task_set"] = chosen
    if data_dir:
        env_section["data_dir"] = str(data_dir)
    config = {"env": env_section, "diagnose": {"splits": [IMPORTED_SPLIT]}}
    run.ensure(config=config, command=command)
    summary = {
        "source": str(Path(path).resolve()),
        "format": log.format,
        "env": log.env,
        "task_set": chosen,
        "models": sorted({t.model for t in log.trajectories if t.model}),
        "user_models": sorted({t.user_model for t in log.trajectories if t.user_model}),
        "n_episodes": len(log.trajectories),
        "n_tasks": len({t.task_id for t in log.trajectories}),
        "succeeded": sum(bool(t.success) for t in log.trajectories),
        "reference": "file" if log.tasks else "environment",
        "warnings": warnings,
    }
    with run.stage(IMPORT_STAGE, {"format": fmt, "env": env, "task_set": task_set}, command=command) as record:
        write_reference_tasks(
            run, ReferenceTasks(env=log.env or "", task_set=chosen, source=summary["source"], tasks=reference)
        )
        JsonlStore(run.trajectories).append(log.trajectories)
        record.summary = summary
    return ImportResult(run=run, log=log, task_set=chosen, warnings=warnings)


__all__ = ["ImportResult", "choose_task_set", "compare_tasks", "import_log"]
