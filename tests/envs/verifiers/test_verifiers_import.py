"""`verifiers:<module>` targets: a verifiers 0.4.0 environment package (written here, loaded by verifiers' own loader)
runs in process as a trace-rl domain: its rows are the tasks, its Toolset's `@vf.tool`s the agent's tools, its
`@vf.reward` the reward; `trace-rl rollout` writes trajectories whose rewards are the environment's own (recomputed
here by verifiers' own `Task.score`)."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verifiers")
import verifiers.v1 as vf

from trace_rl.cli.app import main
from trace_rl.config import EnvConfig
from trace_rl.engine.text_driver import EpisodeSpec, domain_agent, run_episode
from trace_rl.envs.registry import load_domain
from trace_rl.errors import UserError
from trace_rl.models.scripted import ScriptedClient
from trace_rl.types import Trajectory

MODULE = "trace_rl_test_vf_sums"
PACKAGE = '''
"""A verifiers environment: add two numbers with the calculator, then say the sum."""

import verifiers.v1 as vf


class CalcToolset(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = "calc"

    @vf.tool
    def add(self, a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)


class SumData(vf.TaskData):
    answer: int


class SumTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class SumTask(vf.Task[SumData, vf.State, SumTaskConfig]):
    @classmethod
    def toolsets(cls, config):
        return [CalcToolset(config.tools)]

    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return float(trace.last_reply.strip() == str(self.data.answer))

    @vf.reward(weight=0.5)
    async def used_tool(self, trace: vf.Trace) -> float:
        return float(bool(trace.tool_messages))


class SumConfig(vf.TasksetConfig):
    task: SumTaskConfig = SumTaskConfig()
    num_tasks: int = 6


class SumTaskset(vf.Taskset[SumTask, SumConfig]):
    def load(self):
        for i in range(self.config.num_tasks):
            yield SumTask(
                SumData(id=f"sum-{i}", prompt=f"What is {i} + {7 * i + 3}?", system_prompt="Be exact.", answer=8*i + 3),
                self.config.task,
            )


__all__ = ["SumTaskset"]
'''


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "pkgs" / MODULE).mkdir(parents=True)
    (tmp_path / "pkgs" / MODULE / "__init__.py").write_text(textwrap.dedent(PACKAGE))
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    return MODULE


def domain_of(module: str, **options: Any):
    return load_domain(f"verifiers:{module}", EnvConfig(name="verifiers", options=options))


def add(a: int, b: int) -> dict[str, Any]:
    return {"tool_calls": [{"name": "calc_add", "arguments": {"a": a, "b": b}}]}


def play(domain, task, script: list[Any]) -> Trajectory:
    env = domain.make_env()
    agent = domain_agent(domain, ScriptedClient(script), tools=env.tool_schemas())
    spec = EpisodeSpec(env=domain.name, split="train", seed=int(task.metadata["seed"]))
    return asyncio.run(run_episode(env=env, task=task, agent=agent, user=domain.scripted_user(task), spec=spec))


def own_reward(module: str, row: int, traj: Trajectory) -> float:
    """verifiers' own scoring of the trajectory's conversation (the taskset loaded afresh, no trace-rl in between)."""
    env = vf.load_environment(vf.resolve_env_config({"taskset": {"id": module}}))
    task = list(env.taskset)[row]
    trace = vf.Trace(
        task=vf.TraceTask(type="SumTask", data=task.data, key=task.key, hash=task.hash),
        agent=vf.AgentInfo(config=vf.AgentConfig(model="check")),
    )
    msgs: list[Any] = [vf.UserMessage(content="opening")]
    for m in traj.messages:
        if m.role == "assistant":
            calls = [vf.ToolCall(id=c.id, name=c.name, arguments=json.dumps(c.arguments)) for c in m.tool_calls or []]
            msgs.append(vf.AssistantMessage(content=m.content, tool_calls=calls or None))
        elif m.role == "tool":
            msgs.append(vf.ToolMessage(tool_call_id=m.tool_call_id or "", content=m.content or ""))
    trace.nodes = [vf.MessageNode(parent=i - 1 if i else None, message=m, sampled=i > 0) for i, m in enumerate(msgs)]
    asyncio.run(task.score(trace))
    return trace.reward


def test_rows_tools_and_rewards_map_onto_a_domain(module):
    domain = domain_of(module, n_train=4, n_test=2, success_threshold=1.5)
    train, test = domain.tasks("train"), domain.tasks("test")
    assert [t.id for t in train] == ["sum-0", "sum-1", "sum-2", "sum-3"] and [t.id for t in test] == ["sum-4", "sum-5"]
    env = domain.make_env()
    opening = env.reset(train[2])
    assert opening[0].role == "user" and "Be exact." in opening[0].content and "2 + 17" in opening[0].content
    (tool,) = env.tool_schemas()
    assert tool["function"]["name"] == "calc_add" and set(tool["function"]["parameters"]["properties"]) == {"a", "b"}

    gold = play(domain, train[2], [add(2, 17), "19"])
    assert [m.content for m in gold.messages if m.role == "tool"] == ["19"]
    assert gold.reward_info is not None and gold.reward_info.details["verifiers_reward"] == 1.5 == own_reward(
        module, 2, gold
    )
    assert gold.reward == 1.0 and gold.success
    wrong = play(domain, train[2], [add(2, 16), "18"])
    assert wrong.reward_info.details["verifiers_reward"] == 0.5 == own_reward(module, 2, wrong)
    assert wrong.reward == pytest.approx(0.5 / 1.5) and not wrong.success


def test_rollout_with_the_tiny_model_records_the_environments_rewards(tmp_path, module):
    run = tmp_path / "run"
    argv = ["rollout", "--env", f"verifiers:{module}", "--model", "tiny", "--run", str(run), "--task-limit", "2"]
    assert main([*argv, "--max-tokens", "8", "--max-steps", "6", "--progress", "none"]) == 0
    lines = (run / "rollout" / "trajectories.jsonl").read_text().splitlines()
    trajs = [Trajectory.model_validate_json(line) for line in lines if line.strip()]
    assert sorted(t.task_id for t in trajs) == ["sum-0", "sum-1"]
    for traj in trajs:
        assert traj.infra_error is None and traj.reward_info is not None
        scored = str(traj.termination) in ("user_stop", "agent_stop")
        expected = own_reward(module, int(traj.task_id.split("-")[1]), traj)
        assert traj.reward_info.details["verifiers_reward"] == expected
        assert traj.reward == (min(expected, 1.0) if scored else 0.0)


def test_an_exported_trace_rl_package_loads_as_a_target(tmp_path, monkeypatch):
    out = tmp_path / "exp"
    assert main(["export", "env", "library:lookup_answer", "--format", "verifiers", "--out", str(out)]) == 0
    monkeypatch.syspath_prepend(str(out))
    domain = domain_of("trace-rl-lookup-answer", n_train=3, n_test=1)
    assert len(domain.tasks("train")) == 3 and domain.tasks("train")[0].id.startswith("lookup_answer-train-")


def test_an_unknown_module_exits_2_with_one_line(tmp_path, capsys):
    argv = ["rollout", "--env", "verifiers:no_such_vf_module_xyz", "--model", "tiny", "--run", str(tmp_path / "r")]
    assert main(argv) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "no_such_vf_module_xyz" in lines[0] and "not found" in lines[0]
    with pytest.raises(UserError, match="colour"):
        domain_of("no_such_vf_module_xyz", colour="blue")
