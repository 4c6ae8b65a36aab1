"""`EpisodeSession`: one trace-rl episode driven from outside, one agent message at a time (a Gym-style
`reset(seed)` / `step(message)`), for the exported OpenEnv and verifiers environments.

It runs the one episode state machine (`engine.episode.Episode`) on any `EpisodeSource` (a synthesized capability
environment, a library family, a target's task list): the same task for the same seed, the same user, the same limits,
and the same scorer (`source.score` on the live environment) as the token driver uses in training, so an exported
environment rewards an episode exactly as trace-rl does. The agent sees what trace-rl's agent sees: the system prompt,
the worked-example turns, the conversation (agent view), and the tools unless the prompt lists them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trace_rl.aio import run_sync
from trace_rl.engine.episode import Episode, EpisodeLimits, Speaker
from trace_rl.engine.prompt import AgentPrompt, training_prompt
from trace_rl.engine.token_driver import EpisodeSource
from trace_rl.errors import UserError
from trace_rl.models.chat_format import to_openai_messages
from trace_rl.models.toolcall_parse import parse_completion
from trace_rl.types import EpisodeScore, Message, Task, TerminationReason, ToolCall


@dataclass
class SessionState:
    """What the agent sees after `reset` or `step`, and the outcome once the episode is over."""

    seed: int
    task_id: str
    messages: list[dict[str, Any]]  # OpenAI chat format: system prompt, worked examples, the conversation so far
    tools: list[dict[str, Any]]
    new_messages: list[dict[str, Any]] = field(default_factory=list)  # what the last step added after the agent's turn
    done: bool = False
    termination: str | None = None
    reward: float = 0.0  # the shaped reward (trace-rl's training reward), 0 until the episode is over
    success: bool = False
    breakdown: dict[str, float] = field(default_factory=dict)


def agent_message(action: str | dict[str, Any] | Message, *, turn: int) -> Message:
    """The agent's turn as a trace-rl `Message`: raw model text (tool calls parsed as trace-rl parses them), an OpenAI
    assistant message (`content` and/or `tool_calls`), or a `Message`."""
    if isinstance(action, Message):
        return action
    if isinstance(action, str):
        return parse_completion(action, id_prefix=f"call_{turn}")
    if not isinstance(action, dict):
        raise UserError(f"an agent action must be text or an assistant message, not {type(action).__name__}")
    calls = []
    for i, raw in enumerate(action.get("tool_calls") or []):
        fn = raw.get("function", raw)
        args = fn.get("arguments") or {}
        if isinstance(args, str):
            from trace_rl.models.toolcall_parse import parse_arguments

            args, error = parse_arguments(args)
        else:
            error = None
        calls.append(
            ToolCall(
                id=raw.get("id") or f"call_{turn}_{i}", name=str(fn.get("name", "")), arguments=args, parse_error=error
            )
        )
    if calls:
        return Message(role="assistant", tool_calls=calls)
    return parse_completion(str(action.get("content") or ""), id_prefix=f"call_{turn}")


class EpisodeSession:
    """One episode at a time of `source`; `reset(seed)` starts one, `step(action)` plays the agent's turn."""

    def __init__(self, source: EpisodeSource, *, limits: EpisodeLimits | None = None) -> None:
        self.source = source
        self.limits = limits or EpisodeLimits()
        self.episode: Episode | None = None
        self.prompt: AgentPrompt | None = None
        self.task: Task | None = None
        self.score: EpisodeScore | None = None
        self.seed = 0

    # -- sync API (OpenEnv's Environment is synchronous) -------------------------------------------------------------
    def reset(self, seed: int) -> SessionState:
        return run_sync(self.areset(seed))

    def step(self, action: str | dict[str, Any] | Message) -> SessionState:
        return run_sync(self.astep(action))

    # -- async API ---------------------------------------------------------------------------------------------------
    async def areset(self, seed: int) -> SessionState:
        self.seed = int(seed)
        self.task = self.source.make_task(self.seed)
        env = self.source.make_env(self.task)
        user = self.source.scripted_user(self.task)
        self.episode = Episode(env=env, task=self.task, seed=self.seed, user=user, limits=self.limits)
        self.prompt = training_prompt(self.source, self.task, env)
        self.score = None
        await self.episode.advance()
        await self._finish_if_done()
        return self.state(self.episode.agent_view())

    async def astep(self, action: str | dict[str, Any] | Message) -> SessionState:
        episode = self._live()
        if episode.done:
            raise UserError("the episode is over: call reset(seed) first")
        before = len(episode.agent_view())
        if episode.admit(Speaker.AGENT):
            episode.add_agent_message(agent_message(action, turn=episode.steps))
            await episode.advance()
        await self._finish_if_done()
        view = episode.agent_view()
        return self.state(view[before + 1 :])

    def state(self, new: list[Message]) -> SessionState:
        episode, prompt = self._live(), self.prompt
        assert prompt is not None and self.task is not None
        score = self.score
        return SessionState(
            seed=self.seed,
            task_id=self.task.id,
            messages=to_openai_messages(prompt.messages(episode.agent_view())),
            tools=list(prompt.tools),
            new_messages=to_openai_messages(new),
            done=episode.done,
            termination=str(episode.termination) if episode.termination else None,
            reward=score.shaped if score else 0.0,
            success=bool(score and score.success),
            breakdown=dict(score.breakdown) if score else {},
        )

    @property
    def messages(self) -> list[Message]:
        """The episode's messages (trace-rl's record, user tool calls included)."""
        return list(self._live().messages)

    @property
    def termination(self) -> TerminationReason | None:
        return self._live().termination

    def _live(self) -> Episode:
        if self.episode is None:
            raise UserError("no episode: call reset(seed) first")
        return self.episode

    async def _finish_if_done(self) -> None:
        episode = self._live()
        if not episode.done or self.score is not None:
            return
        assert self.task is not None and episode.termination is not None
        termination = episode.termination

        async def scorer() -> EpisodeScore:
            return await self.source.score(episode.env, self.task, episode.messages, termination)  # type: ignore[arg-type]

        self.score = await episode.score(scorer)


__all__ = ["EpisodeSession", "SessionState", "agent_message"]
