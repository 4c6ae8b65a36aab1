"""ToolSandbox's LLM user: its prompt holds the scenario's few-shot turns as real chat turns with roles flipped and
its instruction as system turn; calling `end_conversation` (or writing ###STOP###) ends the episode; the engine
builds it for an LLM-user rollout."""

from __future__ import annotations

import asyncio

from trace_rl.engine.plan import Job
from trace_rl.engine.runner import EpisodeFactory
from trace_rl.envs.registry import load_domain
from trace_rl.envs.toolsandbox.episode import first_user_message, user_instruction
from trace_rl.envs.toolsandbox.user import ToolSandboxLLMUser
from trace_rl.models.base import ModelResponse
from trace_rl.testing.playback import PlaybackClient, call, say
from trace_rl.types import Message, TerminationReason

from .helpers import needs_data

pytestmark = needs_data
SCENARIO = "search_message_with_recency_latest"


class RecordingUserModel:
    """Plays the user model: answers with the given messages in order and records every prompt and tool list."""

    name = "recording-user"

    def __init__(self, replies: list[Message]) -> None:
        self.replies = list(replies)
        self.prompts: list[list[Message]] = []
        self.tools: list[list[dict]] = []

    async def chat(self, messages, tools=None, *, adapter=None, sampling=None):
        self.prompts.append(list(messages))
        self.tools.append(list(tools or []))
        return ModelResponse(message=self.replies.pop(0))

    async def aclose(self) -> None:
        return None


def _rollout(user_model: RecordingUserModel, agent: list[Message]):
    domain = load_domain("toolsandbox:base_offline")
    task = next(t for t in domain.tasks("all") if t.id == SCENARIO)
    factory = EpisodeFactory(
        domain, "toolsandbox:base_offline", "all", PlaybackClient(agent), "playback", user_client=user_model
    )
    return domain, task, asyncio.run(factory.run(Job(task=task, trial=0, seed=0, id="j0")))


def test_prompt_has_flipped_few_shot_turns_and_the_instruction() -> None:
    domain = load_domain("toolsandbox:base_offline")
    task = next(t for t in domain.tasks("all") if t.id == SCENARIO)
    scenario = domain.scenario(task)
    user = ToolSandboxLLMUser(RecordingUserModel([]), scenario)
    history = [Message(role="user", content=first_user_message(scenario)), say("Which message do you mean?")]
    prompt = user.prompt(history)
    roles = [m.role for m in prompt]
    # few-shot block: its instruction, the example user's turns as assistant, the example agent's as user
    assert roles[:3] == ["system", "assistant", "user"]
    assert prompt[1].content == "I want to send a message to someone." and prompt[1].example
    assert prompt[2].content.startswith("Certainly! I can help you with sending a message.") and prompt[2].example
    end = next(i for i, m in enumerate(prompt) if m.tool_calls)
    assert prompt[end].role == "assistant" and prompt[end].tool_calls[0].name == "end_conversation"
    assert prompt[end + 1].role == "tool" and prompt[end + 1].tool_call_id == prompt[end].tool_calls[0].id
    # then this scenario: its instruction as system turn, the first user message as the user's own turn, the
    # agent's live reply as a user turn
    assert prompt[end + 2].role == "system" and prompt[end + 2].content == user_instruction(scenario)
    assert prompt[end + 3].role == "assistant" and prompt[end + 3].content == "What does my most recent message say?"
    assert prompt[-1].role == "user" and prompt[-1].content == "Which message do you mean?"
    assert len(prompt) == end + 5 and not prompt[end + 3].example
    assert [t["function"]["name"] for t in user.tools] == ["end_conversation"]


def test_calling_end_conversation_ends_the_episode() -> None:
    search = call("search_messages", creation_timestamp_upperbound=1768478400.0)
    answer = say("Your most recent message says 'Good, keep me posted'.")
    user_model = RecordingUserModel(
        [Message(role="assistant", content="The latest one."), call("end_conversation", call_id="u1")]
    )
    _, _, trajectory = _rollout(user_model, [say("Which message do you mean?"), search, answer])
    assert trajectory.termination == TerminationReason.USER_STOP
    assert len(user_model.prompts) == 2 and trajectory.messages[-1].content == "###STOP###"
    assert user_model.tools[0] and user_model.tools[0][0]["function"]["name"] == "end_conversation"
    assert user_model.prompts[1][-1].content == answer.content  # the agent's answer, as a user turn
    assert trajectory.reward == 1.0  # both milestones met after the clarification turn


def test_a_stop_token_is_the_fallback() -> None:
    user_model = RecordingUserModel([Message(role="assistant", content="Thanks! ###STOP###")])
    _, _, trajectory = _rollout(user_model, [say("I am sorry, but I cannot assist with that.")])
    assert trajectory.termination == TerminationReason.USER_STOP and len(user_model.prompts) == 1
    assert trajectory.messages[-1].content == "###STOP###"
    assert trajectory.reward < 1.0
