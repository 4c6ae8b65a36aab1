"""`OpenEnvDomain` / `OpenEnvEnvironment`: an OpenEnv environment, run in process, behind trace-rl's Domain protocol.

The mapping (docs/formats.md, "OpenEnv"):
- Tasks: one per seed; `train` seeds 0..n_train-1, `test` seeds test_offset..test_offset+n_test-1 (disjoint); fresh
  seeds from fresh_offset on feed capability environments (`target_reseed`). An
  episode calls the environment's `reset(seed=<task seed>)` on a fresh instance; the reset observation is the first
  user message (its one text field, else its fields as JSON).
- Tools: an MCP environment's own tools (`ListToolsAction`; a call is a `CallToolAction`, the result's text the tool
  message). Any other environment gets one tool, `act`, whose parameters are its Action class's fields; a call is
  one `step(Action(**arguments))` and the observation (as above) is the tool message. Arguments the Action rejects
  are a tool error, not a step. After `done`, further calls are tool errors.
- The agent's text is its final answer: the (scripted) user ends the episode on it (trace-rl's USER_STOP).
- Reward: the episode's return (the sum of step rewards; option `reward: last` takes the last one) in units of the
  success threshold, capped at 1: `reward = min(return / success_threshold, 1.0)`, so trace-rl's success label
  (reward == 1) is `return >= success_threshold` (default 1.0: returns in [0, 1] pass unchanged). The raw return and
  per-step rewards are in the details. As for every trace-rl domain, an episode cut off by a limit (max steps, tool
  errors) scores 0.
"""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trace_rl.config import EnvConfig, format_validation_error
from trace_rl.envs.foreign import FinalAnswerUser, threshold_reward
from trace_rl.envs.openenv.loader import OpenEnvClasses, find_classes
from trace_rl.errors import UserError
from trace_rl.models.base import ModelClient
from trace_rl.types import Message, RewardInfo, Task, TerminationReason, ToolCall

ACT_TOOL = "act"
_OBS_SKIP = {"done", "reward", "metadata"}


class OpenEnvOptions(BaseModel):
    """`env.options` of an `openenv:` environment."""

    model_config = ConfigDict(extra="forbid")

    n_train: int = Field(32, ge=0)
    n_test: int = Field(16, ge=0)
    test_offset: int = Field(100_000, ge=0, description="First test seed; train seeds are 0..n_train-1.")
    fresh_offset: int = Field(
        1_000_000, ge=0, description="First fresh seed: capability environments re-seed from here."
    )
    success_threshold: float = Field(1.0, gt=0, description="A return at least this is a success.")
    reward: Literal["sum", "last"] = "sum"
    env_class: str | None = Field(None, description="The Environment class, where the module has several.")
    env_kwargs: dict[str, Any] = Field(default_factory=dict, description="Passed to the Environment constructor.")

    @model_validator(mode="after")
    def _disjoint(self) -> OpenEnvOptions:
        if self.n_train > self.test_offset:
            raise ValueError(f"test_offset ({self.test_offset}) must be at least n_train ({self.n_train})")
        if self.fresh_offset < self.test_offset + self.n_test:
            raise ValueError(
                f"fresh_offset ({self.fresh_offset}) must be past the test seeds (test_offset + n_test = "
                f"{self.test_offset + self.n_test})"
            )
        return self


def observation_text(obs: Any) -> str:
    """An observation as the agent reads it: its one text field, else its fields (no done/reward/metadata) as JSON."""
    fields = obs.model_dump(mode="json", exclude=_OBS_SKIP)
    if len(fields) == 1 and isinstance(next(iter(fields.values())), str):
        return str(next(iter(fields.values())))
    return json.dumps(fields, ensure_ascii=False, default=str) if fields else ""


def mcp_result_text(obs: Any) -> tuple[str, bool]:
    """A `CallToolObservation` as (text, error)."""
    if obs.error is not None:
        return f"Error: {obs.error.message}", True
    result = obs.result
    if result is None:
        return "", False
    texts = [getattr(block, "text", None) for block in getattr(result, "content", None) or []]
    text = "\n".join(t for t in texts if t is not None)
    if not text and getattr(result, "data", None) is not None:
        text = json.dumps(result.data, default=str)
    error = bool(getattr(result, "is_error", False))
    return (f"Error: {text}" if error and not text.startswith("Error") else text), error


