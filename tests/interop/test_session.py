"""`EpisodeSession` and `resolve_source`: one trace-rl episode driven one agent message at a time, scored by the same
scorer training uses, on every kind of source; bad sources are one-line user errors."""

from __future__ import annotations

import asyncio

import pytest

from trace_rl.engine.episode import EpisodeLimits
from trace_rl.errors import UserError
from trace_rl.interop.session import EpisodeSession, agent_message
from trace_rl.interop.sources import SourceRef, resolve_source


def _gold_calls(session: EpisodeSession) -> list[dict]:
    assert session.task is not None and session.task.evaluation_criteria is not None
    actions = session.task.evaluation_criteria.actions or []
    return [{"tool_calls": [{"function": {"name": a.name, "arguments": a.arguments}}]} for a in actions]


def test_a_gold_episode_scores_what_the_training_scorer_gives() -> None:
    source = resolve_source("library:lookup_answer").load()
    session = EpisodeSession(source)
    first = session.reset(3)
    assert first.messages[0]["role"] == "system" and first.messages[-1]["role"] == "user"
    assert not first.done and first.reward == 0.0
    for action in _gold_calls(session):
        state = session.step(action)
        assert state.new_messages and state.new_messages[0]["role"] == "tool"
    info = session.task.evaluation_criteria.communicate_info or []
    state = session.step("The answer: " + ", ".join(info))
    assert state.done and state.success and state.termination == "user_stop"
    expected = asyncio.run(source.score(session.episode.env, session.task, session.messages, session.termination))
    assert state.reward == pytest.approx(expected.shaped) and state.reward > 0.9
    with pytest.raises(UserError, match="episode is over"):
        session.step("more")


def test_a_wrong_agent_scores_lower_and_the_same_seed_is_the_same_task() -> None:
    source = resolve_source("library:lookup_answer").load()
    session = EpisodeSession(source, limits=EpisodeLimits(max_steps=6))
    first = session.reset(3)
    state = session.step("I do not know.")
    while not state.done:
        state = session.step("I still do not know.")
    assert not state.success and state.reward < 0.9
    again = EpisodeSession(source).reset(3)
    assert again.task_id == first.task_id and again.messages == first.messages
    assert EpisodeSession(source).reset(4).task_id != first.task_id


def test_agent_messages_from_text_and_openai_dicts() -> None:
    text = agent_message('<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>', turn=2)
    assert text.tool_calls and text.tool_calls[0].name == "search" and text.tool_calls[0].arguments == {"q": "x"}
    raw = agent_message({"tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": '{"a": 1'}}]}, turn=1)
    assert raw.tool_calls[0].id == "c1" and raw.tool_calls[0].parse_error  # bad JSON is the agent's error, kept
    assert agent_message({"content": "hello"}, turn=1).content == "hello"
    with pytest.raises(UserError):
        agent_message(42, turn=1)  # type: ignore[arg-type]


def test_sources_resolve_and_bad_ones_are_user_errors(tmp_path) -> None:
    ref = resolve_source("library", split="test")
    assert (ref.kind, ref.domain, ref.split) == ("domain", "library", "test")
    assert SourceRef.model_validate_json(ref.model_dump_json()) == ref
    assert ref.seeds()["train"]  # seeds index the split's tasks
    with pytest.raises(UserError, match="known"):
        resolve_source("library:no_such_family")
    with pytest.raises(UserError, match="no split"):
        resolve_source("library", split="nope")
    with pytest.raises(UserError, match="not a capability environment folder"):
        resolve_source(str(tmp_path))
    with pytest.raises(UserError, match="reset"):
        EpisodeSession(ref.load()).step("hi")
