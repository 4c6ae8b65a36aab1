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

from trace_rl.engine.token_driver import EpisodeSource

if TYPE_CHECKING:
    from trace_rl.config.train import TrainConfig


@runtime_checkable
class TrainEnv(EpisodeSource, Protocol):
    """A capability environment to train on: what the token driver runs episodes of (`EpisodeSource`: tasks by seed,
    environments, system prompts, users, scoring), plus a name and whether it has a hint.

    Optional: `example_messages(task)` (worked-example turns after the system prompt) and `agent_tools(env)` (the
    schemas to render; None when the prompt lists the tools), so training sees the prompt the agent is deployed with.
    """

    name: str

    def has_hint(self) -> bool:
        """Whether `system_prompt(hinted=True)` differs from the base prompt."""
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
