"""The episode state machine of τ²-bench's half-duplex orchestrator, shared by both agent drivers.

`Episode` owns everything but the agent's turn: the message list, which tool calls the user made, the step count, the
error records, the termination, the next-speaker rule, the user hops and the environment hops. A driver asks it to
`advance()` (user and environment hops until the agent must speak), then `admit(AGENT)` and adds the agent's message;
the text driver (`text_driver.run_episode`) gets that message from a `ModelClient`, the token driver
(`token_driver.EpisodeRunner`) samples it as token ids. So rollout, calibration, evaluation and training run one loop.

Each step moves one hop (agent→user, agent→env, env→agent, user→agent, user→env→user). The agent opens with a fixed
greeting unless the task replays a message history. The episode ends on a user stop token (USER_STOP), `max_steps` hops
(TRACE used 50) or `max_turns` agent turns (MAX_STEPS), `max_errors` tool errors (TOO_MANY_ERRORS, 10), a wall-clock
`timeout_s` checked before every hop (TIMEOUT), an empty agent turn (AGENT_ERROR) or an empty or failing user turn
(USER_ERROR). Any termination but agent/user stop scores 0. Infrastructure failures (`InfraError`, from the user model,
the environment or the agent's model) end the episode as INFRA_ERROR and are not scored: the rollout engine retries
them. A prompt longer than the model's context is the agent's failure (AGENT_ERROR), since a retry cannot fix it.

Where the two loops this replaces disagreed, the stricter rule won, in both drivers: an exception raised by the user
simulator is a USER_ERROR record (the text loop let it escape and crash the episode), an `InfraError` is data (the token
loop let it escape and crash the batch), and the token driver honours a wall-clock timeout too (the token loop had none;
training sets none, and a batch's episodes share one clock). `UserError` (a systemic problem, not one episode's)
still propagates.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from trace_rl.envs.base import Environment
from trace_rl.envs.users import UserSimulator, is_stop
from trace_rl.errors import InfraError, UserError
from trace_rl.types import ErrorRecord, Message, Task, TerminationReason

T = TypeVar("T")

GREETING = "Hi! How can I help you today?"
CONTEXT_OVERFLOW_KIND = "context_length"  # InfraError kind for a prompt longer than the model's context


@dataclass
class EpisodeLimits:
    """When an episode is cut off. The token budgets apply only to the token driver (training)."""

    max_steps: int = 50
    max_errors: int = 10
    timeout_s: float | None = None
    max_turns: int | None = None  # agent turns; None: only max_steps bounds them
    max_turn_tokens: int = 256  # token driver: new tokens one agent turn may sample
    max_episode_tokens: int = 2048  # token driver: completion tokens (model + env) of the whole episode


class Speaker(StrEnum):
    AGENT = "agent"
    USER = "user"
    ENV = "env"


def agent_view(messages: list[Message], user_call_ids: set[str]) -> list[Message]:
    """What the agent sees: no user tool calls and no results of them (dual-control domains)."""
    return [
        m
        for m in messages
        if not (m.role == "user" and m.tool_calls) and not (m.role == "tool" and m.tool_call_id in user_call_ids)
    ]


def user_view(messages: list[Message], user_call_ids: set[str]) -> list[Message]:
    """What the user sees: its own turns, the agent's text, and results of its own tool calls."""
    return [
        m
        for m in messages
        if m.role == "user"
        or (m.role == "assistant" and m.content)
        or (m.role == "tool" and m.tool_call_id in user_call_ids)
    ]


