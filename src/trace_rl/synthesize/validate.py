"""Validation of a capability environment before calibration.

For each validation seed: the task is generated; its gold actions replay without a tool error; a task with a
write changes the DB (one without leaves it unchanged); the gold solution, played as a trajectory, scores shaped
reward 1 and success; and the same trajectory with the capability's step removed (`ablate`) scores lower
(Definition 2: exercising the capability is necessary). The share of tasks passing that last test is the
environment's capability sensitivity. A decision task (`library_decisions`) plays its history and then its right
move, or a move that skips the capability, in place of the whole gold solution.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
from dataclasses import dataclass, field
from typing import Any

from trace_rl.engine.episode import GREETING
from trace_rl.envs.base import ToolkitEnvironment
from trace_rl.envs.synthetic.environment import CapabilityEnvironment
from trace_rl.envs.toolkit import ToolType
from trace_rl.envs.users import STOP_TOKENS
from trace_rl.synthesize.design import primary_check
from trace_rl.types import Action, Message, Task, TerminationReason, ToolCall


def opening_line(cap_env: CapabilityEnvironment, task: Task) -> str:
    user = cap_env.scripted_user(task)
    respond = getattr(user, "respond", None)
    if callable(respond):
        return str(respond([Message(role="assistant", content=GREETING)]))
    return "Hi."


def play(
    env: ToolkitEnvironment, task: Task, actions: list[Action], *, opening: str, final: str
) -> tuple[list[Message], list[str]]:
    """A trajectory that runs `actions` as the agent's tool calls (results from a fresh environment), then says
    `final` and lets the user stop. Returns the messages and the tool errors."""
    live = env.fresh()
    messages = list(live.reset(task)) or [Message(role="assistant", content=GREETING)]
    messages.append(Message(role="user", content=opening))
    errors = []
    for i, action in enumerate(actions):
        call = ToolCall(id=f"v{i}", name=action.name, arguments=copy.deepcopy(action.arguments))
        messages.append(Message(role="assistant", tool_calls=[call]))
        result = live.execute(call)
        messages.append(result)
        if result.error:
            errors.append(f"{action.name}: {result.content}")
    messages.append(Message(role="assistant", content=final))
    messages.append(Message(role="user", content="###STOP###"))
    return messages, errors


def final_text(task: Task) -> str:
    info = (task.evaluation_criteria.communicate_info if task.evaluation_criteria else None) or []
    return ("All done. " + " ".join(f"{v}." for v in info)).strip()


def _kinds(env: ToolkitEnvironment, actions: list[Action]) -> list[ToolType | None]:
    return [env.tools.tool_type(a.name) for a in actions]


def _corrupt(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value[:-1] + ("9" if not value.endswith("9") else "8") if value else "x"
    if isinstance(value, list) and value:
        return [_corrupt(value[0]), *value[1:]]
    return value


def ablate(kind: str, env: ToolkitEnvironment, task: Task) -> tuple[list[Action], str] | None:
    """The gold actions and final message with the capability's step removed, or None when the task has none."""
    actions = list((task.evaluation_criteria.actions if task.evaluation_criteria else None) or [])
    kinds = _kinds(env, actions)
    final = final_text(task)
    steps = set(task.metadata.get("capability_steps") or [])
    if kind in ("verify_before_act", "grounded_arguments"):
        first_write = next((i for i, k in enumerate(kinds) if k == ToolType.WRITE), len(actions))
        reads = [i for i, k in enumerate(kinds[:first_write]) if k == ToolType.READ]
        reads = [i for i in reads if i in steps] or reads if steps else reads
        if not reads:
            return None
        return [a for i, a in enumerate(actions) if i not in reads], final
    if kind == "write_coverage":
        writes = [i for i, k in enumerate(kinds) if k == ToolType.WRITE]
        if not writes:
            return None
        return [a for i, a in enumerate(actions) if i != writes[-1]], final
    if kind == "communicate":
        info = (task.evaluation_criteria.communicate_info if task.evaluation_criteria else None) or []
        return (actions, "All done.") if info else None
    # exact_arguments: corrupt one argument of the key call (the last write, else the last read)
    writes = [i for i, k in enumerate(kinds) if k == ToolType.WRITE]
    reads = [i for i, k in enumerate(kinds) if k == ToolType.READ]
    key = (writes or reads or [None])[-1]
    if key is None or not actions[key].arguments:
        return None
    target = actions[key]
    name = sorted(target.arguments)[0]
    changed = target.model_copy(update={"arguments": {**target.arguments, name: _corrupt(target.arguments[name])}})
    return [changed if i == key else a for i, a in enumerate(actions)], final


