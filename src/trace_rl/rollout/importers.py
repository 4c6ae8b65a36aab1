"""Agent logs written elsewhere, read as trace-rl trajectories and reference tasks (`trace-rl import`).

Three formats, detected from the file unless named:

- `tau2`: τ²-bench's `results.json` (`{"info", "tasks", "simulations"}`, envs/tau2/results_io.py). Unknown task keys
  (a fork's `evaluation_criteria.acceptable_outcomes`) are left out with a warning. The agent and user-simulator
  models come from `info.agent_info.llm` / `info.user_info.llm`; the environment from `environment_info.domain_name`.
- `taubench`: τ-bench (v1) historical trajectories, a list of `{task_id, reward, info: {task: {user_id, actions,
  instruction, outputs}}, traj, trial}` with OpenAI chat messages in `traj`. v1 task ids are not τ² ids: each v1
  task becomes a reference task of its own (gold = its `actions`, facts to tell = its `outputs`); the environment
  is read from the policy header of the system prompt.
- `jsonl`: one episode per line, `{"task_id", "reward", "messages": [OpenAI chat messages], "trial"?, "model"?,
  "user_model"?, "env"?, "task"?}` where `task` is a τ²-shaped task (its gold actions become the reference).

Every episode lands in the split `imported` with the id `<env>/imported/<task_id>/<trial>`; the file's own episode
id is kept in `metadata.source_id`. Files ending in `.gz` are read transparently.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trace_rl.config import format_validation_error
from trace_rl.envs.tau2.results_io import import_results, tolerant_tasks
from trace_rl.errors import UserError
from trace_rl.types import Action, EvaluationCriteria, Message, RewardType, Task, ToolCall, Trajectory

IMPORTED_SPLIT = "imported"
FORMATS = ("tau2", "taubench", "jsonl")
POLICY_HEADERS = {"airline agent policy": "tau2:airline", "retail agent policy": "tau2:retail"}


@dataclass
class ImportedLog:
    """What a log file holds. `tasks`: reference tasks carried by the file (empty: take the environment's);
    `own_task_ids`: the file's task ids are its own (v1), not the environment's."""

    format: str
    trajectories: list[Trajectory]
    tasks: list[Task] = field(default_factory=list)
    env: str | None = None
    warnings: list[str] = field(default_factory=list)
    own_task_ids: bool = False


# -- reading ----------------------------------------------------------------------------------------------------
def _read(path: Path) -> tuple[Any, list[Any] | None]:
    """(whole-file JSON or None, JSONL records or None)."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read ({exc})") from None
    try:
        return json.loads(text), None
    except json.JSONDecodeError:
        pass
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}, line {number}: not valid JSON ({exc.msg})") from None
    return None, records


def detect_format(data: Any, records: list[Any] | None) -> str:
    if isinstance(data, dict) and "simulations" in data:
        return "tau2"
    if isinstance(data, list) and data and isinstance(data[0], dict) and "traj" in data[0]:
        return "taubench"
    if records is not None or (isinstance(data, dict) and "messages" in data):
        return "jsonl"
    raise UserError(
        "cannot tell the log format: expected a τ² results.json (with 'simulations'), a τ-bench v1 trajectory list "
        "(records with 'traj') or JSONL episodes (lines with 'messages'); pass --format"
    )


def read_log(
    path: Path | str,
    fmt: str = "auto",
    *,
    env: str | None = None,
    model: str | None = None,
    user_model: str | None = None,
) -> ImportedLog:
    """Parse `path` in format `fmt` ('auto' detects it); `env`, `model`, `user_model` override the file's."""
    path = Path(path)
    data, records = _read(path)
    if fmt == "auto":
        fmt = detect_format(data, records)
    if fmt not in FORMATS:
        raise UserError(f"--format: unknown format '{fmt}' (known: auto, {', '.join(FORMATS)})")
    if fmt == "tau2":
        log = _tau2(data, str(path))
    elif fmt == "taubench":
        if not isinstance(data, list):
            raise UserError(f"{path}: not a τ-bench v1 trajectory list (a JSON list of records with 'traj')")
        log = _taubench(data, str(path))
    else:
        rows = records if records is not None else ([data] if isinstance(data, dict) else data)
        if not isinstance(rows, list):
            raise UserError(f"{path}: not JSONL episodes (one JSON object per line)")
        log = _jsonl(rows, str(path))
    log.env = env or log.env
    if log.env is None:
        raise UserError(f"{path}: the file does not name its environment; pass --env (e.g. tau2:airline)")
    _finish(log, model, user_model)
    return log