class Episode:
    """One running episode of `task` on `env` with `user` (see the module docstring for the rules)."""

    def __init__(
        self, *, env: Environment, task: Task, seed: int | None, user: UserSimulator, limits: EpisodeLimits
    ) -> None:
        self.env = env
        self.task = task
        self.user = user
        self.limits = limits
        self.started_at = time.time()
        self.messages: list[Message] = list(env.reset(task, seed))
        if not self.messages:
            self.messages.append(Message(role="assistant", content=GREETING, turn=0))
        self.user_call_ids: set[str] = set()
        self.steps = 0  # hops taken; a message's `turn` is the step that produced it
        self.agent_turns = 0
        self.n_tool_errors = 0
        self.errors: list[ErrorRecord] = []
        self.termination: TerminationReason | None = None
        self.infra_error: str | None = None
        self.user_s = 0.0
        self.env_s = 0.0

    @property
    def done(self) -> bool:
        return self.termination is not None

    def end(self, reason: TerminationReason) -> None:
        """End the episode (the first reason given wins)."""
        if self.termination is None:
            self.termination = reason

    def next_speaker(self) -> Speaker:
        last = self.messages[-1]
        if last.role == "tool":
            return Speaker.USER if last.tool_call_id in self.user_call_ids else Speaker.AGENT
        if last.role == "assistant":
            return Speaker.ENV if last.tool_calls else Speaker.USER
        return Speaker.ENV if last.tool_calls else Speaker.AGENT  # a user message

    def agent_view(self, upto: int | None = None) -> list[Message]:
        """What the agent sees of the first `upto` messages (all by default)."""
        return agent_view(self.messages if upto is None else self.messages[:upto], self.user_call_ids)

    def admit(self, speaker: Speaker) -> bool:
        """Take the next hop's step, or end the episode when a limit is reached first (False)."""
        limits = self.limits
        if self.steps >= limits.max_steps:
            self.end(TerminationReason.MAX_STEPS)
        elif limits.timeout_s is not None and time.time() - self.started_at > limits.timeout_s:
            self.end(TerminationReason.TIMEOUT)
        elif speaker == Speaker.AGENT and limits.max_turns is not None and self.agent_turns >= limits.max_turns:
            self.end(TerminationReason.MAX_STEPS)
        if self.done:
            return False
        self.steps += 1
        return True

    async def advance(self) -> None:
        """Run user and environment hops until the agent must speak or the episode ends."""
        try:
            while not self.done:
                speaker = self.next_speaker()
                if speaker == Speaker.AGENT or not self.admit(speaker):
                    return
                if speaker == Speaker.USER:
                    await self._user_hop()
                else:
                    self._env_hop()
        except InfraError as exc:
            self.fail(exc)

    def add_agent_message(self, message: Message) -> Message:
        """The agent's turn for the step `admit(AGENT)` took: parse errors recorded, an empty turn ends the episode."""
        message = message.model_copy(update={"turn": self.steps})
        self.messages.append(message)
        self.agent_turns += 1
        for call in message.tool_calls or []:
            if call.parse_error:
                self.errors.append(
                    ErrorRecord(kind="parse", message=f"{call.name}: {call.parse_error}", turn=self.steps)
                )
        if not message.tool_calls and not message.content:
            self.errors.append(ErrorRecord(kind="protocol", message="empty agent message", turn=self.steps))
            self.end(TerminationReason.AGENT_ERROR)
        return message

    def fail(self, exc: InfraError) -> None:
        """End the episode on an infrastructure failure (a context overflow is the agent's)."""
        if exc.kind == CONTEXT_OVERFLOW_KIND:  # deterministic: the conversation outgrew the model, an agent failure
            self.errors.append(ErrorRecord(kind="protocol", message=str(exc), turn=self.steps))
            self.end(TerminationReason.AGENT_ERROR)
        else:
            self.infra_error = str(exc)
            self.errors.append(ErrorRecord(kind="infra", message=str(exc), turn=self.steps))
            self.end(TerminationReason.INFRA_ERROR)

    async def score(self, scorer: Callable[[], Awaitable[T]]) -> T | None:
        """`await scorer()` for a finished episode; None for an infrastructure failure (not scored) or when the
        scorer (e.g. an LLM judge) fails on infrastructure, which is recorded as such."""
        if self.termination == TerminationReason.INFRA_ERROR:
            return None
        t0 = time.perf_counter()
        try:
            return await scorer()
        except InfraError as exc:  # the judge failed: infrastructure, not the agent
            self.infra_error = f"judge {exc}"
            self.errors.append(ErrorRecord(kind="infra", message=self.infra_error))
            return None
        finally:
            self.env_s += time.perf_counter() - t0

    async def _user_hop(self) -> None:
        t0 = time.perf_counter()
        try:
            reply = await self.user.reply(user_view(self.messages, self.user_call_ids))
        except (InfraError, UserError):
            raise
        except Exception as exc:  # a broken user simulator fails this episode: data, not a crash
            self.errors.append(ErrorRecord(kind="user", message=f"{type(exc).__name__}: {exc}", turn=self.steps))
            self.end(TerminationReason.USER_ERROR)
            return
        finally:
            self.user_s += time.perf_counter() - t0
        self.messages.append(reply.model_copy(update={"turn": self.steps}))
        if reply.tool_calls:
            self.user_call_ids.update(c.id for c in reply.tool_calls)
        elif is_stop(reply.content):
            self.end(TerminationReason.USER_STOP)
        elif not reply.content:
            self.errors.append(ErrorRecord(kind="user", message="empty user message", turn=self.steps))
            self.end(TerminationReason.USER_ERROR)

    def _env_hop(self) -> None:
        """The environment executes the pending tool calls of the last message (one hop, like τ²'s MultiToolMessage)."""
        t0 = time.perf_counter()
        try:
            for call in self.messages[-1].tool_calls or []:
                result = self.env.execute(call).model_copy(update={"turn": self.steps})
                self.messages.append(result)
                if result.error:
                    self.n_tool_errors += 1
                    self.errors.append(
                        ErrorRecord(kind="tool", message=f"{call.name}: {result.content}", turn=self.steps)
                    )
        finally:
            self.env_s += time.perf_counter() - t0
        if self.n_tool_errors >= self.limits.max_errors:
            self.end(TerminationReason.TOO_MANY_ERRORS)