@dataclass
class TaskCheck:
    seed: int
    task_id: str
    ok: bool
    problems: list[str] = field(default_factory=list)
    gold_reward: float | None = None
    ablated_reward: float | None = None
    sensitive: bool | None = None


@dataclass
class ValidationReport:
    checks: list[TaskCheck] = field(default_factory=list)
    min_sensitivity: float = 0.9

    @property
    def valid(self) -> list[TaskCheck]:
        return [c for c in self.checks if c.ok]

    @property
    def sensitivity(self) -> float:
        judged = [c for c in self.valid if c.sensitive is not None]
        return sum(bool(c.sensitive) for c in judged) / len(judged) if judged else 0.0

    @property
    def ok(self) -> bool:
        return bool(self.checks) and len(self.valid) == len(self.checks) and self.sensitivity >= self.min_sensitivity

    def feedback(self, limit: int = 6) -> str:
        """Problems grouped by text: `seeds 0, 2: <problem>`."""
        by_problem: dict[str, list[int]] = {}
        for c in self.checks:
            for problem in c.problems:
                by_problem.setdefault(problem, []).append(c.seed)
        lines = [
            f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}: {problem}"
            for problem, seeds in list(by_problem.items())[:limit]
        ]
        if self.valid and self.sensitivity < self.min_sensitivity:
            lines.append(
                f"only {self.sensitivity:.0%} of valid tasks need the capability (removing its step does not lower "
                f"the reward); at least {self.min_sensitivity:.0%} must"
            )
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "n_tasks": len(self.checks),
            "n_valid": len(self.valid),
            "capability_sensitivity": round(self.sensitivity, 4),
            "min_sensitivity": self.min_sensitivity,
            "tasks": [c.__dict__ for c in self.checks],
        }


DO_NOTHING = "I am sorry, but I cannot assist with that."


def check_target_scored(cap_env: CapabilityEnvironment, task: Task, check: TaskCheck) -> TaskCheck:
    """A target-scored task (a whole ToolSandbox scenario, an imported target's fresh task): the target's reference
    path reaches 1.0 (`env check`'s replay), and an agent that does nothing scores lower (the task needs the agent to
    act). An imported target without reference solutions (`target_reseed`) has no path to replay: doing nothing must
    score below 1 and solvability is left to calibration (a base model that never succeeds fails its gates)."""
    reference = getattr(cap_env.target, "reference_check", None)
    if reference is None:
        if cap_env.spec.generator.kind != "target_reseed":
            check.problems.append(f"target '{cap_env.target.name}' has no reference path to validate with")
    else:
        ok, errors = reference(task)
        check.gold_reward = 1.0 if ok else 0.0
        if not ok:
            check.problems.append(f"the reference path does not reach 1.0 (tool errors: {errors[:3]})")
    env = cap_env.make_env()
    messages = [
        *env.reset(task),
        Message(role="assistant", content=DO_NOTHING),
        Message(role="user", content=STOP_TOKENS[0]),
    ]
    info = asyncio.run(env.score(task, messages, TerminationReason.USER_STOP))
    check.ablated_reward = info.reward
    ceiling = 1.0 if reference is None else (check.gold_reward or 0.0)  # no reference: the most a task can pay
    check.sensitive = info.reward < ceiling - 1e-6
    check.ok = not check.problems
    return check


