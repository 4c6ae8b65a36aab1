"""A trace-rl environment as an OpenEnv environment: `TraceRLEnvironment`, an `openenv` `Environment` over an
`EpisodeSession`, its action / observation / state types, and `TraceRLClient`, the `EnvClient` that speaks to it.

An exported package (`openenv_export.py`) subclasses these in a few lines and points them at its `source.json`
(a `SourceRef`) and `episode.json` (the episode limits), so the logic lives, and is tested, here.

- `reset(seed=None)`: the task of `seed` (default: the source's first train seed). The observation carries the
  OpenAI-format messages the agent sees (system prompt, worked examples, the conversation so far) and the tools.
- `step(TraceRLAction)`: the agent's assistant message (text, or OpenAI `tool_calls`); the observation carries the new
  messages after the agent's turn, `done`, and `reward` = trace-rl's shaped training reward once the episode is over
  (0.0 before); success, termination, breakdown, task id and seed are fields of the observation and also in its
  `metadata`.
- Departures: OpenEnv's HTTP serializer drops an observation's `metadata`, so everything in it is also a field; a
  step after the episode ended raises (OpenEnv reports it as an error) instead of returning a terminal observation
  again; `reset` takes no other options (no episode_id reuse: a fresh id per reset).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any
from uuid import uuid4

from openenv.core import EnvClient
from openenv.core.client_types import StepResult
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field

from trace_rl.engine.episode import EpisodeLimits
from trace_rl.engine.token_driver import EpisodeSource
from trace_rl.errors import UserError
from trace_rl.interop.session import EpisodeSession, SessionState
from trace_rl.interop.sources import SourceRef

SOURCE_FILE = "source.json"
EPISODE_FILE = "episode.json"


class TraceRLAction(Action):
    """The agent's turn: an assistant message in OpenAI chat format (text, or tool calls)."""

    content: str | None = Field(None, description="Assistant text (raw model text: <tool_call> tags are parsed).")
    tool_calls: list[dict[str, Any]] = Field(
        default_factory=list,
        description="OpenAI tool calls: {id, type: function, function: {name, arguments (JSON text or object)}}.",
    )


class TraceRLObservation(Observation):
    """What the agent sees after reset or step, and the outcome once `done`."""

    task_id: str = Field("", description="The task the seed selected.")
    seed: int = Field(0, description="The episode's seed.")
    messages: list[dict[str, Any]] = Field(default_factory=list, description="The agent's prompt, OpenAI format.")
    new_messages: list[dict[str, Any]] = Field(default_factory=list, description="What the last step added.")
    tools: list[dict[str, Any]] = Field(default_factory=list, description="OpenAI tool schemas (empty if listed).")
    success: bool = Field(False, description="trace-rl's success label (once done).")
    termination: str | None = Field(None, description="Why the episode ended (trace-rl TerminationReason).")
    breakdown: dict[str, float] = Field(default_factory=dict, description="Reward components (once done).")


class TraceRLState(State):
    """The episode's identity and outcome so far."""

    task_id: str = ""
    seed: int = 0
    done: bool = False
    reward: float = 0.0
    termination: str | None = None


@lru_cache(maxsize=16)
def _package_source(root: str) -> tuple[SourceRef, EpisodeSource, int]:
    """The package's source (loaded once per process) and its default seed."""
    folder = Path(root)
    path = folder / SOURCE_FILE
    if not path.is_file():
        raise UserError(f"{folder} is not an exported trace-rl environment (no {SOURCE_FILE})")
    ref = SourceRef.model_validate_json(path.read_text(encoding="utf-8"))
    source = ref.load(folder)
    seeds = ref.seeds(folder).get("train") or [0]
    return ref, source, int(seeds[0])


def package_limits(root: Path) -> EpisodeLimits:
    path = Path(root) / EPISODE_FILE
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    return EpisodeLimits(max_steps=int(data.get("max_steps", 50)), max_errors=int(data.get("max_errors", 10)))