class OpenEnvEnvironment:
    """One episode of one OpenEnv environment instance (a trace-rl `Environment`)."""

    def __init__(self, domain: OpenEnvDomain) -> None:
        self.domain = domain
        self.env: Any = None
        self.rewards: list[float] = []
        self.done = False
        self.steps = 0

    def reset(self, task: Task, seed: int | None = None) -> list[Message]:
        self.close()
        self.env = self.domain.new_env()
        self.rewards, self.done, self.steps = [], False, 0
        obs = self.env.reset(seed=int(task.metadata["seed"]))
        self._record(obs)
        text = observation_text(obs) or f"The episode has started (seed {task.metadata['seed']}). Use the tools."
        return [Message(role="user", content=text)]

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self.domain.tool_schemas

    def user_tool_schemas(self) -> list[dict[str, Any]]:
        return []

    def policy(self) -> str:
        return self.domain.system_prompt()

    def execute(self, call: ToolCall) -> Message:
        def reply(text: str, error: bool = False) -> Message:
            return Message(role="tool", content=text, tool_call_id=call.id, name=call.name, error=error)

        if self.env is None:
            raise RuntimeError("execute before reset")
        if call.parse_error is not None:
            return reply(f"Error: could not parse the arguments of '{call.name}': {call.parse_error}", True)
        if self.done:
            return reply("Error: the episode is over (done); reply with your final answer.", True)
        names = {s["function"]["name"] for s in self.domain.tool_schemas}
        if call.name not in names:
            return reply(f"Error: Tool '{call.name}' not found.", True)
        if self.domain.classes.is_mcp:
            from openenv.core.env_server.mcp_types import CallToolAction

            obs = self.env.step(CallToolAction(tool_name=call.name, arguments=call.arguments))
            self._record(obs, step=True)
            text, error = mcp_result_text(obs)
        else:
            try:
                action = self.domain.classes.action_cls.model_validate(call.arguments)  # type: ignore[union-attr]
            except ValidationError as exc:
                return reply(f"Error: invalid action: {format_validation_error(exc, 'act')}", True)
            try:
                obs = self.env.step(action)
            except Exception as exc:  # the environment refused the action: the episode's data, not a crash
                return reply(f"Error: the environment raised {type(exc).__name__}: {exc}", True)
            self._record(obs, step=True)
            text, error = observation_text(obs), False
        if self.done:
            text = f"{text}\n[done: the episode is over]" if text else "[done: the episode is over]"
        return reply(text, error)

    def state_hash(self) -> str:
        if self.env is None:
            return ""
        try:
            state = self.env.state.model_dump_json()
        except Exception:  # an environment whose state is not serializable: its reward trail stands in
            state = repr(self.rewards)
        return hashlib.sha256(state.encode()).hexdigest()

    async def score(
        self, task: Task, messages: list[Message], termination: TerminationReason, judge: ModelClient | None = None
    ) -> RewardInfo:
        options = self.domain.options
        rewards = self.rewards
        total = (rewards[-1] if rewards else 0.0) if options.reward == "last" else float(sum(rewards, 0.0))
        self.close()
        details = {"return": total, "rewards": list(rewards), "steps": self.steps, "done": self.done}
        return threshold_reward(total, options.success_threshold, termination, details)

    def close(self) -> None:
        if self.env is not None:
            try:
                self.env.close()
            finally:
                self.env = None

    def _record(self, obs: Any, *, step: bool = False) -> None:
        if step:
            self.steps += 1
            self.rewards.append(float(obs.reward or 0.0))
        elif obs.reward:  # a reset that already pays (rare) counts toward the return
            self.rewards.append(float(obs.reward))
        self.done = self.done or bool(obs.done)


