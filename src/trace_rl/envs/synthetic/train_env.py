"""`CapabilityTrainEnv`: a capability environment behind stage 3's `TrainEnv` protocol (`trace_rl.training.protocol`).

The trainer passes the task to every call and scores on the live environment; this adapter forwards to
`CapabilityEnvironment` and takes the final DB from the live environment (no replay). `load_train_env(folder)` is
what `trace_rl.training.selection.load_synthesized_env` returns for a synthesized environment's folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trace_rl.envs.base import Environment
from trace_rl.envs.evaluator import is_success
from trace_rl.envs.synthetic.environment import CapabilityEnvironment, load_capability_env
from trace_rl.envs.users import UserSimulator
from trace_rl.types import EpisodeScore, Message, Task, TerminationReason


class CapabilityTrainEnv:
    """`TrainEnv` over one `CapabilityEnvironment`."""

    def __init__(self, env: CapabilityEnvironment) -> None:
        self.env = env
        self.name = env.name
        self.status = env.status

    @property
    def hint_fraction(self) -> float:
        return self.env.hint_fraction

    def make_task(self, seed: int) -> Task:
        return self.env.make_task(seed)

    def make_env(self, task: Task) -> Environment:
        return self.env.make_env()

    def system_prompt(self, task: Task, *, hinted: bool = False) -> str:
        return self.env.system_prompt(hinted=hinted)

    def has_hint(self) -> bool:
        return bool(self.env.spec.hint.text.strip())

    def example_messages(self, task: Task) -> list[Message]:
        """The target's worked-example turns: training sees the prompt the agent is deployed with."""
        return self.env.example_messages()

    def agent_tools(self, env: Environment) -> list[dict[str, Any]] | None:
        """No schemas when the target's prompt already lists the tools (as `domain_agent` decides)."""
        return None if self.env.prompt_lists_tools else env.tool_schemas()

    def scripted_user(self, task: Task) -> UserSimulator:
        return self.env.scripted_user(task)

    async def score(
        self, env: Environment, task: Task, messages: list[Message], termination: TerminationReason
    ) -> EpisodeScore:
        if self.env.target_scored:  # the target's own score (ToolSandbox similarity); success when it is 1
            info = await env.score(task, messages, termination)
            return EpisodeScore(shaped=info.reward, success=is_success(info.reward), breakdown=dict(info.breakdown))
        rewarder = self.env.rewarder
        db = float(env.state_hash() == rewarder.gold(task).db_hash)
        s = rewarder.score_messages(task, messages, termination, db=db)
        breakdown = {**s.components, **{f"check/{k}": v for k, v in s.checks.items()}}
        return EpisodeScore(shaped=s.reward, success=s.success, breakdown=breakdown)


def load_train_env(folder: Path) -> CapabilityTrainEnv:
    return CapabilityTrainEnv(load_capability_env(Path(folder)))


__all__ = ["CapabilityTrainEnv", "load_train_env"]
