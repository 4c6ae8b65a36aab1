"""Export trajectories to τ²-bench's `results.json` and import them back.

Layout (docs/tau2-fidelity.md §9): `{"info", "tasks", "simulations": [...]}`; each simulation has `id, task_id, trial,
seed, timestamp, start_time, end_time, duration, termination_reason, agent_cost, user_cost, messages, reward_info`.
Messages use τ²'s own message form (not the OpenAI wire form): `{role, content, tool_calls: [{id, name, arguments,
requestor}], turn_idx, timestamp}`; tool results are `{role: "tool", id, content, requestor, error, turn_idx,
timestamp}`. `reward_info` has `reward, reward_basis, reward_breakdown` (basis components), `db_check{db_match,
db_reward}`, `env_assertions`, `action_checks`, `communicate_checks`, `nl_assertions` and `info`.

What τ² has no field for (token ids, thoughts, our full breakdown and details, timings, errors...) travels in a
`trace_rl` key per simulation, which upstream's loaders ignore, so `import_results(export_results(...))` gives back
equal `Trajectory` objects. Files written by upstream import too, with what they carry.
"""

from __future__ import annotations

import copy
import datetime as dt
import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trace_rl.config import format_validation_error
from trace_rl.errors import UserError
from trace_rl.types import (
    Message,
    RewardInfo,
    RewardType,
    Task,
    TerminationReason,
    ToolCall,
    Trajectory,
)

TO_TAU2_TERMINATION = {TerminationReason.INFRA_ERROR: "infrastructure_error"}
FROM_TAU2_TERMINATION = {
    "infrastructure_error": TerminationReason.INFRA_ERROR,
    "context_window_exceeded": TerminationReason.AGENT_ERROR,
    "unexpected_error": TerminationReason.INFRA_ERROR,
}
EXTRA_KEY = "trace_rl"


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).isoformat() if ts else ""


# -- messages ---------------------------------------------------------------------------------------------------
def message_to_tau2(message: Message, index: int, requestors: dict[str, str]) -> dict[str, Any]:
    if message.role == "tool":
        return {
            "id": message.tool_call_id,
            "role": "tool",
            "content": message.content,
            "requestor": requestors.get(message.tool_call_id or "", "assistant"),
            "error": message.error,
            "turn_idx": index,
            "timestamp": None,
        }
    content = message.content
    if message.role == "assistant" and message.tool_calls and content is None:
        content = message.thought  # τ² keeps text beside tool calls as the message's content (and scores it)
    out: dict[str, Any] = {"role": message.role, "content": content}
    if message.role != "system":
        calls = [
            {"id": c.id, "name": c.name, "arguments": c.arguments, "requestor": c.requestor}
            for c in message.tool_calls or []
        ]
        out |= {"tool_calls": calls or None, "cost": None, "usage": None, "raw_data": None}
    return out | {"turn_idx": index, "timestamp": None}


def message_extras(message: Message) -> dict[str, Any]:
    """What τ²'s message form cannot hold."""
    extras: dict[str, Any] = {}
    for key in ("thought", "turn", "name"):
        if getattr(message, key) is not None:
            extras[key] = getattr(message, key)
    if message.sampled is not None:
        extras["sampled"] = message.sampled.model_dump(mode="json")
    calls = {
        c.id: {"parse_error": c.parse_error, "raw": c.raw} for c in message.tool_calls or [] if c.parse_error or c.raw
    }
    if calls:
        extras["tool_calls"] = calls
    return extras