def _finish(log: ImportedLog, model: str | None, user_model: str | None) -> None:
    """Ids `<env>/imported/<task>/<trial>` (a repeated pair gets the next free trial), env and models set."""
    used: set[tuple[str, int]] = set()
    out = []
    for t in log.trajectories:
        trial = t.trial
        while (t.task_id, trial) in used:
            trial += 1
        used.add((t.task_id, trial))
        meta = {**t.metadata, "source_id": t.metadata.get("source_id", t.id), "source_format": log.format}
        out.append(
            t.model_copy(
                update={
                    "id": f"{log.env}/{IMPORTED_SPLIT}/{t.task_id}/{trial}",
                    "env": log.env,
                    "split": IMPORTED_SPLIT,
                    "trial": trial,
                    "model": model or t.model,
                    "user_model": user_model or t.user_model,
                    "metadata": meta,
                }
            )
        )
    log.trajectories = out


def _success(reward: float | None) -> bool | None:
    return None if reward is None else abs(reward - 1.0) < 1e-6


# -- τ² results.json ----------------------------------------------------------------------------------------------
def _tau2(data: Any, where: str) -> ImportedLog:
    warnings: list[str] = []
    trajectories, tasks = import_results(data, warnings)
    info = data.get("info") or {}
    agent = (info.get("agent_info") or {}).get("llm") or ""
    user = (info.get("user_info") or {}).get("llm")
    domain = (info.get("environment_info") or {}).get("domain_name")
    trajectories = [
        t.model_copy(update={"model": t.model or agent, "user_model": t.user_model or user}) for t in trajectories
    ]
    return ImportedLog("tau2", trajectories, tasks, f"tau2:{domain}" if domain else None, warnings)


# -- OpenAI chat messages -----------------------------------------------------------------------------------------
def message_from_openai(raw: dict[str, Any], index: int) -> Message:
    """One OpenAI-format chat message as a trace-rl Message (text next to tool calls kept as the thought)."""
    role = raw.get("role")
    content = raw.get("content")
    if isinstance(content, list):  # content parts: keep the text ones
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    if role == "tool":
        text = "" if content is None else str(content)
        return Message(
            role="tool",
            content=text,
            tool_call_id=str(raw.get("tool_call_id") or ""),
            name=raw.get("name"),
            error=text.startswith("Error"),
        )
    calls = []
    for i, call in enumerate(raw.get("tool_calls") or []):
        fn = call.get("function") or call
        args_raw = fn.get("arguments")
        parse_error = raw_text = None
        if isinstance(args_raw, str):
            try:
                args = json.loads(args_raw) if args_raw.strip() else {}
            except json.JSONDecodeError as exc:
                args, parse_error, raw_text = {}, exc.msg, args_raw
        else:
            args = args_raw or {}
        if not isinstance(args, dict):
            args, parse_error, raw_text = {}, "arguments are not a JSON object", json.dumps(args_raw)
        calls.append(
            ToolCall(
                id=str(call.get("id") or f"call_{index}_{i}"),
                name=str(fn.get("name") or ""),
                arguments=args,
                parse_error=parse_error,
                raw=raw_text,
            )
        )
    if calls:
        return Message(role=role, tool_calls=calls, thought=content or None)
    return Message(role=role, content=content)


def _messages(raw: Iterable[Any], where: str) -> list[Message]:
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool"):
            raise UserError(f"{where}: message {i}: not a chat message with role system/user/assistant/tool")
        try:
            out.append(message_from_openai(m, i))
        except ValidationError as err:
            raise UserError(format_validation_error(err, f"{where}: message {i}")) from None
    names = {c.id: c.name for m in out for c in m.tool_calls or []}
    return [
        m.model_copy(update={"name": names.get(m.tool_call_id or "")}) if m.role == "tool" and not m.name else m
        for m in out
    ]


def env_from_policy(messages: list[Message]) -> str | None:
    """The τ² environment a v1 system prompt's policy header names."""
    for m in messages:
        if m.role == "system" and m.content:
            low = m.content.lower()
            for header, env in POLICY_HEADERS.items():
                if header in low:
                    return env
    return None