def check_decision(cap_env: CapabilityEnvironment, env: ToolkitEnvironment, task: Task, check: TaskCheck) -> TaskCheck:
    """A decision task (`library_decisions`): its replayed history, then the right move, scores 1 and success; the
    same history with a move that skips the capability scores lower."""
    from trace_rl.envs.synthetic.library_decisions import Case, moves

    right, wrong = moves(Case.of(task))
    scores = []
    for played in (right, wrong):
        messages = [*env.fresh().reset(task), *played, Message(role="user", content=STOP_TOKENS[0])]
        scores.append(cap_env.rewarder.score_messages(task, messages, TerminationReason.USER_STOP))
    gold, ablated = scores
    check.gold_reward, check.ablated_reward = gold.reward, ablated.reward
    if abs(gold.reward - 1.0) > 1e-6 or not gold.success:
        check.problems.append(f"the right move scores {gold.reward:.3f} (success {gold.success}), not 1")
    check.sensitive = ablated.reward < gold.reward - 1e-6
    check.ok = not check.problems
    return check


def check_task(cap_env: CapabilityEnvironment, seed: int) -> TaskCheck:
    try:
        task = cap_env.make_task(seed)
    except Exception as exc:
        return TaskCheck(seed, "", False, [f"generation failed: {type(exc).__name__}: {exc}"])
    check = TaskCheck(seed, task.id, True)
    if cap_env.target_scored:
        try:
            return check_target_scored(cap_env, task, check)
        except Exception as exc:
            check.problems.append(f"scoring failed: {type(exc).__name__}: {exc}")
            check.ok = False
            return check
    env = cap_env.make_env()
    actions = list((task.evaluation_criteria.actions if task.evaluation_criteria else None) or [])
    if not actions:
        check.problems.append("no gold actions")
    unknown = [a.name for a in actions if env.tools.tool_type(a.name) is None]
    if unknown:
        check.problems.append(f"gold actions use unknown tools {unknown}")
    try:
        gold = cap_env.rewarder.gold(task)
        if gold.errors:
            check.problems.append(f"gold replay errors: {gold.errors[:3]}")
        pristine = env.fresh()
        pristine.reset(task)
        changed = pristine.state_hash() != gold.db_hash
        if gold.writes and not changed:
            check.problems.append("the gold writes leave the DB unchanged")
        if not gold.writes and changed:
            check.problems.append("the DB changes although no gold action writes")
        if "decision" in task.metadata:
            return check_decision(cap_env, env, task, check)
        opening = opening_line(cap_env, task)
        messages, errors = play(env, task, actions, opening=opening, final=final_text(task))
        score = cap_env.rewarder.score_messages(task, messages, TerminationReason.USER_STOP)
        check.gold_reward = score.reward
        if errors:
            check.problems.append(f"gold trajectory tool errors: {errors[:3]}")
        if abs(score.reward - 1.0) > 1e-6 or not score.success:
            check.problems.append(f"gold trajectory scores {score.reward:.3f} (success {score.success}), not 1")
        ablation = ablate(primary_check(cap_env.spec.reward), env, task)
        if ablation is not None:
            ab_actions, ab_final = ablation
            ab_messages, _ = play(env, task, ab_actions, opening=opening, final=ab_final)
            ab = cap_env.rewarder.score_messages(task, ab_messages, TerminationReason.USER_STOP)
            check.ablated_reward = ab.reward
            check.sensitive = ab.reward < score.reward - 1e-6
    except Exception as exc:
        check.problems.append(f"scoring failed: {type(exc).__name__}: {exc}")
    check.ok = not check.problems
    return check


def validate(cap_env: CapabilityEnvironment, seeds: list[int], *, min_sensitivity: float = 0.9) -> ValidationReport:
    """Check every seed (in a worker thread: target scorers and replays run their own event loop)."""
    report = ValidationReport(min_sensitivity=min_sensitivity)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="validate") as pool:
        for seed in seeds:
            report.checks.append(pool.submit(check_task, cap_env, seed).result())
    return report


__all__ = [
    "TaskCheck",
    "ValidationReport",
    "ablate",
    "check_decision",
    "check_task",
    "final_text",
    "opening_line",
    "play",
    "validate",
]
