"""The two narrow contracts of stage 3: what an environment must offer to be trained on, and what a trainer must do.

`TrainEnv` is a capability environment (TRACE Definition of an agentic environment `E = (X_E, P_E, R_E, y_E)`): a seeded
task generator (X_E), an environment and a user for the interaction (P_E), and a scorer returning the shaped reward R_E
and the binary success label y_E. Every method takes the task, so a uniform mix of several environments (the paper's
multi-capability baseline) is itself a `TrainEnv` (`envs.MixTrainEnv`).

Optional attributes the trainer uses when an environment has them: `agent_tools(env)` (tool schemas to render; default
`env.tool_schemas()`), `hint_fraction` (its own share of hinted rollouts, used when the config sets none),
`hint_prefix(task)` (forced opening tokens of hinted episodes), `train_seeds` / `test_seeds` (its splits: dataset rows
and held-out evaluation), `resample_seed_start` (where re-sampled seeds come from).

`TrainerBackend` trains one adapter on one `TrainEnv` and returns an `AdapterResult`; TRL's GRPOTrainer is the first
implementation (`trl_backend.py`). verl / SkyRL / Tinker-style engines can be added behind the same call.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from trace_rl.types import Message, Task, TerminationReason

if TYPE_CHECKING:
    from trace_rl.envs.base import Environment
    from trace_rl.envs.users import UserSimulator
    from trace_rl.config.train import TrainConfig


class EpisodeScore(BaseModel):
    """How a finished training episode scored: the shaped reward used for advantages and the binary outcome."""

    shaped: float = Field(description="Reward R_E(x, τ) fed to GRPO (may be shaped / partial credit).")
    success: bool = Field(description="Success label y_E(x, τ); groups are filtered on it.")
    breakdown: dict[str, float] = Field(default_factory=dict)


@runtime_checkable
class TrainEnv(Protocol):
    """A capability environment to train on.

    Optional: `example_messages(task)` (worked-example turns after the system prompt) and `agent_tools(env)` (the
    schemas to render; None when the prompt lists the tools), so training sees the prompt the agent is deployed with.
    """

    name: str

    def make_task(self, seed: int) -> Task:
        """The task of a seed; the same seed always gives the same task and initial state."""
        ...

    def make_env(self, task: Task) -> Environment:
        """A fresh environment for one episode of `task` (reset is called by the episode loop)."""
        ...

    def system_prompt(self, task: Task, *, hinted: bool = False) -> str:
        """The agent's system prompt; with `hinted`, the hinted variant (the base prompt when there is none)."""
        ...

    def has_hint(self) -> bool:
        """Whether `system_prompt(hinted=True)` differs from the base prompt."""
        ...

    def scripted_user(self, task: Task) -> UserSimulator:
        """A fresh user simulator for one episode of `task`."""
        ...

    async def score(
        self, env: Environment, task: Task, messages: list[Message], termination: TerminationReason
    ) -> EpisodeScore:
        """Score a finished episode on its live environment."""
        ...


class AdapterResult(BaseModel):
    """What training one capability produced."""

    capability: str
    adapter_dir: Path
    steps: int = 0
    skipped: bool = Field(False, description="The adapter was already finished; nothing was trained.")
    resumed_from: str | None = None
    wall_s: float = 0.0
    eval_before: dict[str, Any] | None = None
    eval_after: dict[str, Any] | None = None
    summary: dict[str, Any] = Field(default_factory=dict)


@runtime_checkable
class TrainerBackend(Protocol):
    """A training engine: one LoRA adapter for one environment."""

    name: str

    def train(self, env: TrainEnv, cfg: TrainConfig, *, adapter_dir: Path, work_dir: Path) -> AdapterResult:
        """Train (resuming from the newest checkpoint in `work_dir`) and write a PEFT adapter to `adapter_dir`."""
        ...