# -- τ-bench v1 -----------------------------------------------------------------------------------------------------
def v1_task(task_id: str, raw: dict[str, Any]) -> Task:
    actions = [
        Action(action_id=f"{task_id}_{i}", name=str(a["name"]), arguments=dict(a.get("kwargs") or {}))
        for i, a in enumerate(raw.get("actions") or [])
    ]
    return Task(
        id=task_id,
        user_scenario={"persona": None, "instructions": str(raw.get("instruction") or "")},
        evaluation_criteria=EvaluationCriteria(
            actions=actions,
            communicate_info=[str(o) for o in raw.get("outputs") or []],
            reward_basis=[RewardType.DB, RewardType.COMMUNICATE],
        ),
        metadata={"source_format": "taubench", "user_id": raw.get("user_id")},
    )


def _taubench(data: list[Any], where: str) -> ImportedLog:
    trajectories: list[Trajectory] = []
    tasks: dict[str, Task] = {}
    warnings: list[str] = []
    env = None
    for i, rec in enumerate(data):
        at = f"{where}: record {i}"
        if not isinstance(rec, dict) or "traj" not in rec or "task_id" not in rec:
            raise UserError(f"{at}: not a τ-bench v1 trajectory (needs task_id, reward, traj)")
        task_id = str(rec["task_id"])
        raw_task = (rec.get("info") or {}).get("task")
        if isinstance(raw_task, dict):
            try:
                task = v1_task(task_id, raw_task)
            except (KeyError, ValidationError) as exc:
                raise UserError(f"{at}: info.task is not a τ-bench task ({exc})") from None
            if task_id in tasks and tasks[task_id].evaluation_criteria != task.evaluation_criteria:
                warnings.append(f"task {task_id}: records disagree on its gold actions; the first is kept")
            tasks.setdefault(task_id, task)
        messages = _messages(rec["traj"], at)
        env = env or env_from_policy(messages)
        reward = rec.get("reward")
        reward = None if reward is None else float(reward)
        trajectories.append(
            Trajectory(
                id=f"{task_id}/{rec.get('trial') or 0}",
                env="",
                split=IMPORTED_SPLIT,
                task_id=task_id,
                trial=int(rec.get("trial") or 0),
                seed=0,
                messages=messages,
                reward=reward,
                success=_success(reward),
            )
        )
    return ImportedLog("taubench", trajectories, list(tasks.values()), env, warnings, own_task_ids=True)


# -- plain JSONL ----------------------------------------------------------------------------------------------------
def _jsonl(rows: list[Any], where: str) -> ImportedLog:
    trajectories: list[Trajectory] = []
    tasks: dict[str, Task] = {}
    warnings: list[str] = []
    envs = set()
    for i, rec in enumerate(rows, start=1):
        at = f"{where}, line {i}"
        if not isinstance(rec, dict):
            raise UserError(f"{at}: not a JSON object")
        missing = [k for k in ("task_id", "reward", "messages") if k not in rec]
        if missing:
            raise UserError(f"{at}: missing {', '.join(missing)} (each line needs task_id, reward, messages)")
        if not isinstance(rec["messages"], list):
            raise UserError(f"{at}: messages must be a list of OpenAI chat messages")
        task_id = str(rec["task_id"])
        if isinstance(rec.get("task"), dict):
            try:
                (task,) = tolerant_tasks([{**rec["task"], "id": task_id}], warnings)
            except ValidationError as err:
                raise UserError(format_validation_error(err, f"{at}: task")) from None
            tasks.setdefault(task_id, task)
        try:
            reward = None if rec["reward"] is None else float(rec["reward"])
        except (TypeError, ValueError):
            raise UserError(f"{at}: reward must be a number (got {rec['reward']!r})") from None
        if rec.get("env"):
            envs.add(str(rec["env"]))
        trajectories.append(
            Trajectory(
                id=str(rec.get("id") or f"{task_id}/{rec.get('trial') or 0}"),
                env="",
                split=IMPORTED_SPLIT,
                task_id=task_id,
                trial=int(rec.get("trial") or 0),
                seed=int(rec.get("seed") or 0),
                messages=_messages(rec["messages"], at),
                reward=reward,
                success=_success(reward),
                model=str(rec.get("model") or ""),
                user_model=rec.get("user_model"),
            )
        )
    if len(envs) > 1:
        raise UserError(
            f"{where}: episodes name several environments ({', '.join(sorted(envs))}); import one at a time"
        )
    return ImportedLog("jsonl", trajectories, list(tasks.values()), next(iter(envs), None), warnings)


__all__ = ["FORMATS", "IMPORTED_SPLIT", "ImportedLog", "detect_format", "message_from_openai", "read_log"]
