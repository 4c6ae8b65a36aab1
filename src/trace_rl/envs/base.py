"""The Environment and Domain protocols, and the toolkit-backed environment every built-in domain uses.

A `Domain` is a task source plus an environment factory (τ² retail, the library desk, a synthesized environment).
An `Environment` is one episode's private world: reset from a task, tools the agent sees, policy text, tool execution
against private state, a canonical state hash, and scoring of the finished episode (τ²-bench semantics, evaluator.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from trace_rl.envs.toolkit import DB, ToolKit
from trace_rl.types import Message, RewardInfo, Task, TerminationReason, ToolCall

if TYPE_CHECKING:
    from trace_rl.envs.users import UserSimulator
    from trace_rl.models.base import ModelClient


@runtime_checkable
class Environment(Protocol):
    """One episode's world."""

    def reset(self, task: Task, seed: int | None = None) -> list[Message]:
        """Start an episode; returns the initial message history (usually empty)."""
        ...

    def tool_schemas(self) -> list[dict[str, Any]]: ...

    def user_tool_schemas(self) -> list[dict[str, Any]]: ...

    def policy(self) -> str: ...

    def execute(self, call: ToolCall) -> Message: ...

    def state_hash(self) -> str: ...

    async def score(
        self, task: Task, messages: list[Message], termination: TerminationReason, judge: ModelClient | None = None
    ) -> RewardInfo: ...


@runtime_checkable
class Domain(Protocol):
    """A named task source with an environment factory."""

    name: str

    def splits(self) -> list[str]: ...

    def tasks(self, split: str) -> list[Task]: ...

    def make_env(self) -> Environment: ...

    def system_prompt(self) -> str:
        """The agent's system prompt (policy included); recorded with every run."""
        ...

    def scripted_user(self, task: Task) -> UserSimulator | None:
        """A deterministic user for this task, where the domain has one."""
        ...


@runtime_checkable
class ReseedableDomain(Protocol):
    """A domain that can hand out tasks outside its train and test splits (an imported environment's fresh seeds or
    unused rows): the `target_reseed` generator builds capability environments from them."""

    name: str

    def fresh_count(self) -> int | None:
        """How many fresh tasks there are (None: unbounded)."""
        ...

    def fresh_task(self, index: int) -> Task:
        """Fresh task `index` (0 ≤ index < fresh_count()), disjoint from every train and test task."""
        ...


class ToolkitEnvironment:
    """An Environment over an agent toolkit (and optionally a user toolkit) built from pristine DBs.

    Each episode deep-copies the pristine DB, so concurrent episodes share nothing. Subclasses or domains pass
    `schemas` to show the agent exact upstream schemas instead of generated ones.
    """

    def __init__(
        self,
        *,
        toolkit_cls: type[ToolKit],
        db: DB,
        policy: str,
        user_toolkit_cls: type[ToolKit] | None = None,
        user_db: DB | None = None,
        schemas: list[dict[str, Any]] | None = None,
        user_schemas: list[dict[str, Any]] | None = None,
        hidden_tools: frozenset[str] = frozenset(),
        reward_basis_override: list[str] | None = None,
        toolkit_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self._toolkit_cls = toolkit_cls
        self._user_toolkit_cls = user_toolkit_cls
        self._pristine_db = db
        self._pristine_user_db = user_db
        self._policy = policy
        self._schemas = schemas
        self._user_schemas = user_schemas
        self.hidden_tools = hidden_tools
        self.reward_basis_override = reward_basis_override
        self.toolkit_kwargs = dict(toolkit_kwargs or {})
        self.tools: ToolKit
        self.user_tools: ToolKit | None
        self._new_toolkits()

    # -- construction -------------------------------------------------------------------------------------------
    def pristine_dbs(self, task: Task | None) -> tuple[DB, DB | None]:
        """The DBs an episode of `task` starts from; domains with per-task worlds override this."""
        return self._pristine_db, self._pristine_user_db

    def _new_toolkits(self, task: Task | None = None) -> None:
        db, user_db = self.pristine_dbs(task)
        self.tools = self._toolkit_cls(copy.deepcopy(db), **self.toolkit_kwargs)
        self.user_tools = self._user_toolkit_cls(copy.deepcopy(user_db)) if self._user_toolkit_cls is not None else None

    def fresh(self) -> ToolkitEnvironment:
        """A new environment on pristine copies of the DBs, sharing every setting (schemas, quirks)."""
        new = copy.copy(self)
        new._new_toolkits()
        return new

    # -- Environment protocol ----------------------------------------------------------------------------------
    def reset(self, task: Task, seed: int | None = None) -> list[Message]:
        from trace_rl.envs.state import apply_initial_state

        self._new_toolkits(task)
        return apply_initial_state(self, task)

    def tool_schemas(self) -> list[dict[str, Any]]:
        schemas = self._schemas if self._schemas is not None else self.tools.schemas()
        return [s for s in schemas if s["function"]["name"] not in self.hidden_tools]

    def user_tool_schemas(self) -> list[dict[str, Any]]:
        if self.user_tools is None:
            return []
        return self._user_schemas if self._user_schemas is not None else self.user_tools.schemas()

    def policy(self) -> str:
        return self._policy

    def toolkit_for(self, requestor: str) -> ToolKit | None:
        return self.user_tools if requestor == "user" else self.tools

    def execute(self, call: ToolCall) -> Message:
        kit = self.toolkit_for(call.requestor)
        if kit is None or (call.requestor == "assistant" and call.name in self.hidden_tools):
            return Message(
                role="tool",
                content=f"Error: Tool '{call.name}' not found.",
                tool_call_id=call.id,
                name=call.name,
                error=True,
            )
        return kit.execute(call)

    def state_hash(self) -> str:
        user = self.user_tools.db.get_hash() if self.user_tools is not None and self.user_tools.db else ""
        return f"{self.tools.db.get_hash() if self.tools.db else ''}:{user}"

    async def score(
        self, task: Task, messages: list[Message], termination: TerminationReason, judge: ModelClient | None = None
    ) -> RewardInfo:
        from trace_rl.envs.evaluator import evaluate

        return await evaluate(self, task, messages, termination, judge=judge)


EnvFactory = Callable[[], ToolkitEnvironment]
