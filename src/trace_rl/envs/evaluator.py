"""Episode scoring with τ²-bench's rules (docs/tau2-fidelity.md §4), shared by every toolkit-backed domain.

Gates: a termination other than agent/user stop scores 0; a task without evaluation criteria scores 1. Otherwise the
reward is the product of the components in the reward basis (default [DB, COMMUNICATE]); the other components are still
computed as diagnostics, except NL_ASSERTION, which calls a judge model only when it is in the basis.

Departure: the predicted DB is the live environment's final state rather than a replay of the trajectory's WRITE calls;
for deterministic tools the two are equal (docs/tau2-fidelity.md §5), and it avoids replaying every episode twice.
A recorded tool output that the tools would not have produced (an edited or imported log) therefore goes unnoticed
unless `ScoringRules.strict_replay` is on: then the trajectory's tool calls are replayed on a fresh environment, any
output that differs from the recorded one is listed under `details["replay"]` and the episode scores 0 (τ²'s strict
replay raises instead), and the DB check uses the replayed state, as τ² does.

Where τ² itself is followed by default, switchable through `ScoringRules` (an environment's `scoring_rules`):
text beside tool calls in an assistant message (kept as `Message.thought`) counts for COMMUNICATE as τ² counts the
message's content (`communicate_beside_calls`); gold actions match a call when the compared arguments are equal as
dicts, so a missing argument does not match an expected null (`tau2_argument_match`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trace_rl.errors import UserError
from trace_rl.types import (
    SCORED_TERMINATIONS,
    Action,
    Message,
    RewardInfo,
    RewardType,
    Task,
    TerminationReason,
    ToolCall,
)

if TYPE_CHECKING:
    from trace_rl.envs.base import ToolkitEnvironment
    from trace_rl.models.base import ModelClient

DEFAULT_BASIS = [RewardType.DB, RewardType.COMMUNICATE]


@dataclass(frozen=True)
class ScoringRules:
    """Where scoring may depart from τ²-bench; the defaults are τ²'s behaviour except the (costly) strict replay."""

    communicate_beside_calls: bool = True
    """τ²: an assistant message's text counts for COMMUNICATE even when it also carries tool calls."""
    tau2_argument_match: bool = True
    """τ²: compared arguments equal as dicts (missing ≠ null). Off: a missing argument matches an expected null."""
    strict_replay: bool = False
    """Replay the trajectory's tool calls and flag (score 0) recorded outputs the tools would not have produced."""


TAU2_RULES = ScoringRules()


def scoring_rules(env: object) -> ScoringRules:
    rules = getattr(env, "scoring_rules", None)
    return rules if isinstance(rules, ScoringRules) else TAU2_RULES


def gold_environment(env: ToolkitEnvironment, task: Task) -> tuple[ToolkitEnvironment, list[str]]:
    """Fresh environment + initial state + every gold action; returns it and the gold actions' error texts."""
    gold = env.fresh()
    gold.reset(task)
    errors: list[str] = []
    criteria = task.evaluation_criteria
    for i, action in enumerate((criteria.actions if criteria else None) or []):
        call = ToolCall(id=f"gold_{i}", name=action.name, arguments=action.arguments, requestor=action.requestor)
        result = gold.execute(call)
        if result.error:
            errors.append(f"{action.name}: {result.content}")
    return gold, errors


def db_check(env: ToolkitEnvironment, task: Task) -> tuple[float, dict[str, Any]]:
    criteria = task.evaluation_criteria
    if criteria is None or (criteria.actions is None and criteria.env_assertions is None):
        return 1.0, {"by_fiat": True}
    gold, gold_errors = gold_environment(env, task)
    agent_match = env.tools.db.get_hash() == gold.tools.db.get_hash()
    user_match = True
    if env.user_tools is not None and gold.user_tools is not None:
        user_match = env.user_tools.db.get_hash() == gold.user_tools.db.get_hash()
    return float(agent_match and user_match), {
        "agent_db_match": agent_match,
        "user_db_match": user_match if env.user_tools is not None else None,
        "gold_action_errors": gold_errors,
    }


