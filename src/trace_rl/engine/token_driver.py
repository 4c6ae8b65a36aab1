"""The token driver of the episode state machine (`episode.py`), for GRPO rollouts and the before/after evaluation.

Each episode runs the one state machine (greeting, user, environment hops, limits, errors, termination), but the
agent's side is kept as token ids, never as text:

- the first prompt (`prompt.training_prompt`, assembled as the deployed agent's) is rendered once by the chat template
  and tokenized;
- each assistant turn is the ids the `TurnSampler` returned, appended as they are (env_mask 1) — decoded only to parse
  the tool calls, never re-tokenized;
- what the environment and the user add before the next assistant turn is the chat template's delta
  (`ChatCodec.bridge_ids`); only that delta is tokenized (env_mask 0).

So every turn's `prompt_ids + completion_ids` is a prefix of the next turn's prompt ids (`TurnRecord`, tested), and the
returned `prompt_ids + completion_ids` is exactly the sequence the model saw.

Hinted episodes (see `training/grouping.py`) use the environment's hinted system prompt and, when the environment has a
`hint_prefix(task)`, start their first assistant turn with those forced tokens (an assistant-prefix hint: an
off-policy extension for models too weak to follow a system-prompt hint). The forced tokens count as the model's
(env_mask 1), so a rewarded hinted episode teaches the un-hinted policy to produce them.

Episodes run in batches: all episodes waiting for the agent are sampled together (left-padded), which is what makes
CPU rollouts affordable. Besides the state machine's limits, a turn samples at most `max_turn_tokens` and an episode
holds at most `max_episode_tokens` completion tokens (model + env); running out ends it as MAX_STEPS, which scores 0
(τ²-bench rules).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from trace_rl.aio import run_sync
from trace_rl.engine.chat_codec import ChatCodec
from trace_rl.engine.episode import Episode, EpisodeLimits, Speaker
from trace_rl.engine.prompt import training_prompt
from trace_rl.errors import InfraError
from trace_rl.models.toolcall_parse import parse_completion
from trace_rl.types import EpisodeScore, ErrorRecord, Message, Task, TerminationReason, Trajectory

if TYPE_CHECKING:
    from trace_rl.engine.sampler import TurnSampler
    from trace_rl.envs.base import Environment
    from trace_rl.envs.users import UserSimulator

T = TypeVar("T")


class EpisodeSource(Protocol):
    """What the token driver needs of an environment to run its episodes (`training.protocol.TrainEnv` is one).

    Optional: `example_messages(task)` and `agent_tools(env)` (see `prompt.training_prompt`), and `hint_prefix(task)`
    (forced opening text of a hinted episode's first turn)."""

    def make_task(self, seed: int) -> Task:
        """The task of a seed; the same seed always gives the same task and initial state."""
        ...

    def make_env(self, task: Task) -> Environment:
        """A fresh environment for one episode of `task` (reset is called by the episode)."""
        ...

    def system_prompt(self, task: Task, *, hinted: bool = False) -> str:
        """The agent's system prompt; with `hinted`, the hinted variant (the base prompt when there is none)."""
        ...

    def scripted_user(self, task: Task) -> UserSimulator:
        """A fresh user simulator for one episode of `task`."""
        ...

    async def score(
        self, env: Environment, task: Task, messages: list[Message], termination: TerminationReason
    ) -> EpisodeScore:
        """Score a finished episode on its live environment."""
        ...


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
    policy_versions: list[str] = field(default_factory=list)  # distinct sampler versions of its turns, in order
    turns: list[TurnRecord] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    termination: TerminationReason | None = None
    score: EpisodeScore | None = None
    errors: list[ErrorRecord] = field(default_factory=list)
    infra_error: str | None = None  # set when the episode ended on an infrastructure failure (then `score` is None)
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
            infra_error=self.infra_error,
            capability=capability,
            metadata={
                "hinted": self.hinted,
                "n_model_tokens": self.model_tokens,
                "n_env_tokens": self.env_tokens,
                "turns": len(self.turns),
                "breakdown": self.score.breakdown if self.score else {},
                "tag": self.tag,
                **({"policy_versions": self.policy_versions} if self.policy_versions else {}),
            },
        )


