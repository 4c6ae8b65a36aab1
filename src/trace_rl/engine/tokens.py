"""The token-in/token-out multi-turn episode loop used for GRPO rollouts (and the before/after evaluation).

Each episode follows the orchestrator's half-duplex hops (`engine/conversation.py`: greeting, user, agent, environment),
but the agent's side is kept as token ids, never as text:

- the first prompt is rendered once by the chat template and tokenized;
- each assistant turn is the ids the sampler returned, appended as they are (env_mask 1) — decoded only to parse the
  tool calls, never re-tokenized;
- what the environment and the user add before the next assistant turn is the *delta* of the chat template: the text
  `render(history + new, add_generation_prompt=True)` adds after `render(history)`, preceded by whatever the template
  puts after an assistant message's end-of-turn token (`"\\n"` in ChatML). Only that delta is tokenized (env_mask 0).

So every turn's `prompt_ids + completion_ids` is a prefix of the next turn's prompt ids (`TurnRecord`, tested), and the
returned `prompt_ids + completion_ids` is exactly the sequence the model saw (stack-notes §6.1).
`check_prefix_preserving` runs at start-up: a template that rewrites earlier turns (e.g. Qwen3 dropping past
`<think>`) is refused with a clear error instead of silently training on drifted tokens.

Hinted episodes (see `grouping.py`) use the environment's hinted system prompt and, when the environment has a
`hint_prefix(task)`, start their first assistant turn with those forced tokens (an assistant-prefix hint: an
off-policy extension for models too weak to follow a system-prompt hint). The forced tokens count as the model's
(env_mask 1), so a rewarded hinted episode teaches the un-hinted policy to produce them.

Episodes run in batches: all episodes waiting for the agent are sampled together (left-padded), which is what makes
CPU rollouts affordable. Limits: `max_turns` assistant turns, `max_episode_tokens` completion tokens (model + env),
`max_steps_per_episode` hops, `max_errors` tool errors; hitting one ends the episode as MAX_STEPS / TOO_MANY_ERRORS,
which scores 0 (τ²-bench rules).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from trace_rl.engine.conversation import GREETING, agent_view, user_view
from trace_rl.envs.users import is_stop
from trace_rl.errors import UserError
from trace_rl.models.chat_format import (
    TemplateCaps,
    add_tool_listing,
    normalize_tools,
    probe_template,
    to_template_messages,
)
from trace_rl.models.toolcall_parse import parse_completion
from trace_rl.training.envs import agent_examples, agent_tools
from trace_rl.training.protocol import EpisodeScore, TrainEnv
from trace_rl.types import ErrorRecord, Message, TerminationReason, ToolCall, Trajectory

if TYPE_CHECKING:
    from trace_rl.envs.base import Environment
    from trace_rl.envs.users import UserSimulator
    from trace_rl.engine.sampler import TurnSampler
    from trace_rl.types import Task

T = TypeVar("T")


class PrefixError(UserError):
    """The chat template is not prefix-preserving, so appending token deltas would drift from the rendered text."""


class ChatCodec:
    """Chat-template rendering and delta tokenization for one tokenizer."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.caps: TemplateCaps = probe_template(tokenizer)
        self.assistant_tail = self._assistant_tail()

    def render(self, messages: list[Message], tools: list[dict[str, Any]] | None, *, generation: bool) -> str:
        tmsgs = to_template_messages(messages, inline_tool_calls=not self.caps.renders_tool_calls)
        norm = normalize_tools(tools)
        if norm and not self.caps.renders_tools:
            tmsgs, norm = add_tool_listing(tmsgs, norm), None
        kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": generation}
        if norm:
            kwargs["tools"] = norm
        return self.tokenizer.apply_chat_template(tmsgs, **kwargs)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def prompt_ids(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> list[int]:
        return self.encode(self.render(messages, tools, generation=True))

    def _assistant_tail(self) -> str:
        """What the template writes after an assistant message's content (`<|im_end|>\\n` in ChatML)."""
        marker = "zq7 marker"
        convo = [Message(role="system", content="s"), Message(role="user", content="u")]
        text = self.render([*convo, Message(role="assistant", content=marker)], None, generation=False)
        at = text.rfind(marker)
        if at < 0:
            raise PrefixError("the chat template does not render assistant messages")
        return text[at + len(marker) :]

    def bridge_ids(
        self,
        history: list[Message],
        new: list[Message],
        tools: list[dict[str, Any]] | None,
        *,
        stop_text: str | None,
    ) -> list[int]:
        """Ids to append after a sampled assistant turn so that the context continues as the template would.

        `history` ends with that assistant message; `new` holds what followed it (tool results, user turns);
        `stop_text` is the decoded stop token the turn ended with (None when it was truncated).
        """
        prev = self.render(history, tools, generation=False)
        full = self.render(history + new, tools, generation=True)
        if not full.startswith(prev):
            raise PrefixError(
                "chat template is not prefix-preserving: rendering more messages changed earlier text "
                "(use a training template that keeps past turns as they were)"
            )
        tail = self.assistant_tail
        lead = tail[len(stop_text) :] if stop_text and tail.startswith(stop_text) else tail
        return self.encode(lead + full[len(prev) :])


def check_prefix_preserving(codec: ChatCodec, tools: list[dict[str, Any]] | None = None) -> None:
    """Start-up check: every rendering of a probe conversation extends the previous one, at the text level."""
    call = ToolCall(id="c0", name="probe_tool", arguments={"x": 1})
    convo = [
        Message(role="system", content="probe system"),
        Message(role="assistant", content="hello"),
        Message(role="user", content="probe question"),
        Message(role="assistant", tool_calls=[call]),
        Message(role="tool", content="probe result", tool_call_id="c0", name="probe_tool"),
        Message(role="assistant", content="probe answer"),
        Message(role="user", content="thanks"),
    ]
    previous = ""
    for k in range(2, len(convo) + 1):
        head = convo[:k]
        closed = codec.render(head, tools, generation=False)
        if not closed.startswith(previous):
            raise PrefixError(
                f"chat template is not prefix-preserving at message {k} ({head[-1].role}); token-in/token-out "
                "training needs one that renders past turns unchanged"
            )
        if head[-1].role != "assistant":
            previous = codec.render(head, tools, generation=True)
            after = codec.render([*head, Message(role="assistant", content="x")], tools, generation=False)
            if not after.startswith(previous):
                raise PrefixError("chat template: the generation prompt is not a prefix of the assistant turn")
        else:
            previous = closed
            if not closed.endswith(codec.assistant_tail):
                raise PrefixError("chat template: assistant messages do not end the same way")


@dataclass
class TurnRecord:
    """One assistant turn as the model saw it: its full prompt ids and the ids it sampled."""

    prompt_ids: list[int]
    completion_ids: list[int]


@dataclass
class EpisodeRequest:
    seed: int
    hinted: bool = False
    tag: str = ""


@dataclass
class EpisodeResult:
    """A finished episode: token view (for GRPO) and message view (for logs and scoring)."""

    seed: int
    hinted: bool
    task_id: str
    prompt_ids: list[int] = field(default_factory=list)
    base_prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    termination: TerminationReason | None = None
    score: EpisodeScore | None = None
    errors: list[ErrorRecord] = field(default_factory=list)
    tag: str = ""

    @property
    def model_tokens(self) -> int:
        return sum(self.env_mask)

    @property
    def env_tokens(self) -> int:
        return len(self.env_mask) - sum(self.env_mask)

    @property
    def reward(self) -> float:
        return self.score.shaped if self.score is not None else 0.0

    @property
    def success(self) -> bool:
        return bool(self.score is not None and self.score.success)

    def trajectory(self, *, env: str, split: str, trial: int, capability: str | None = None) -> Trajectory:
        return Trajectory(
            id=f"{env}/{split}/{self.task_id}/{trial}",
            env=env,
            split=split,
            task_id=self.task_id,
            trial=trial,
            seed=self.seed,
            messages=self.messages,
            reward=self.reward,
            success=self.success,
            termination=self.termination,
            errors=self.errors,
            capability=capability,
            metadata={
                "hinted": self.hinted,
                "n_model_tokens": self.model_tokens,
                "n_env_tokens": self.env_tokens,
                "turns": len(self.turns),
                "breakdown": self.score.breakdown if self.score else {},
                "tag": self.tag,
            },
        )


@dataclass
class EpisodeLimits:
    max_turn_tokens: int = 256
    max_episode_tokens: int = 2048
    max_turns: int = 8
    max_steps: int = 50
    max_errors: int = 10


class _Live:
    """One running episode."""

    def __init__(self, req: EpisodeRequest, train_env: TrainEnv) -> None:
        self.req = req
        self.task: Task = train_env.make_task(req.seed)
        self.env: Environment = train_env.make_env(self.task)
        self.user: UserSimulator = train_env.scripted_user(self.task)
        self.messages: list[Message] = list(self.env.reset(self.task, req.seed))
        if not self.messages:
            self.messages.append(Message(role="assistant", content=GREETING, turn=0))
        self.tools = agent_tools(train_env, self.env)
        examples = agent_examples(train_env, self.task)
        # The agent's fixed preamble: system prompt, then the environment's worked-example turns (as `domain_agent`).
        self.system = [Message(role="system", content=train_env.system_prompt(self.task, hinted=req.hinted)), *examples]
        self.base_system = [Message(role="system", content=train_env.system_prompt(self.task, hinted=False)), *examples]
        self.user_call_ids: set[str] = set()
        self.steps = 0
        self.n_errors = 0
        self.history_len = 0  # messages up to and including the last assistant turn
        self.last_stop_text: str | None = None
        self.context: list[int] = []
        self.prefix_text: str | None = None
        if req.hinted and hasattr(train_env, "hint_prefix"):
            self.prefix_text = train_env.hint_prefix(self.task)
        self.result = EpisodeResult(seed=req.seed, hinted=req.hinted, task_id=self.task.id, tag=req.tag)

    @property
    def done(self) -> bool:
        return self.result.termination is not None

    def end(self, reason: TerminationReason) -> None:
        if self.result.termination is None:
            self.result.termination = reason

    def view(self, upto: int | None = None) -> list[Message]:
        return agent_view(self.messages[:upto] if upto is not None else self.messages, self.user_call_ids)

    def next_speaker(self) -> str:
        last = self.messages[-1]
        if last.role == "tool":
            return "user" if last.tool_call_id in self.user_call_ids else "agent"
        if last.role == "assistant":
            return "env" if last.tool_calls else "user"
        return "env" if last.tool_calls else "agent"

    async def advance(self, limits: EpisodeLimits) -> None:
        """Run user and environment hops until the agent must speak or the episode ends."""
        while not self.done:
            speaker = self.next_speaker()
            if speaker == "agent":
                return
            if self.steps >= limits.max_steps:
                self.end(TerminationReason.MAX_STEPS)
                return
            self.steps += 1
            if speaker == "user":
                try:
                    reply = await self.user.reply(user_view(self.messages, self.user_call_ids))
                except Exception as exc:  # per-episode failure: data, not a crash
                    self.result.errors.append(ErrorRecord(kind="user", message=str(exc), turn=self.steps))
                    self.end(TerminationReason.USER_ERROR)
                    return
                self.messages.append(reply.model_copy(update={"turn": self.steps}))
                if reply.tool_calls:
                    self.user_call_ids.update(c.id for c in reply.tool_calls)
                elif is_stop(reply.content):
                    self.end(TerminationReason.USER_STOP)
                elif not reply.content:
                    self.result.errors.append(ErrorRecord(kind="user", message="empty user message", turn=self.steps))
                    self.end(TerminationReason.USER_ERROR)
            else:
                for call in self.messages[-1].tool_calls or []:
                    result = self.env.execute(call).model_copy(update={"turn": self.steps})
                    self.messages.append(result)
                    if result.error:
                        self.n_errors += 1
                        self.result.errors.append(
                            ErrorRecord(kind="tool", message=f"{call.name}: {result.content}", turn=self.steps)
                        )
                if self.n_errors >= limits.max_errors:
                    self.end(TerminationReason.TOO_MANY_ERRORS)

    def start_tokens(self, codec: ChatCodec) -> None:
        """The first prompt, rendered once (and its hint-free twin, returned to the trainer)."""
        view = self.view()
        self.result.prompt_ids = codec.prompt_ids([*self.system, *view], self.tools)
        self.result.base_prompt_ids = (
            codec.prompt_ids([*self.base_system, *view], self.tools) if self.req.hinted else self.result.prompt_ids
        )
        self.context = list(self.result.prompt_ids)

    def budget(self, limits: EpisodeLimits) -> int:
        """New tokens the next turn may sample (0: the episode must end)."""
        if len(self.result.turns) >= limits.max_turns or self.steps >= limits.max_steps:
            return 0
        return min(limits.max_turn_tokens, limits.max_episode_tokens - len(self.result.completion_ids))

    def take_prefix(self, codec: ChatCodec) -> list[int]:
        """Forced first tokens of a hinted episode's first turn (an assistant-prefix hint), then never again."""
        if self.prefix_text is None or self.result.turns:
            return []
        ids, self.prefix_text = codec.encode(self.prefix_text), None
        return ids

    def add_turn(self, ids: list[int], logprobs: list[float], stopped: bool, codec: ChatCodec) -> None:
        res = self.result
        res.turns.append(TurnRecord(prompt_ids=list(self.context), completion_ids=list(ids)))
        res.completion_ids.extend(ids)
        res.env_mask.extend([1] * len(ids))
        res.logprobs.extend(logprobs)
        self.context.extend(ids)
        text_ids = ids[:-1] if stopped and ids else ids
        self.last_stop_text = codec.decode(ids[-1:]) if stopped and ids else None
        self.steps += 1
        message = parse_completion(codec.decode(text_ids), id_prefix=f"call_{self.steps}")
        message = message.model_copy(update={"turn": self.steps})
        self.messages.append(message)
        self.history_len = len(self.messages)
        if not message.tool_calls and not message.content:
            res.errors.append(ErrorRecord(kind="protocol", message="empty agent message", turn=self.steps))
            self.end(TerminationReason.AGENT_ERROR)
        for call in message.tool_calls or []:
            if call.parse_error:
                text = f"{call.name}: {call.parse_error}"
                res.errors.append(ErrorRecord(kind="parse", message=text, turn=self.steps))

    def add_bridge(self, codec: ChatCodec, limits: EpisodeLimits) -> None:
        """Append the env/user delta before the next assistant turn (masked out of the loss)."""
        before = self.view(self.history_len)
        new = self.view()[len(before) :]
        ids = codec.bridge_ids([*self.system, *before], new, self.tools, stop_text=self.last_stop_text)
        if len(self.result.completion_ids) + len(ids) >= limits.max_episode_tokens:
            self.end(TerminationReason.MAX_STEPS)
            return
        self.result.completion_ids.extend(ids)
        self.result.env_mask.extend([0] * len(ids))
        self.result.logprobs.extend([0.0] * len(ids))
        self.context.extend(ids)


class EpisodeRunner:
    """Runs batches of episodes of one `TrainEnv` with one sampler."""

    def __init__(
        self,
        train_env: TrainEnv,
        codec: ChatCodec,
        limits: EpisodeLimits,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
    ) -> None:
        self.train_env = train_env
        self.codec = codec
        self.limits = limits
        self.temperature = temperature
        self.top_p = top_p
        self.generation_s = 0.0
        self.env_s = 0.0

    def run(self, requests: Sequence[EpisodeRequest], sampler: TurnSampler) -> list[EpisodeResult]:
        """Run every request to the end (one batched generation per round) and score it."""
        return run_sync(self._run(list(requests), sampler))

    async def _run(self, requests: list[EpisodeRequest], sampler: TurnSampler) -> list[EpisodeResult]:
        limits = self.limits
        t0 = time.perf_counter()
        live = [_Live(req, self.train_env) for req in requests]
        for ep in live:
            await ep.advance(limits)
            if not ep.done:
                ep.start_tokens(self.codec)
        self.env_s += time.perf_counter() - t0
        while True:
            waiting: list[tuple[_Live, int, list[int]]] = []
            for ep in live:
                if ep.done:
                    continue
                prefix = ep.take_prefix(self.codec)
                budget = ep.budget(limits) - len(prefix)
                if budget <= 0:
                    ep.end(TerminationReason.MAX_STEPS)
                else:
                    waiting.append((ep, budget, prefix))
            if not waiting:
                break
            t0 = time.perf_counter()
            turns = sampler.sample(
                [ep.context + prefix for ep, _, prefix in waiting],
                max_new_tokens=max(b for _, b, _ in waiting),
                temperature=self.temperature,
                top_p=self.top_p,
            )
            self.generation_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            for (ep, budget, prefix), turn in zip(waiting, turns, strict=True):
                ids, logps, stopped = turn.completion_ids, turn.logprobs, turn.stopped
                if len(ids) > budget:  # the batch sampled for the largest budget
                    ids, logps, stopped = ids[:budget], logps[:budget], False
                ep.add_turn(prefix + ids, [0.0] * len(prefix) + logps, stopped, self.codec)
                await ep.advance(limits)
                if not ep.done:
                    ep.add_bridge(self.codec, limits)
            self.env_s += time.perf_counter() - t0
        t0 = time.perf_counter()
        results = []
        stop_id = min(sampler.stop_ids) if sampler.stop_ids else 0
        for ep in live:
            res = ep.result
            res.messages = ep.messages
            res.score = await self.train_env.score(ep.env, ep.task, ep.messages, res.termination)
            if not res.prompt_ids:  # the episode ended before the agent spoke: one masked token keeps TRL happy
                res.prompt_ids = res.base_prompt_ids = self.codec.prompt_ids([*ep.base_system, *ep.view()], ep.tools)
            if not res.completion_ids:
                res.completion_ids, res.env_mask, res.logprobs = [stop_id], [0], [0.0]
            results.append(res)
        self.env_s += time.perf_counter() - t0
        return results


def initial_messages(train_env: TrainEnv, seed: int, limits: EpisodeLimits) -> list[Message] | None:
    """The agent's first prompt for a seed (base system prompt + what precedes the first agent turn), or None when
    the episode would end before the agent speaks. Used to build the one-row-per-seed dataset."""
    ep = _Live(EpisodeRequest(seed=seed), train_env)
    run_sync(ep.advance(limits))
    return None if ep.done else [*ep.base_system, *ep.view()]


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, also when an event loop is already running in this thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