def message_from_tau2(raw: dict[str, Any], extras: dict[str, Any] | None = None) -> Message:
    extras = extras or {}
    role = raw.get("role")
    if role == "tool":
        fields: dict[str, Any] = {
            "role": "tool",
            "content": raw.get("content"),
            "tool_call_id": raw.get("id") or raw.get("tool_call_id") or "",
            "error": bool(raw.get("error", False)),
        }
    else:
        call_extras = extras.get("tool_calls", {})
        turn = raw.get("turn_idx", 0)
        calls = [
            ToolCall(
                id=c.get("id") or f"call_{turn}_{i}",
                name=c["name"],
                arguments=c.get("arguments") or {},
                requestor=c.get("requestor") or ("user" if role == "user" else "assistant"),
                **call_extras.get(c.get("id"), {}),
            )
            for i, c in enumerate(raw.get("tool_calls") or [])
        ]
        content = raw.get("content")
        fields = {"role": role, "content": None if calls else content, "tool_calls": calls or None}
        if calls and content:  # τ² may carry text next to calls; ours keeps it as the thought
            fields["thought"] = content
    for key in ("thought", "turn", "name", "sampled"):
        if key in extras:
            fields[key] = extras[key]
    return Message.model_validate(fields)


# -- reward info ------------------------------------------------------------------------------------------------
def reward_info_to_tau2(
    info: RewardInfo | None, task: Task | None, tool_types: dict[str, str]
) -> dict[str, Any] | None:
    if info is None:
        return None
    details = info.details
    criteria = task.evaluation_criteria if task else None
    db = details.get("db")
    db_check = None
    if db is not None and "DB" in info.breakdown:
        db_check = {"db_match": info.breakdown["DB"] == 1.0, "db_reward": info.breakdown["DB"]}
    assertions = (criteria.env_assertions if criteria else None) or []
    env_checks = [
        {"env_assertion": a.model_dump(mode="json"), "met": c["met"], "reward": float(c["met"])}
        for a, c in zip(assertions, details.get("env_assertions") or [], strict=False)
    ]
    actions = (criteria.actions if criteria else None) or []
    action_checks = [
        {
            "action": a.model_dump(mode="json"),
            "action_match": c["met"],
            "action_reward": float(c["met"]),
            "tool_type": tool_types.get(a.name),
        }
        for a, c in zip(actions, details.get("actions") or [], strict=False)
    ]
    communicate = [{"info": c["info"], "met": c["met"], "justification": ""} for c in details.get("communicate") or []]
    nl = [
        {
            "nl_assertion": r.get("expectedOutcome", ""),
            "met": bool(r.get("metExpectation")),
            "justification": r.get("reasoning", ""),
        }
        for r in details.get("nl_assertions") or []
        if isinstance(r, dict) and "expectedOutcome" in r
    ]
    return {
        "reward": info.reward,
        "db_check": db_check,
        "env_assertions": env_checks or None,
        "action_checks": action_checks or None,
        "nl_assertions": nl or None,
        "communicate_checks": communicate or None,
        "reward_basis": [b.value for b in info.reward_basis] or None,
        "reward_breakdown": {b.value: info.breakdown[b.value] for b in info.reward_basis if b.value in info.breakdown}
        or None,
        "info": {"gate": details["gate"]} if "gate" in details else None,
    }


def reward_info_from_tau2(raw: dict[str, Any] | None) -> RewardInfo | None:
    if raw is None:
        return None
    breakdown = {str(k): float(v) for k, v in (raw.get("reward_breakdown") or {}).items()}
    details: dict[str, Any] = {}
    if raw.get("db_check") is not None:
        breakdown.setdefault("DB", float(raw["db_check"].get("db_reward", 0.0)))
        details["db"] = {"agent_db_match": raw["db_check"].get("db_match")}
    if raw.get("communicate_checks"):
        details["communicate"] = [{"info": c["info"], "met": c["met"]} for c in raw["communicate_checks"]]
    if raw.get("action_checks"):
        details["actions"] = [
            {"action_id": c["action"].get("action_id", ""), "name": c["action"]["name"], "met": c["action_match"]}
            for c in raw["action_checks"]
        ]
    basis = [RewardType(b) for b in raw.get("reward_basis") or []]
    return RewardInfo(reward=float(raw.get("reward", 0.0)), reward_basis=basis, breakdown=breakdown, details=details)


# -- whole files ------------------------------------------------------------------------------------------------
DEFAULT_MAX_STEPS = 50  # trace-rl's env.max_steps default (TRACE used 50)
DEFAULT_MAX_ERRORS = 10  # τ²-bench's default