def env_assertion_check(env: ToolkitEnvironment, task: Task) -> tuple[float, list[dict[str, Any]]]:
    checks: list[dict[str, Any]] = []
    score = 1.0
    for assertion in (task.evaluation_criteria.env_assertions if task.evaluation_criteria else None) or []:
        kit = env.toolkit_for(assertion.env_type)
        try:
            value = kit.call_method(assertion.func_name, **assertion.arguments) if kit is not None else None
            met = isinstance(value, bool) and value == assertion.assert_value
        except Exception as exc:
            met, value = False, f"Error: {exc}"
        checks.append({"func_name": assertion.func_name, "arguments": assertion.arguments, "met": met})
        score *= float(met)
    return score, checks


def assistant_texts(messages: list[Message], beside_calls: bool = True) -> list[str]:
    """The text of every assistant message; with `beside_calls`, the text next to tool calls too (τ²'s content)."""
    texts = []
    for m in messages:
        if m.role != "assistant":
            continue
        if m.content:
            texts.append(m.content)
        elif beside_calls and m.tool_calls and m.thought:
            texts.append(m.thought)
    return texts


def communicate_check(
    task: Task, messages: list[Message], rules: ScoringRules = TAU2_RULES
) -> tuple[float, list[dict[str, Any]]]:
    """Each info string must appear case-insensitively in some assistant text, with commas removed from the text."""
    texts = [t.replace(",", "").lower() for t in assistant_texts(messages, rules.communicate_beside_calls)]
    checks = []
    for info in (task.evaluation_criteria.communicate_info if task.evaluation_criteria else None) or []:
        met = any(info.lower() in t for t in texts)
        checks.append({"info": info, "met": met})
    return float(all(c["met"] for c in checks)), checks


def action_matches(gold: Action, call: ToolCall, tau2: bool = True) -> bool:
    """τ²'s `Action.compare_with_tool_call`: same name, and the compared arguments (`compare_args`, else every argument
    of the call) equal as dicts, so an argument the call lacks never matches, not even an expected null. `tau2=False`:
    compare with `.get`, where a missing argument equals None."""
    if gold.name != call.name:
        return False
    keys = gold.compare_args if gold.compare_args is not None else list(call.arguments)
    if not tau2:
        return all(gold.arguments.get(k) == call.arguments.get(k) for k in keys)
    wanted = {k: v for k, v in gold.arguments.items() if k in keys}
    given = {k: v for k, v in call.arguments.items() if k in keys}
    return wanted == given


def action_check(
    task: Task, messages: list[Message], rules: ScoringRules = TAU2_RULES
) -> tuple[float, list[dict[str, Any]]]:
    calls = [c for m in messages for c in (m.tool_calls or [])]
    checks = []
    for gold in (task.evaluation_criteria.actions if task.evaluation_criteria else None) or []:
        met = any(action_matches(gold, c, rules.tau2_argument_match) for c in calls)
        checks.append({"action_id": gold.action_id, "name": gold.name, "met": met})
    return float(all(c["met"] for c in checks)), checks


def _normal(content: str | None) -> Any:
    try:
        return json.loads(content or "")
    except (json.JSONDecodeError, TypeError):
        return (content or "").strip()


def replay_check(env: ToolkitEnvironment, task: Task, messages: list[Message]) -> tuple[ToolkitEnvironment, list[dict]]:
    """τ²'s strict replay: the trajectory's tool calls, in order, on a fresh environment; every recorded tool output
    that differs from the replayed one (compared as JSON when both parse) is a mismatch. Returns the replayed
    environment (its DB is the predicted one) and the mismatches."""
    replay = env.fresh()
    replay.reset(task)
    recorded = {m.tool_call_id: m for m in messages if m.role == "tool"}
    mismatches = []
    for message in messages:
        for call in message.tool_calls or []:
            result = replay.execute(call)
            seen = recorded.get(call.id)
            if seen is not None and _normal(seen.content) != _normal(result.content):
                mismatches.append(
                    {"call_id": call.id, "name": call.name, "recorded": seen.content, "replayed": result.content}
                )
    return replay, mismatches


