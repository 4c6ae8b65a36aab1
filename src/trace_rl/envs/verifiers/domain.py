"""`VerifiersDomain` / `VerifiersEnvironment`: a verifiers (0.4.0) taskset, run in process, behind trace-rl's Domain.

verifiers runs an episode itself: its `Env.run` drives a harness program that calls the model through an interception
server, tools are MCP servers, and the task's `@vf.reward`s score the finished `Trace`. trace-rl's engine plays the
agent instead, so the mapping keeps the data and the scoring and replaces the driver:
- Tasks: the taskset's rows in `load()` order (verifiers' loader: `vf.load_environment` on `{"taskset": {"id": ...}}`,
  option `taskset` adds its config fields); `train` = the first n_train rows, `test` = the next n_test (disjoint),
  then up to n_fresh rows that only capability environments draw from (`target_reseed`).
  The row's prompt is the first user message (a Messages prompt keeps its user/assistant turns); the row's
  `system_prompt` is appended to the domain's system prompt for that episode's first user turn.
- Tools: the `@vf.tool` methods of the task's and the taskset's `Toolset`s, called in process (no MCP server), named as
  verifiers advertises them (`<server>_<tool>`, or bare when the server has no prefix); parameters from the signature.
- The agent's text is its final answer: the scripted user ends the episode on it (trace-rl's USER_STOP).
- Reward: the task's own scoring (`Task.score`: `@vf.metric`s, `@vf.reward`s, plugged rewards) on a `vf.Trace` whose
  message graph is the episode's conversation, with no runtime (verifiers skips runtime-dependent signals then, as it
  does offline). trace-rl's reward is the weighted sum in units of the success threshold, capped at 1:
  `min(reward / success_threshold, 1)`, so trace-rl's success (reward == 1) is `reward >= success_threshold`.
Departures: the Env's own `run()` (multi-agent, user-sim, game engines), harnesses, runtimes, `setup`/`finalize` hooks
and judges that need a model do not run; a task that needs a container is refused; an episode cut off by a limit
scores 0 (as in every trace-rl domain).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from trace_rl.aio import run_sync
from trace_rl.config import EnvConfig, format_validation_error
from trace_rl.envs.foreign import FinalAnswerUser, threshold_reward
from trace_rl.envs.users import STOP_TOKENS
from trace_rl.errors import UserError
from trace_rl.models.base import ModelClient
from trace_rl.types import Message, RewardInfo, Task, TerminationReason, ToolCall

STOP = STOP_TOKENS[0]


class VerifiersOptions(BaseModel):
    """`env.options` of a `verifiers:` environment."""

    model_config = ConfigDict(extra="forbid")

    n_train: int = Field(32, ge=0)
    n_test: int = Field(16, ge=0)
    n_fresh: int = Field(
        64, ge=0, description="Rows after train and test that capability environments may re-seed from (`fresh`)."
    )
    success_threshold: float = Field(1.0, gt=0, description="A verifiers reward at least this is a success.")
    taskset: dict[str, Any] = Field(default_factory=dict, description="Extra fields of the taskset's config.")


def _parameters(fn: Callable[..., Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = Any if param.annotation is inspect.Parameter.empty else param.annotation
        fields[name] = (annotation, ... if param.default is inspect.Parameter.empty else param.default)
    schema = create_model(f"{fn.__name__}_args", **fields).model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema


class _Tool:
    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        self.name, self.fn = name, fn
        self.schema = {
            "type": "function",
            "function": {"name": name, "description": (fn.__doc__ or "").strip(), "parameters": _parameters(fn)},
        }


class VerifiersEnvironment:
    """One episode of one verifiers task (a trace-rl `Environment`)."""

    def __init__(self, domain: VerifiersDomain) -> None:
        self.domain = domain
        self.row: Any = None
        self.tools: dict[str, _Tool] = {}
        self.calls = 0

    def reset(self, task: Task, seed: int | None = None) -> list[Message]:
        self.row = self.domain.row(task)
        self.tools = self.domain.tools_of(self.row)
        self.calls = 0
        return self.domain.opening(self.row)

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [t.schema for t in self.tools.values()]

    def user_tool_schemas(self) -> list[dict[str, Any]]:
        return []

    def policy(self) -> str:
        return self.domain.system_prompt()

    def execute(self, call: ToolCall) -> Message:
        def reply(text: str, error: bool = False) -> Message:
            return Message(role="tool", content=text, tool_call_id=call.id, name=call.name, error=error)

        if call.parse_error is not None:
            return reply(f"Error: could not parse the arguments of '{call.name}': {call.parse_error}", True)
        tool = self.tools.get(call.name)
        if tool is None:
            return reply(f"Error: Tool '{call.name}' not found.", True)
        self.calls += 1
        try:
            result = tool.fn(**call.arguments)
            if inspect.isawaitable(result):
                result = run_sync(_awaited(result))
        except Exception as exc:  # a tool that raises is the episode's data (MCP reports it as a tool error)
            return reply(f"Error: {type(exc).__name__}: {exc}", True)
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
        return reply(text)

    def state_hash(self) -> str:
        return f"{getattr(self.row, 'key', '')}:{self.calls}"

    async def score(
        self, task: Task, messages: list[Message], termination: TerminationReason, judge: ModelClient | None = None
    ) -> RewardInfo:
        import verifiers.v1 as vf

        row = self.row if self.row is not None else self.domain.row(task)
        trace = vf.Trace(
            task=vf.TraceTask(type=type(row).__name__, data=row.data, key=row.key, hash=row.hash),
            agent=vf.AgentInfo(config=vf.AgentConfig(model="trace-rl")),
        )
        kept = [m for m in messages if m.role != "system" and not (m.role == "user" and m.content == STOP)]
        trace.nodes = [
            vf.MessageNode(parent=i - 1 if i else None, message=_vf_message(m), sampled=m.role == "assistant")
            for i, m in enumerate(kept)
        ]
        await row.score(trace)
        raw = float(trace.reward)
        details = {
            "verifiers_reward": raw,
            "rewards": {k: (r.score if r is not None else None) for k, r in trace.rewards.items()},
            "metrics": dict(trace.metrics),
        }
        return threshold_reward(raw, self.domain.options.success_threshold, termination, details)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _vf_message(m: Message) -> Any:
    import verifiers.v1 as vf

    if m.role == "tool":
        return vf.ToolMessage(tool_call_id=m.tool_call_id or "", content=m.content or "", name=m.name)
    if m.role == "assistant":
        calls = [vf.ToolCall(id=c.id, name=c.name, arguments=json.dumps(c.arguments)) for c in m.tool_calls or []]
        return vf.AssistantMessage(content=m.content, tool_calls=calls or None)
    return vf.UserMessage(content=m.content or "")


class VerifiersDomain:
    """The rows of one verifiers taskset, split train/test by position."""

    prompt_lists_tools = False

    def __init__(self, rest: str, cfg: EnvConfig) -> None:
        try:
            self.options = VerifiersOptions.model_validate(cfg.options)
        except ValidationError as exc:
            raise UserError(format_validation_error(exc, "env.options (verifiers)")) from None
        if not rest:
            raise UserError("a verifiers environment needs a module: verifiers:<module>")
        self.name = f"verifiers:{rest}"
        try:
            import verifiers.v1 as vf
        except ImportError:
            raise UserError("verifiers environments need verifiers: pip install 'trace-rl[formats]'") from None
        try:
            config = vf.resolve_env_config({"taskset": {"id": rest, **self.options.taskset}})
            self.env = vf.load_environment(config)
        except ModuleNotFoundError:
            raise UserError(f"verifiers environment '{rest}' not found (no installed module of that name)") from None
        except (ValidationError, ValueError, TypeError, AttributeError) as exc:
            raise UserError(f"verifiers environment '{rest}' did not load: {str(exc).splitlines()[0]}") from None
        self.taskset = self.env.taskset
        if type(self.taskset).task_type().NEEDS_CONTAINER:
            raise UserError(f"verifiers environment '{rest}' needs a container; trace-rl runs tasks in process")
        self.shared = [self._instance(s) for s in type(self.taskset).toolsets(self.taskset.config)]

    @cached_property
    def rows(self) -> list[Any]:
        o = self.options
        rows = list(self.taskset.take(o.n_train + o.n_test + o.n_fresh))
        if not rows:
            raise UserError(f"{self.name} has no tasks")
        return rows

    @staticmethod
    def _instance(server: Any) -> Any:
        run_sync(_awaited(server.setup()))
        return server

    def row(self, task: Task) -> Any:
        return self.rows[int(task.metadata["row"])]

    def tools_of(self, row: Any) -> dict[str, _Tool]:
        from verifiers.v1.utils.decorators import discover_decorated

        servers = [*self.shared, *(self._instance(s) for s in type(row).toolsets(row.config))]
        tools: dict[str, _Tool] = {}
        for server in servers:
            run_sync(_awaited(server.setup_task(row)))
            for fn in discover_decorated(server, "tool"):
                bare = getattr(fn, "tool_name", None) or fn.__name__
                name = f"{server.server_name}_{bare}" if server.server_name else bare
                tools[name] = _Tool(name, fn)
        return tools

    def opening_messages(self, row: Any) -> list[Any]:
        """The row's prompt as verifiers messages (its system prompt folded into the first user turn)."""
        import verifiers.v1 as vf
        from verifiers.v1.types import content_text

        prompt = row.data.prompt
        messages = [vf.UserMessage(content=prompt)] if isinstance(prompt, str) else list(prompt or [])
        messages = [m for m in messages if m.role != "system"]
        if row.data.system_prompt and messages and messages[0].role == "user":
            first = messages[0]
            messages[0] = vf.UserMessage(content=f"{row.data.system_prompt}\n\n{content_text(first.content)}")
        return messages

    def opening(self, row: Any) -> list[Message]:
        out: list[Message] = []
        for m in self.opening_messages(row):
            text = m.content if isinstance(m.content, str) else "\n".join(getattr(p, "text", "") for p in m.content)
            out.append(Message(role=m.role, content=text or ""))
        return out or [Message(role="user", content="Begin.")]

    # -- Domain protocol --------------------------------------------------------------------------------------------
    def splits(self) -> list[str]:
        return ["train", "test"]

    def tasks(self, split: str) -> list[Task]:
        if split not in self.splits():
            raise UserError(f"{self.name} has no split '{split}' (splits: train, test)")
        n, rows = self.options.n_train, len(self.rows)
        span = range(min(n, rows)) if split == "train" else range(n, min(n + self.options.n_test, rows))
        return [self._task(split, i) for i in span]

    def fresh_count(self) -> int:
        """Rows past train and test that the taskset has (at most `n_fresh`)."""
        return max(0, len(self.rows) - self.options.n_train - self.options.n_test)

    def fresh_task(self, index: int) -> Task:
        count = self.fresh_count()
        if not 0 <= index < count:
            raise UserError(f"{self.name}: fresh row {index} does not exist ({count} fresh rows)")
        return self._task("fresh", self.options.n_train + self.options.n_test + int(index))

    def _task(self, split: str, i: int) -> Task:
        data = self.rows[i].data
        ident = data.id or data.name or f"{self.taskset.config.id}-{i}"
        return Task(id=str(ident), metadata={"row": i, "split": split, "seed": i, "env": self.name})

    def make_env(self) -> VerifiersEnvironment:
        return VerifiersEnvironment(self)

    def system_prompt(self) -> str:
        return (
            f"You are an agent in the verifiers environment '{self.taskset.config.id}'. Use the tools when they help; "
            "when you are finished, reply with your final answer as text: that ends the episode."
        )

    def scripted_user(self, task: Task) -> FinalAnswerUser:
        return FinalAnswerUser("verifiers-stop")

    def __repr__(self) -> str:
        return f"VerifiersDomain({self.name!r})"


__all__ = ["STOP", "VerifiersDomain", "VerifiersEnvironment", "VerifiersOptions"]