def tool_signature(schema: dict[str, Any]) -> dict[str, Any]:
    """τ²'s `ToolSignature` (`name`, `doc`, `params`, `returns`) of an OpenAI function schema."""
    function = schema.get("function", schema)
    return {
        "name": function["name"],
        "doc": function.get("description") or "",
        "params": function.get("parameters"),
        "returns": None,
    }


def export_results(
    trajectories: Sequence[Trajectory],
    tasks: Sequence[Task],
    *,
    domain: Any | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    max_errors: int = DEFAULT_MAX_ERRORS,
    seed: int | None = None,
    git_commit: str = "",
) -> dict[str, Any]:
    """τ²'s results.json content for `trajectories` (all of one domain); `domain` (a Tau2Domain) fills `info`.

    Loadable by τ²'s own `Results` model: `info.max_steps`/`max_errors` are ints (the episode limits the run used;
    default trace-rl's `env` defaults) and `environment_info.tool_defs` maps each tool name to τ²'s tool signature
    `{name, doc, params, returns}` (the OpenAI schema's description and parameters), not to the OpenAI schema."""
    by_id = {t.id: t for t in tasks}
    tool_types: dict[str, str] = {}
    env_info: dict[str, Any] = {"domain_name": trajectories[0].env.removeprefix("tau2:") if trajectories else ""}
    if domain is not None:
        for name, fn in domain.parts.tools_cls.tool_methods().items():
            tool_types[name] = str(fn.__tool_type__.value)
        schemas = domain.make_env().tool_schemas()
        env_info |= {
            "domain_name": domain.domain,
            "policy": domain.policy(),
            "tool_defs": {s["function"]["name"]: tool_signature(s) for s in schemas},
        }
    first = trajectories[0] if trajectories else None
    info = {
        "git_commit": git_commit,
        "num_trials": max((t.trial for t in trajectories), default=-1) + 1,
        "max_steps": max_steps,
        "max_errors": max_errors,
        "user_info": {"implementation": "user_simulator", "llm": first.user_model if first else None, "llm_args": {}},
        "agent_info": {"implementation": "llm_agent", "llm": first.model if first else None, "llm_args": {}},
        "environment_info": env_info,
        "seed": seed,
    }
    return {
        "info": info,
        "tasks": [t.model_dump(mode="json", exclude={"metadata"} if not t.metadata else None) for t in tasks],
        "simulations": [_simulation(t, by_id.get(t.task_id), tool_types) for t in trajectories],
    }


def _simulation(traj: Trajectory, task: Task | None, tool_types: dict[str, str]) -> dict[str, Any]:
    requestors = {c.id: c.requestor for m in traj.messages for c in m.tool_calls or []}
    termination = traj.termination
    return {
        "id": traj.id,
        "task_id": traj.task_id,
        "timestamp": _iso(traj.timings.ended_at),
        "start_time": _iso(traj.timings.started_at),
        "end_time": _iso(traj.timings.ended_at),
        "duration": traj.timings.duration_s,
        "termination_reason": TO_TAU2_TERMINATION.get(termination, termination.value) if termination else None,
        "agent_cost": None,
        "user_cost": None,
        "reward_info": reward_info_to_tau2(traj.reward_info, task, tool_types),
        "messages": [message_to_tau2(m, i, requestors) for i, m in enumerate(traj.messages)],
        "trial": traj.trial,
        "seed": traj.seed,
        EXTRA_KEY: {
            "trajectory": traj.model_dump(mode="json", exclude={"messages"}),
            "message_extras": [message_extras(m) for m in traj.messages],
        },
    }


def write_results(path: Path | str, trajectories: Sequence[Trajectory], tasks: Sequence[Task], **kwargs: Any) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(export_results(trajectories, tasks, **kwargs), indent=2))
    return path


def _drop(data: Any, loc: tuple[Any, ...]) -> None:
    for key in loc[:-1]:
        data = data[key]
    del data[loc[-1]]