def observation(state: SessionState, *, initial: bool) -> TraceRLObservation:
    """`state` as an OpenEnv observation; the reward is 0.0 until the episode is over."""
    outcome = {
        "task_id": state.task_id,
        "seed": state.seed,
        "success": state.success,
        "termination": state.termination,
        "breakdown": dict(state.breakdown),
    }
    return TraceRLObservation(
        messages=state.messages,
        new_messages=[] if initial else state.new_messages,
        tools=state.tools,
        done=state.done,
        reward=state.reward if state.done else 0.0,
        metadata=dict(outcome),
        **outcome,
    )


class TraceRLEnvironment(Environment[TraceRLAction, TraceRLObservation, TraceRLState]):
    """One trace-rl episode at a time, OpenEnv-style. Give a `source` (an `EpisodeSource`), or subclass and set
    `PACKAGE_ROOT` to a folder holding `source.json` (what an exported package does)."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # every instance has its own EpisodeSession; sources share no episode state
    PACKAGE_ROOT: Path | None = None
    ENV_NAME = "trace-rl"

    def __init__(
        self,
        source: EpisodeSource | None = None,
        *,
        default_seed: int | None = None,
        limits: EpisodeLimits | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__()
        if source is None:
            if self.PACKAGE_ROOT is None:
                raise UserError("TraceRLEnvironment needs a source (or a subclass with PACKAGE_ROOT)")
            ref, source, first = _package_source(str(Path(self.PACKAGE_ROOT).resolve()))
            default_seed = first if default_seed is None else default_seed
            limits = limits or package_limits(self.PACKAGE_ROOT)
            name = name or ref.name
        self.name = name or getattr(source, "name", self.ENV_NAME)
        self.default_seed = 0 if default_seed is None else int(default_seed)
        self.session = EpisodeSession(source, limits=limits)
        self._state = TraceRLState(episode_id=None, step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> TraceRLObservation:
        state = self.session.reset(self.default_seed if seed is None else int(seed))
        self._state = TraceRLState(
            episode_id=episode_id or str(uuid4()), step_count=0, task_id=state.task_id, seed=state.seed
        )
        self._record(state)
        return observation(state, initial=True)

    def step(self, action: TraceRLAction, timeout_s: float | None = None, **kwargs: Any) -> TraceRLObservation:
        if not isinstance(action, TraceRLAction):
            action = TraceRLAction.model_validate(action)
        message: dict[str, Any] = {"role": "assistant", "content": action.content, "tool_calls": action.tool_calls}
        state = self.session.step(message)
        self._state.step_count += 1
        self._record(state)
        return observation(state, initial=False)

    @property
    def state(self) -> TraceRLState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name=self.name,
            description=f"trace-rl environment '{self.name}': a tool-using conversation scored by trace-rl",
            version="1.0.0",
        )

    def _record(self, state: SessionState) -> None:
        self._state.done = state.done
        self._state.reward = state.reward if state.done else 0.0
        self._state.termination = state.termination


class TraceRLClient(EnvClient[TraceRLAction, TraceRLObservation, TraceRLState]):
    """The `EnvClient` of a `TraceRLEnvironment` server (persistent WebSocket session)."""

    def _step_payload(self, action: TraceRLAction) -> dict[str, Any]:
        return action.model_dump(exclude={"metadata"}, exclude_none=True)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[TraceRLObservation]:
        return parse_result(payload)

    def _parse_state(self, payload: dict[str, Any]) -> TraceRLState:
        return TraceRLState.model_validate(payload)


def parse_result(payload: dict[str, Any]) -> StepResult[TraceRLObservation]:
    """A server response (`{observation, reward, done}`) as a typed step result."""
    fields = dict(payload.get("observation") or {})
    done, reward = bool(payload.get("done", False)), payload.get("reward")
    obs = TraceRLObservation(done=done, reward=reward, **fields)
    obs.metadata = {k: fields[k] for k in ("task_id", "seed", "success", "termination", "breakdown") if k in fields}
    return StepResult(observation=obs, reward=reward, done=done)


__all__ = [
    "EPISODE_FILE",
    "SOURCE_FILE",
    "TraceRLAction",
    "TraceRLClient",
    "TraceRLEnvironment",
    "TraceRLObservation",
    "TraceRLState",
    "observation",
    "package_limits",
    "parse_result",
]