class _Live:
    """One running episode: the state machine plus its token view."""

    def __init__(self, req: EpisodeRequest, source: EpisodeSource, limits: EpisodeLimits) -> None:
        self.req = req
        task = source.make_task(req.seed)
        env = source.make_env(task)
        user = source.scripted_user(task)
        self.episode = Episode(env=env, task=task, seed=req.seed, user=user, limits=limits)
        self.prompt = training_prompt(source, task, env, hinted=req.hinted)
        # the hint-free twin of the first prompt, returned to the trainer
        self.base_prompt = replace(self.prompt, system=source.system_prompt(task)) if req.hinted else self.prompt
        self.history_len = 0  # messages up to and including the last assistant turn
        self.last_stop_text: str | None = None
        self.context: list[int] = []
        self.prefix_text: str | None = None
        if req.hinted and hasattr(source, "hint_prefix"):
            self.prefix_text = source.hint_prefix(task)
        self.result = EpisodeResult(seed=req.seed, hinted=req.hinted, task_id=task.id, tag=req.tag)

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        return self.prompt.tools or None

    def start_tokens(self, codec: ChatCodec) -> None:
        """The first prompt, rendered once (and its hint-free twin)."""
        view = self.episode.agent_view()
        self.result.prompt_ids = codec.prompt_ids(self.prompt.messages(view), self.tools)
        self.result.base_prompt_ids = (
            codec.prompt_ids(self.base_prompt.messages(view), self.tools) if self.req.hinted else self.result.prompt_ids
        )
        self.context = list(self.result.prompt_ids)

    def token_budget(self, limits: EpisodeLimits) -> int:
        """New tokens the next turn may sample (0 or less: the episode must end)."""
        return min(limits.max_turn_tokens, limits.max_episode_tokens - len(self.result.completion_ids))

    def take_prefix(self, codec: ChatCodec) -> list[int]:
        """Forced first tokens of a hinted episode's first turn (an assistant-prefix hint), then never again."""
        if self.prefix_text is None or self.result.turns:
            return []
        ids, self.prefix_text = codec.encode(self.prefix_text), None
        return ids

    def add_turn(self, ids: list[int], logprobs: list[float], stopped: bool, codec: ChatCodec) -> None:
        """The sampled ids as they are (env_mask 1), and the message parsed from them for the state machine."""
        res = self.result
        res.turns.append(TurnRecord(prompt_ids=list(self.context), completion_ids=list(ids)))
        res.completion_ids.extend(ids)
        res.env_mask.extend([1] * len(ids))
        res.logprobs.extend(logprobs)
        self.context.extend(ids)
        text_ids = ids[:-1] if stopped and ids else ids
        self.last_stop_text = codec.decode(ids[-1:]) if stopped and ids else None
        message = parse_completion(codec.decode(text_ids), id_prefix=f"call_{self.episode.steps}")
        self.episode.add_agent_message(message)
        self.history_len = len(self.episode.messages)

    def add_bridge(self, codec: ChatCodec, limits: EpisodeLimits) -> None:
        """Append the env/user delta before the next assistant turn (masked out of the loss)."""
        before = self.episode.agent_view(self.history_len)
        new = self.episode.agent_view()[len(before) :]
        ids = codec.bridge_ids(self.prompt.messages(before), new, self.tools, stop_text=self.last_stop_text)
        if len(self.result.completion_ids) + len(ids) >= limits.max_episode_tokens:
            self.episode.end(TerminationReason.MAX_STEPS)
            return
        self.result.completion_ids.extend(ids)
        self.result.env_mask.extend([0] * len(ids))
        self.result.logprobs.extend([0.0] * len(ids))
        self.context.extend(ids)


class EpisodeRunner:
    """Runs batches of episodes of one `EpisodeSource` (a `TrainEnv`) with one sampler."""

    def __init__(
        self,
        train_env: EpisodeSource,
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
        t0 = time.perf_counter()
        live = [_Live(req, self.train_env, self.limits) for req in requests]
        for ep in live:
            await ep.episode.advance()
            if not ep.episode.done:
                ep.start_tokens(self.codec)
        self.env_s += time.perf_counter() - t0
        while waiting := self._admit(live):
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
                if turn.version is not None and turn.version not in ep.result.policy_versions:
                    ep.result.policy_versions.append(turn.version)
                await ep.episode.advance()
                if not ep.episode.done:
                    ep.add_bridge(self.codec, self.limits)
            self.env_s += time.perf_counter() - t0
        t0 = time.perf_counter()
        results = [await self._finish(ep, sampler) for ep in live]
        self.env_s += time.perf_counter() - t0
        return results

    def _admit(self, live: list[_Live]) -> list[tuple[_Live, int, list[int]]]:
        """The episodes whose agent speaks next, each with its token budget and forced prefix; the others end."""
        waiting: list[tuple[_Live, int, list[int]]] = []
        for ep in live:
            if ep.episode.done or not ep.episode.admit(Speaker.AGENT):
                continue
            prefix = ep.take_prefix(self.codec)
            budget = ep.token_budget(self.limits) - len(prefix)
            if budget <= 0:
                ep.episode.end(TerminationReason.MAX_STEPS)
            else:
                waiting.append((ep, budget, prefix))
        return waiting

    async def _finish(self, ep: _Live, sampler: TurnSampler) -> EpisodeResult:
        episode, res = ep.episode, ep.result
        res.messages, res.termination, res.errors = episode.messages, episode.termination, episode.errors
        scorer = functools.partial(self.train_env.score, episode.env, episode.task, episode.messages, res.termination)
        res.score = await episode.score(scorer)
        res.infra_error = episode.infra_error
        if not res.prompt_ids:  # the episode ended before the agent spoke: one masked token keeps TRL happy
            res.prompt_ids = res.base_prompt_ids = self.codec.prompt_ids(
                ep.base_prompt.messages(episode.agent_view()), ep.tools
            )
        if not res.completion_ids:
            stop_id = min(sampler.stop_ids) if sampler.stop_ids else 0
            res.completion_ids, res.env_mask, res.logprobs = [stop_id], [0], [0.0]
        return res


def require_scored(results: Sequence[EpisodeResult]) -> list[EpisodeResult]:
    """`results` when every episode was scored; an `InfraError` when one ended on an infrastructure failure. Training
    and its held-out evaluation cannot use an unscored episode (its reward would read as 0), and a failing user model
    or judge is systemic for a batch, so the step fails and resumes from its checkpoint instead."""
    failed = [r for r in results if r.infra_error is not None]
    if failed:
        raise InfraError(
            "training", f"{len(failed)} of {len(results)} episodes failed on infrastructure: {failed[0].infra_error}"
        )
    return list(results)


def initial_messages(train_env: EpisodeSource, seed: int, limits: EpisodeLimits) -> list[Message] | None:
    """The agent's first prompt for a seed (base system prompt + what precedes the first agent turn), or None when
    the episode would end before the agent speaks. Used to build the one-row-per-seed dataset."""
    ep = _Live(EpisodeRequest(seed=seed), train_env, limits)
    run_sync(ep.episode.advance())
    return None if ep.episode.done else ep.base_prompt.messages(ep.episode.agent_view())
