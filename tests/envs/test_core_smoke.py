"""The shared engine on a toy toolkit: toolkit errors, orchestrator hops, τ² scoring gates."""

from __future__ import annotations

import asyncio

from trace_rl.engine.episode import EpisodeLimits
from trace_rl.engine.text_driver import Agent, EpisodeSpec, run_episode
from trace_rl.envs.base import ToolkitEnvironment
from trace_rl.envs.toolkit import DB, ToolKit, ToolType, tool
from trace_rl.envs.users import ScriptedUser
from trace_rl.models.base import ModelResponse
from trace_rl.types import Action, EvaluationCriteria, Message, Task, TerminationReason, ToolCall


class CounterDB(DB):
    counts: dict[str, int]


class CounterTools(ToolKit):
    db: CounterDB

    @tool(ToolType.READ)
    def get_count(self, name: str) -> int:
        """Read a counter.

        Args:
            name: The counter's name.
        """
        if name not in self.db.counts:
            raise ValueError(f"Counter {name} not found")
        return self.db.counts[name]

    @tool(ToolType.WRITE)
    def increment(self, name: str, by: int = 1) -> int:
        """Increment a counter.

        Args:
            name: The counter's name.
            by: Amount to add.
        """
        self.db.counts[name] = self.db.counts.get(name, 0) + by
        return self.db.counts[name]


class ListClient:
    name = "list"

    def __init__(self, messages: list[Message]) -> None:
        self.messages = list(messages)

    async def chat(self, messages, tools=None, *, adapter=None, sampling=None) -> ModelResponse:
        return ModelResponse(message=self.messages.pop(0), completion_tokens=3)

    async def aclose(self) -> None:
        return None


def make_env() -> ToolkitEnvironment:
    return ToolkitEnvironment(toolkit_cls=CounterTools, db=CounterDB(counts={"a": 1}), policy="Be nice.")


TASK = Task(
    id="t1",
    user_scenario="increment a",
    evaluation_criteria=EvaluationCriteria(
        actions=[Action(action_id="0", name="increment", arguments={"name": "a", "by": 2})], communicate_info=["3"]
    ),
)


def call(tool_name: str, **args) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(id=f"c_{tool_name}", name=tool_name, arguments=args)])


def run(agent_msgs: list[Message], user_lines: list[str], **kw):
    env = make_env()
    agent = Agent(ListClient(agent_msgs), "sys", env.tool_schemas())
    return asyncio.run(
        run_episode(
            env=env,
            task=TASK,
            agent=agent,
            user=ScriptedUser(user_lines),
            spec=EpisodeSpec(env="toy", split="test"),
            **kw,
        )
    )


def test_schema_from_docstring():
    schema = {s["function"]["name"]: s for s in make_env().tool_schemas()}
    inc = schema["increment"]["function"]["parameters"]
    assert inc["required"] == ["name"] and inc["properties"]["by"]["type"] == "integer"
    assert inc["properties"]["name"]["description"] == "The counter's name."


def test_tool_errors_are_results():
    env = make_env()
    env.reset(TASK)
    assert env.execute(ToolCall(id="1", name="nope")).content == "Error: Tool 'nope' not found."
    bad = env.execute(ToolCall(id="2", name="get_count", arguments={"nam": "a"}))
    assert bad.error and "unexpected keyword argument 'nam'" in bad.content
    assert (
        env.execute(ToolCall(id="3", name="get_count", arguments={"name": "zz"})).content
        == "Error: Counter zz not found"
    )


def test_gold_episode_scores_one_and_wrong_write_scores_zero():
    good = run(
        [
            call("get_count", name="a"),
            call("increment", name="a", by=2),
            Message(role="assistant", content="It is 3 now."),
        ],
        ["please add 2 to a", "###STOP###"],
    )
    assert good.termination == TerminationReason.USER_STOP
    assert good.reward == 1.0 and good.success
    assert [m.role for m in good.messages][:4] == ["assistant", "user", "assistant", "tool"]
    bad = run(
        [call("increment", name="a", by=1), Message(role="assistant", content="It is 3 now.")], ["add 2", "###STOP###"]
    )
    assert (
        bad.reward == 0.0 and bad.reward_info.breakdown["DB"] == 0.0 and bad.reward_info.breakdown["COMMUNICATE"] == 1.0
    )


def test_max_steps_scores_zero():
    msgs = [call("get_count", name="a") for _ in range(10)]
    traj = run(
        msgs,
        ["hi"],
        limits=EpisodeLimits(max_steps=5),
    )
    assert traj.termination == TerminationReason.MAX_STEPS and traj.reward == 0.0


def test_trajectory_round_trips():
    traj = run([call("increment", name="a", by=2), Message(role="assistant", content="3")], ["go", "###STOP###"])
    again = type(traj).model_validate_json(traj.model_dump_json())
    assert again == traj


class OverflowClient(ListClient):
    async def chat(self, messages, tools=None, *, adapter=None, sampling=None) -> ModelResponse:
        from trace_rl.errors import InfraError

        raise InfraError("context_length", "HTTP 400: maximum context length exceeded")


def test_context_overflow_is_an_agent_failure_not_infra():
    env = make_env()
    agent = Agent(OverflowClient([]), "sys", env.tool_schemas())
    traj = asyncio.run(
        run_episode(env=env, task=TASK, agent=agent, user=ScriptedUser(["hi"]), spec=EpisodeSpec(env="t", split="x"))
    )
    assert traj.termination == TerminationReason.AGENT_ERROR and traj.reward == 0.0
    assert traj.infra_error is None and traj.errors[-1].kind == "protocol"