class OpenEnvDomain:
    """Tasks by seed over one OpenEnv environment class."""

    prompt_lists_tools = False

    def __init__(self, rest: str, cfg: EnvConfig) -> None:
        try:
            self.options = OpenEnvOptions.model_validate(cfg.options)
        except ValidationError as exc:
            raise UserError(format_validation_error(exc, "env.options (openenv)")) from None
        self.classes: OpenEnvClasses = find_classes(rest, self.options.env_class)
        self.name = f"openenv:{rest}"
        probe = self.new_env()  # fails here, once, on an environment that cannot be built
        try:
            self.description = self.classes.description or _metadata_description(probe)
            self.tool_schemas: list[dict[str, Any]] = self._tools(probe)
        finally:
            probe.close()

    def new_env(self) -> Any:
        try:
            return self.classes.env_cls(**self.options.env_kwargs)
        except Exception as exc:
            raise UserError(f"{self.name}: building {self.classes.env_cls.__name__} failed: {exc}") from None

    def _tools(self, env: Any) -> list[dict[str, Any]]:
        if self.classes.is_mcp:
            from openenv.core.env_server.mcp_types import ListToolsAction

            listed = env.step(ListToolsAction())
            if listed.metadata.get("error"):
                raise UserError(f"{self.name}: listing the MCP tools failed: {listed.metadata['error']}")
            return [_function(t.name, t.description, t.input_schema) for t in listed.tools]
        action_cls = self.classes.action_cls
        assert action_cls is not None
        schema = action_cls.model_json_schema()
        schema.get("properties", {}).pop("metadata", None)
        if "required" in schema:
            schema["required"] = [r for r in schema["required"] if r != "metadata"]
        schema.pop("title", None)
        doc = (action_cls.__doc__ or "").strip().split("\n\n")[0]
        return [_function(ACT_TOOL, f"Take one action in the environment. {doc}".strip(), schema)]

    # -- Domain protocol --------------------------------------------------------------------------------------------
    def splits(self) -> list[str]:
        return ["train", "test"]

    @cached_property
    def _tasks(self) -> dict[str, list[Task]]:
        o = self.options
        seeds = {"train": range(o.n_train), "test": range(o.test_offset, o.test_offset + o.n_test)}
        return {split: [self._task(split, s) for s in seeds[split]] for split in seeds}

    def _task(self, split: str, seed: int) -> Task:
        return Task(id=f"{self.classes.name}-{seed}", metadata={"seed": seed, "split": split, "env": self.name})

    def tasks(self, split: str) -> list[Task]:
        if split not in self.splits():
            raise UserError(f"{self.name} has no split '{split}' (splits: train, test)")
        return list(self._tasks[split])

    def fresh_count(self) -> None:
        return None  # seeds are unbounded

    def fresh_task(self, index: int) -> Task:
        """Seed `fresh_offset + index`: past every train and test seed."""
        return self._task("fresh", self.options.fresh_offset + int(index))

    def make_env(self) -> OpenEnvEnvironment:
        return OpenEnvEnvironment(self)

    def system_prompt(self) -> str:
        about = f" {self.description}" if self.description else ""
        how = "call the tools" if self.classes.is_mcp else f"call the `{ACT_TOOL}` tool, one action per call"
        return (
            f"You are an agent in the OpenEnv environment '{self.classes.name}'.{about}\n"
            f"To act, {how}; each result is the environment's observation. "
            "When you are finished, reply with your final answer as text: that ends the episode."
        )

    def scripted_user(self, task: Task) -> FinalAnswerUser:
        return FinalAnswerUser("openenv-stop")

    def __repr__(self) -> str:
        return f"OpenEnvDomain({self.name!r})"


def _function(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    params = parameters or {"type": "object", "properties": {}}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


def _metadata_description(env: Any) -> str:
    try:
        meta = env.get_metadata()
    except Exception:
        return ""
    text = str(getattr(meta, "description", "") or "")
    return "" if text == f"{type(env).__name__} environment" else text  # OpenEnv's placeholder says nothing


__all__ = ["ACT_TOOL", "OpenEnvDomain", "OpenEnvEnvironment", "OpenEnvOptions", "observation_text"]
