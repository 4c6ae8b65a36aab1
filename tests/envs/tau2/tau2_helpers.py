"""Shared helpers for the τ² tests: data location (skip when absent), cached domains, scripted episodes."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest

from trace_rl.config import EnvConfig
from trace_rl.envs.base import ToolkitEnvironment
from trace_rl.envs.tau2 import Tau2Domain, load_domain
from trace_rl.testing.playback import call, gold_messages, run_scripted, say
from trace_rl.types import Action, Message, Task, ToolCall, Trajectory

REPO = Path(__file__).resolve().parents[3]


def find_data_dir() -> Path | None:
    """TRACE_TAU2_DATA when set (and only it), else ../shared/data/tau2 next to the repository."""
    env = os.environ.get("TRACE_TAU2_DATA")
    candidates = [Path(env)] if env else [REPO.parent / "shared" / "data" / "tau2"]
    for path in candidates:
        if (path / "retail" / "db.json").is_file():
            return path.resolve()
    return None


DATA = find_data_dir()
needs_data = pytest.mark.skipif(
    DATA is None, reason="τ² data not found: set TRACE_TAU2_DATA or provide ../shared/data/tau2 next to the repo"
)


@functools.cache
def domain(
    name: str, task_set: str = "head", quirks: tuple[tuple[str, bool], ...] = (), basis: tuple[str, ...] | None = None
) -> Tau2Domain:
    cfg = EnvConfig(
        name=f"tau2:{name}",
        data_dir=DATA,
        task_set=task_set,  # type: ignore[arg-type]
        quirks=dict(quirks),
        reward_basis=list(basis) if basis is not None else None,
    )
    return load_domain(name, cfg)


@functools.cache
def _tasks_by_id(name: str, task_set: str) -> dict[str, Task]:
    return {t.id: t for t in domain(name, task_set).tasks("base")}


def task(name: str, task_id: str, task_set: str = "head") -> Task:
    return _tasks_by_id(name, task_set)[task_id]


def act(action: Action, **overrides: Any) -> Message:
    """A gold action as an assistant tool call, with some arguments replaced."""
    args = {**action.arguments, **overrides}
    return Message(
        role="assistant", tool_calls=[ToolCall(id=f"c_{action.action_id}", name=action.name, arguments=args)]
    )


def gold_calls(t: Task) -> list[Message]:
    """Every gold action of the task as an assistant tool call, in order."""
    actions = (t.evaluation_criteria.actions if t.evaluation_criteria else None) or []
    return [act(a) for a in actions]


def actions_named(t: Task, name: str) -> list[Action]:
    return [a for a in (t.evaluation_criteria.actions or []) if a.name == name]  # type: ignore[union-attr]


class Episode:
    """A scripted episode and the environment it ran in (for DB inspection)."""

    def __init__(self, dom: Tau2Domain, t: Task, agent: list[Message], user: list[str | Message] | None = None):
        self.env: ToolkitEnvironment = dom.make_env()
        self.traj: Trajectory = run_scripted(self.env, t, agent, user, env_name=dom.name)

    @property
    def reward(self) -> float:
        assert self.traj.reward is not None
        return self.traj.reward

    @property
    def db(self) -> float:
        assert self.traj.reward_info is not None
        return self.traj.reward_info.breakdown["DB"]

    def breakdown(self) -> dict[str, float]:
        assert self.traj.reward_info is not None
        return self.traj.reward_info.breakdown

    def tool_results(self) -> list[str]:
        return [m.content or "" for m in self.traj.messages if m.role == "tool"]


def run(name: str, task_id: str, agent: list[Message], user=None, task_set: str = "head", **kw: Any) -> Episode:
    dom = domain(name, task_set, **kw)
    return Episode(dom, task(name, task_id, task_set), agent, user)


__all__ = [
    "DATA",
    "Episode",
    "act",
    "actions_named",
    "call",
    "domain",
    "gold_calls",
    "gold_messages",
    "needs_data",
    "run",
    "say",
    "task",
]
