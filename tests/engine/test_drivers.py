"""One state machine, two drivers: the same scripted episode through the text driver (`run_episode`, a model client)
and the token driver (`EpisodeRunner`, a turn sampler) ends with the same messages, termination and error records —
also when the user simulator raises, when it fails on infrastructure, and when the wall-clock limit runs out."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.training.train_toy import DONE, RED, ScriptedSampler, ToyEnv

from trace_rl.engine.episode import EpisodeLimits
from trace_rl.engine.text_driver import Agent, EpisodeSpec, run_episode
from trace_rl.engine.token_driver import EpisodeRequest, EpisodeResult, EpisodeRunner, require_scored
from trace_rl.envs.users import ScriptedUser
from trace_rl.errors import InfraError
from trace_rl.models.scripted import ScriptedClient
from trace_rl.types import ErrorRecord, Message, TerminationReason, Trajectory

UNKNOWN = '<tool_call>\n{"name": "paint", "arguments": {"color": "red"}}\n</tool_call>'
MALFORMED = '<tool_call>\n{"name": "pick", "arguments": {"color": </tool_call>'
SCRIPT = [UNKNOWN, MALFORMED, RED, DONE]  # a tool error, a parse error, the right call, the answer


class BrokenUser:
    name = "broken"

    async def reply(self, history: list[Message]) -> Message:
        raise RuntimeError("boom")


class DownUser:
    name = "down"

    async def reply(self, history: list[Message]) -> Message:
        raise InfraError("connection", "user model unreachable")


class SlowUser(ScriptedUser):
    async def reply(self, history: list[Message]) -> Message:
        await asyncio.sleep(0.05)
        return await super().reply(history)


class UserEnv(ToyEnv):
    """The toy environment with another user simulator."""

    def __init__(self, make_user: Any) -> None:
        super().__init__()
        self.make_user = make_user

    def scripted_user(self, task):
        return self.make_user(task)


def text_run(env: ToyEnv, script: list[str], limits: EpisodeLimits, seed: int = 1) -> Trajectory:
    task = env.make_task(seed)
    live = env.make_env(task)
    agent = Agent(ScriptedClient(script), env.system_prompt(task), live.tool_schemas())
    spec = EpisodeSpec(env=env.name, split="x", seed=seed)
    return asyncio.run(
        run_episode(env=live, task=task, agent=agent, user=env.scripted_user(task), spec=spec, limits=limits)
    )


def token_run(env: ToyEnv, script: list[str], limits: EpisodeLimits, codec, tokenizer, seed: int = 1) -> EpisodeResult:
    sampler = ScriptedSampler(tokenizer, lambda ctx, call: script[call])
    (result,) = EpisodeRunner(env, codec, limits).run([EpisodeRequest(seed=seed)], sampler)
    return result


def canonical(messages: list[Message]) -> list[dict[str, Any]]:
    """Messages with tool-call ids renamed in order of appearance (each driver names its calls its own way)."""
    names: dict[str, str] = {}

    def rename(call_id: str | None) -> str | None:
        return None if call_id is None else names.setdefault(call_id, f"c{len(names)}")

    out = []
    for m in messages:
        d = m.model_dump(exclude={"sampled"})
        for call in d["tool_calls"] or []:
            call["id"] = rename(call["id"])
        d["tool_call_id"] = rename(d["tool_call_id"])
        out.append(d)
    return out


LIMITS = EpisodeLimits(max_turn_tokens=64, max_episode_tokens=1024)


def test_the_same_episode_through_both_drivers(codec, tokenizer):
    env = ToyEnv()
    text, tokens = text_run(env, SCRIPT, LIMITS), token_run(env, SCRIPT, LIMITS, codec, tokenizer)
    assert text.termination == tokens.termination == TerminationReason.USER_STOP
    assert canonical(text.messages) == canonical(tokens.messages)
    assert [m.role for m in text.messages] == ["assistant", "user", *["assistant", "tool"] * 3, "assistant", "user"]
    assert text.errors == tokens.errors
    assert [e.kind for e in text.errors] == ["tool", "parse", "tool"] and text.errors[0].message.startswith(
        "paint: Error"
    )
    assert text.success and tokens.success and text.reward == tokens.score.shaped == 1.0


def test_limits_end_both_drivers_alike(codec, tokenizer):
    env = ToyEnv()
    for limits, reason in (
        (EpisodeLimits(max_steps=4, max_turn_tokens=64, max_episode_tokens=1024), TerminationReason.MAX_STEPS),
        (EpisodeLimits(max_turns=2, max_turn_tokens=64, max_episode_tokens=1024), TerminationReason.MAX_STEPS),
        (EpisodeLimits(max_errors=2, max_turn_tokens=64, max_episode_tokens=1024), TerminationReason.TOO_MANY_ERRORS),
    ):
        text, tokens = text_run(env, SCRIPT, limits), token_run(env, SCRIPT, limits, codec, tokenizer)
        assert text.termination == tokens.termination == reason
        assert canonical(text.messages) == canonical(tokens.messages) and text.errors == tokens.errors
        assert not text.success and not tokens.success


def test_a_user_simulator_exception_is_user_error_in_both(codec, tokenizer):
    env = UserEnv(lambda task: BrokenUser())
    text, tokens = text_run(env, SCRIPT, LIMITS), token_run(env, SCRIPT, LIMITS, codec, tokenizer)
    expected = [ErrorRecord(kind="user", message="RuntimeError: boom", turn=1)]
    assert text.termination == tokens.termination == TerminationReason.USER_ERROR
    assert text.errors == tokens.errors == expected
    assert canonical(text.messages) == canonical(tokens.messages)
    assert text.reward == 0.0 and tokens.reward == 0.0


def test_a_user_infrastructure_failure_is_infra_error_in_both(codec, tokenizer):
    env = UserEnv(lambda task: DownUser())
    text, tokens = text_run(env, SCRIPT, LIMITS), token_run(env, SCRIPT, LIMITS, codec, tokenizer)
    assert text.termination == tokens.termination == TerminationReason.INFRA_ERROR
    assert text.errors == tokens.errors and [e.kind for e in text.errors] == ["infra"]
    assert text.is_infra_failure and text.reward_info is None  # not scored: the rollout retries it
    assert tokens.score is None and tokens.infra_error == text.infra_error is not None
    assert tokens.trajectory(env="toy", split="train", trial=0).is_infra_failure
    with pytest.raises(InfraError, match="1 of 1 episodes failed on infrastructure"):
        require_scored([tokens])  # training and its held-out evaluation refuse an unscored episode


def test_the_wall_clock_limit_applies_to_both(codec, tokenizer):
    env = UserEnv(lambda task: SlowUser([f"Request {task.metadata['seed']}: please pick a color."]))
    limits = EpisodeLimits(timeout_s=0.01, max_turn_tokens=64, max_episode_tokens=1024)
    text, tokens = text_run(env, SCRIPT, limits), token_run(env, SCRIPT, limits, codec, tokenizer)
    assert text.termination == tokens.termination == TerminationReason.TIMEOUT
    assert canonical(text.messages) == canonical(tokens.messages)
    assert [m.role for m in text.messages] == ["assistant", "user"]  # the agent never got to speak
    assert not text.success and not tokens.success