def tolerant_tasks(raw: Sequence[Any], warnings: list[str] | None = None) -> list[Task]:
    """Tasks from a results file, unknown keys (a fork's extra `evaluation_criteria.acceptable_outcomes`, ...) left
    out with one warning per key path instead of rejecting the file; any other problem raises ValidationError."""
    dropped: dict[str, int] = {}
    tasks = []
    for item in raw:
        data = copy.deepcopy(item)
        for _ in range(64):  # each pass removes every unknown key pydantic reported
            try:
                tasks.append(Task.model_validate(data))
                break
            except ValidationError as err:
                extra = [e["loc"] for e in err.errors() if e["type"] == "extra_forbidden"]
                if not extra or len(extra) < len(err.errors()):
                    raise
                for loc in extra:
                    _drop(data, loc)
                    path = ".".join("*" if isinstance(k, int) else str(k) for k in loc)
                    dropped[path] = dropped.get(path, 0) + 1
    if warnings is not None:
        for path, n in dropped.items():
            warnings.append(f"tasks: ignored unknown key '{path}' ({n} task(s)); it is not part of the τ² schema")
    return tasks


def load_results_data(source: dict[str, Any] | Path | str) -> dict[str, Any]:
    """The parsed results file (`.gz` read transparently); UserError when it is missing or not JSON."""
    if isinstance(source, dict):
        return source
    path = Path(source)
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        return json.loads(raw)
    except FileNotFoundError:
        raise UserError(f"{source}: file not found") from None
    except (OSError, EOFError) as exc:
        raise UserError(f"{source}: cannot read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{source}: not valid JSON (line {exc.lineno})") from None
    except UnicodeDecodeError:
        raise UserError(f"{source}: not valid JSON (not UTF-8 text)") from None


def import_results(
    source: dict[str, Any] | Path | str, warnings: list[str] | None = None
) -> tuple[list[Trajectory], list[Task]]:
    """Trajectories and tasks from a results.json (ours or upstream's); unknown task keys become `warnings`."""
    where = str(source) if not isinstance(source, dict) else "results"
    data = load_results_data(source)
    if not isinstance(data, dict) or not isinstance(data.get("simulations"), list):
        raise UserError(f"{where}: simulations: missing (not a τ² results file)")
    try:
        tasks = tolerant_tasks(data.get("tasks") or [], warnings)
        domain = (data.get("info") or {}).get("environment_info", {}).get("domain_name") or ""
        trajectories = [_trajectory(sim, f"tau2:{domain}" if domain else "tau2") for sim in data["simulations"]]
    except ValidationError as err:
        raise UserError(format_validation_error(err, where)) from None
    return trajectories, tasks


def _trajectory(sim: dict[str, Any], env: str) -> Trajectory:
    extra = sim.get(EXTRA_KEY) or {}
    message_extras_list = extra.get("message_extras") or []
    messages = [
        message_from_tau2(m, message_extras_list[i] if i < len(message_extras_list) else None)
        for i, m in enumerate(sim.get("messages") or [])
    ]
    if "trajectory" not in extra:  # upstream file: tool results get their tool's name from the call
        names = {c.id: c.name for m in messages for c in m.tool_calls or []}
        messages = [
            m.model_copy(update={"name": names.get(m.tool_call_id or "")}) if m.role == "tool" and m.name is None else m
            for m in messages
        ]
    else:
        return Trajectory.model_validate({**extra["trajectory"], "messages": [m.model_dump() for m in messages]})
    raw_reason = sim.get("termination_reason")
    termination = FROM_TAU2_TERMINATION.get(raw_reason) or (TerminationReason(raw_reason) if raw_reason else None)
    reward_info = reward_info_from_tau2(sim.get("reward_info"))
    reward = reward_info.reward if reward_info else None
    return Trajectory(
        id=sim.get("id") or f"{env}/base/{sim['task_id']}/{sim.get('trial') or 0}",
        env=env,
        split="base",
        task_id=str(sim["task_id"]),
        trial=int(sim.get("trial") or 0),
        seed=int(sim.get("seed") or 0),
        messages=messages,
        reward=reward,
        success=None if reward is None else abs(reward - 1.0) < 1e-6,
        reward_info=reward_info,
        termination=termination,
    )


__all__ = ["export_results", "import_results", "load_results_data", "tolerant_tasks", "write_results"]
