"""Finding and loading the τ² data directory (MIT data shipped next to the repo, never copied into it).

Resolution order: `env.data_dir` from the config, then the `TRACE_TAU2_DATA` environment variable, then
`../shared/data/tau2` relative to the working directory and to the repository root. Layout: `<root>/<domain>/`
holding `db.json`, `policy.md`, `tasks.json` (HEAD), `tasks_v0.2.json`, `split_tasks.json`, `tools.json` (+ mock
`user_db.json`, retail `tasks_tau1_train.json`) and `<root>/user_simulator/simulation_guidelines[_tools].md`.

Every problem is a one-line `UserError` naming the file (and field). Loaded DBs and task lists are cached per process;
the cached DB is the pristine copy every episode copies (copy-on-write), so it must never be mutated.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trace_rl.config import format_validation_error
from trace_rl.envs.tau2.db import Tau2DB
from trace_rl.errors import UserError
from trace_rl.types import Task

DOMAINS = ("mock", "retail", "airline")
TASK_FILES = {"head": "tasks.json", "v0.2": "tasks_v0.2.json"}
TAU1_FILE = "tasks_tau1_train.json"
ENV_VAR = "TRACE_TAU2_DATA"
REPO_ROOT = Path(__file__).resolve().parents[4]


def candidate_dirs() -> list[Path]:
    """Where the data is looked for when neither the config nor the environment variable names it."""
    rel = Path("..") / "shared" / "data" / "tau2"
    return [(Path.cwd() / rel).resolve(), (REPO_ROOT / rel).resolve()]


def resolve_data_dir(data_dir: Path | str | None = None) -> Path:
    """The τ² data root; a UserError says where it looked."""
    if data_dir is not None:
        path = Path(data_dir).expanduser()
        if not path.is_dir():
            raise UserError(f"env.data_dir: τ² data directory not found: {path}")
        return path.resolve()
    from_env = os.environ.get(ENV_VAR)
    if from_env:
        path = Path(from_env).expanduser()
        if not path.is_dir():
            raise UserError(f"{ENV_VAR}: τ² data directory not found: {path}")
        return path.resolve()
    for path in candidate_dirs():
        if path.is_dir():
            return path
    looked = ", ".join(str(p) for p in dict.fromkeys(candidate_dirs()))
    raise UserError(f"τ² data directory not found (set env.data_dir or {ENV_VAR}; looked in {looked})")


def domain_dir(root: Path, domain: str) -> Path:
    if domain not in DOMAINS:
        raise UserError(f"unknown τ² domain '{domain}' (known: {', '.join(DOMAINS)})")
    path = root / domain
    if not path.is_dir():
        raise UserError(f"{path}: τ² domain folder not found in the data directory")
    return path


def read_json(path: Path) -> Any:
    if not path.is_file():
        raise UserError(f"{path}: file not found")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None


def read_text(path: Path) -> str:
    if not path.is_file():
        raise UserError(f"{path}: file not found")
    return path.read_text(encoding="utf-8")


@functools.lru_cache(maxsize=16)
def load_db(path: Path, db_cls: type[Tau2DB]) -> Tau2DB:
    """The pristine DB of one file (cached; never mutate it)."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise UserError(f"{path}: top level must be a JSON object")
    try:
        return db_cls.model_validate(data).freeze()
    except ValidationError as err:
        raise UserError(format_validation_error(err, str(path))) from None


@functools.lru_cache(maxsize=32)
def _load_tasks_cached(path: Path) -> tuple[Task, ...]:
    data = read_json(path)
    if not isinstance(data, list):
        raise UserError(f"{path}: top level must be a JSON list of tasks")
    tasks: list[Task] = []
    seen: set[str] = set()
    for i, raw in enumerate(data):
        label = f"task[{i}]" + (f" (id {raw['id']!r})" if isinstance(raw, dict) and "id" in raw else "")
        try:
            task = Task.model_validate(raw)
        except ValidationError as err:
            raise UserError(format_validation_error(err, f"{path}: {label}")) from None
        if task.id in seen:
            raise UserError(f"{path}: {label}: id: duplicate task id")
        seen.add(task.id)
        tasks.append(task)
    return tuple(tasks)


def load_tasks(path: Path) -> list[Task]:
    """Validated tasks of one file, as fresh copies (callers may annotate them)."""
    return [task.model_copy(deep=True) for task in _load_tasks_cached(path)]


@functools.lru_cache(maxsize=16)
def load_splits(path: Path) -> dict[str, tuple[str, ...]]:
    data = read_json(path)
    if not isinstance(data, dict):
        raise UserError(f"{path}: top level must map split names to lists of task ids")
    splits: dict[str, tuple[str, ...]] = {}
    for name, ids in data.items():
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise UserError(f"{path}: {name}: must be a list of task id strings")
        splits[name] = tuple(ids)
    return splits


@functools.lru_cache(maxsize=16)
def load_tool_schemas(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(agent_tools, user_tools) in OpenAI function-schema form, in upstream toolkit order."""
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("agent_tools"), list):
        raise UserError(f"{path}: agent_tools: must be a list of tool schemas")
    out: list[list[dict[str, Any]]] = []
    for key in ("agent_tools", "user_tools"):
        schemas = data.get(key) or []
        for i, schema in enumerate(schemas):
            name = schema.get("function", {}).get("name") if isinstance(schema, dict) else None
            if not isinstance(name, str):
                raise UserError(f"{path}: {key}.{i}.function.name: missing")
        out.append(schemas)
    return out[0], out[1]


def guidelines_path(root: Path, with_tools: bool) -> Path:
    name = "simulation_guidelines_tools.md" if with_tools else "simulation_guidelines.md"
    return root / "user_simulator" / name
