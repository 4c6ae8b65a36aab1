"""`trace-rl env check`: replay every task's gold actions and compare the DB with the evaluator's gold DB.

A task matches when the environment, after executing the gold actions as an agent would, scores DB = 1. This checks
the engine (tools, initial state, hashing) against the task files, as upstream's gold replay does. A domain with
its own measure provides `reference_check(task) -> (ok, tool errors)` and `check_measure` (toolsandbox: a reference
path reaches similarity 1.0).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trace_rl.envs.base import Domain
from trace_rl.envs.evaluator import db_check
from trace_rl.types import Task, ToolCall


@dataclass
class GoldReplayResult:
    matched: int = 0
    total: int = 0
    mismatched: list[str] = field(default_factory=list)
    gold_errors: dict[str, list[str]] = field(default_factory=dict)
    measure: str = "db-match"

    @property
    def line(self) -> str:
        return f"gold-replay: {self.matched}/{self.total} {self.measure}"


def replay_gold(domain: Domain, task: Task) -> tuple[bool, list[str]]:
    reference_check = getattr(domain, "reference_check", None)
    if reference_check is not None:  # a domain with its own measure (toolsandbox: a reference path scores 1.0)
        return reference_check(task)
    env = domain.make_env()
    env.reset(task)
    errors: list[str] = []
    for i, action in enumerate((task.evaluation_criteria.actions if task.evaluation_criteria else None) or []):
        result = env.execute(
            ToolCall(id=f"g{i}", name=action.name, arguments=action.arguments, requestor=action.requestor)
        )
        if result.error:
            errors.append(f"{action.name}: {result.content}")
    score, _ = db_check(env, task)  # type: ignore[arg-type]
    return score == 1.0, errors


def check_domain(domain: Domain, splits: list[str]) -> GoldReplayResult:
    result = GoldReplayResult(measure=getattr(domain, "check_measure", "db-match"))
    seen: set[str] = set()
    for split in splits:
        for task in domain.tasks(split):
            if task.id in seen:
                continue
            seen.add(task.id)
            ok, errors = replay_gold(domain, task)
            result.total += 1
            result.matched += ok
            if not ok:
                result.mismatched.append(task.id)
            if errors:
                result.gold_errors[task.id] = errors
    return result


__all__ = ["GoldReplayResult", "check_domain", "replay_gold"]