NL_JUDGE_PROMPT = """You judge a customer-service conversation against a list of expected outcomes.
For each expected outcome decide whether the conversation meets it. Answer with JSON only:
{"results": [{"expectedOutcome": "...", "reasoning": "...", "metExpectation": true}]}"""


async def nl_assertion_check(
    task: Task, messages: list[Message], judge: ModelClient | None
) -> tuple[float, list[dict[str, Any]]]:
    assertions = (task.evaluation_criteria.nl_assertions if task.evaluation_criteria else None) or []
    if not assertions:
        return 1.0, []
    if judge is None:
        raise UserError(f"task {task.id}: NL_ASSERTION is in the reward basis but no judge model is configured")
    from trace_rl.models.base import SamplingParams

    transcript = "\n".join(f"{m.role}: {m.text}" for m in messages if m.role in ("user", "assistant") and m.content)
    prompt = [
        Message(role="system", content=NL_JUDGE_PROMPT),
        Message(role="user", content=f"Conversation:\n{transcript}\n\nExpected outcomes:\n{json.dumps(assertions)}"),
    ]
    response = await judge.chat(prompt, None, sampling=SamplingParams(temperature=0.0, max_tokens=1024))
    text = response.message.content or response.message.thought or ""
    match = re.search(r"\{.*\}", text, re.S)
    try:
        results = json.loads(match.group(0))["results"] if match else None
    except (json.JSONDecodeError, KeyError, TypeError):
        results = None
    if not isinstance(results, list):
        return 0.0, [{"error": "judge output was not the expected JSON", "raw": text[:500]}]
    met = all(bool(r.get("metExpectation")) for r in results if isinstance(r, dict))
    return float(met), results


async def evaluate(
    env: ToolkitEnvironment,
    task: Task,
    messages: list[Message],
    termination: TerminationReason,
    *,
    judge: ModelClient | None = None,
) -> RewardInfo:
    if termination not in SCORED_TERMINATIONS:
        return RewardInfo(reward=0.0, details={"gate": f"termination {termination.value} scores 0"})
    criteria = task.evaluation_criteria
    if criteria is None:
        return RewardInfo(reward=1.0, details={"gate": "no evaluation criteria"})
    rules = scoring_rules(env)
    override = getattr(env, "reward_basis_override", None)
    basis = [RewardType(b) for b in override] if override else (criteria.reward_basis or DEFAULT_BASIS)
    breakdown: dict[str, float] = {}
    details: dict[str, Any] = {}
    predicted = env
    mismatches: list[dict[str, Any]] = []
    if rules.strict_replay:
        predicted, mismatches = replay_check(env, task, messages)
        details["replay"] = {"mismatches": mismatches}
    breakdown["DB"], details["db"] = db_check(predicted, task)
    breakdown["ENV_ASSERTION"], details["env_assertions"] = env_assertion_check(predicted, task)
    breakdown["COMMUNICATE"], details["communicate"] = communicate_check(task, messages, rules)
    breakdown["ACTION"], details["actions"] = action_check(task, messages, rules)
    if RewardType.NL_ASSERTION in basis:
        breakdown["NL_ASSERTION"], details["nl_assertions"] = await nl_assertion_check(task, messages, judge)
    reward = 1.0
    for component in basis:
        reward *= breakdown[component.value]
    if mismatches:
        reward = 0.0
        details["gate"] = f"strict replay: {len(mismatches)} recorded tool output(s) differ from the tools' own"
    return RewardInfo(reward=reward, reward_basis=list(basis), breakdown=breakdown, details=details)


def is_success(reward: float | None) -> bool:
    return reward is not None and abs(reward - 1.0) < 1e-6
