"""`openenv:<folder>` / `openenv:<module>` targets: an OpenEnv environment (a package folder in OpenEnv's layout,
`guess_env/`; an MCP environment module; a package trace-rl exported) runs in process as a trace-rl domain, and
`trace-rl rollout` writes trajectories whose rewards are the environment's own (recomputed here by stepping the
environment's class directly)."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openenv")

from trace_rl.cli.app import main
from trace_rl.config import EnvConfig
from trace_rl.engine.text_driver import EpisodeSpec, domain_agent, run_episode
from trace_rl.envs.registry import load_domain
from trace_rl.errors import UserError
from trace_rl.models.scripted import ScriptedClient
from trace_rl.types import Trajectory

GUESS = Path(__file__).parent / "guess_env"


def guess_domain(**options: Any):
    return load_domain(f"openenv:{GUESS}", EnvConfig(name="openenv", options=options))


def play(domain, task, script: list[Any]) -> Trajectory:
    env = domain.make_env()
    agent = domain_agent(domain, ScriptedClient(script), tools=env.tool_schemas())
    spec = EpisodeSpec(env=domain.name, split="train", seed=int(task.metadata["seed"]))
    return asyncio.run(run_episode(env=env, task=task, agent=agent, user=domain.scripted_user(task), spec=spec))


def act(**arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": "act", "arguments": arguments}]}


def direct_return(env_cls: type, action_cls: type, seed: int, guesses: list[int]) -> float:
    """The environment's own return for `guesses` (OpenEnv's classes, no trace-rl in between)."""
    env, total = env_cls(), 0.0
    env.reset(seed=seed)
    for g in guesses:
        obs = env.step(action_cls(guess=g))
        total += obs.reward or 0.0
        if obs.done:
            break
    return total


def test_a_package_folder_is_a_domain_with_seeded_tasks_and_an_act_tool():
    domain = guess_domain(n_train=4, n_test=3, test_offset=50)
    train, test = domain.tasks("train"), domain.tasks("test")
    assert [t.metadata["seed"] for t in train] == [0, 1, 2, 3]
    assert [t.metadata["seed"] for t in test] == [50, 51, 52]
    assert domain.classes.env_cls.__name__ == "GuessEnvironment" and not domain.classes.is_mcp
    (tool,) = domain.make_env().tool_schemas()
    params = tool["function"]["parameters"]
    assert tool["function"]["name"] == "act" and set(params["properties"]) == {"guess"} and "metadata" not in params
    assert "Guess the hidden digit of the seed" in domain.system_prompt()  # openenv.yaml's description

    env_cls, action_cls = domain.classes.env_cls, domain.classes.action_cls
    task = train[1]
    target = next(d for d in range(10) if direct_return(env_cls, action_cls, 1, [d]) > 0)
    wrong = (target + 1) % 10
    traj = play(domain, task, [act(guess=42), act(guess=wrong), act(guess=target), "It is the digit I said."])
    expected = direct_return(env_cls, action_cls, 1, [wrong, target])  # 42 is refused, not stepped
    assert 0 < expected < 1 and traj.reward == expected and not traj.success
    assert traj.reward_info is not None and traj.reward_info.details["steps"] == 2
    assert [m.error for m in traj.messages if m.role == "tool"] == [True, False, False]

    lenient = guess_domain(n_train=2, success_threshold=expected)
    traj = play(lenient, lenient.tasks("train")[1], [act(guess=wrong), act(guess=target), "Done."])
    assert traj.reward == 1.0 and traj.success and traj.reward_info.details["return"] == expected


def rollout_trajectories(run: Path) -> list[Trajectory]:
    lines = (run / "rollout" / "trajectories.jsonl").read_text().splitlines()
    return [Trajectory.model_validate_json(line) for line in lines if line.strip()]


def test_rollout_with_the_tiny_model_records_the_environments_rewards(tmp_path):
    run = tmp_path / "run"
    argv = ["rollout", "--env", f"openenv:{GUESS}", "--model", "tiny", "--run", str(run), "--task-limit", "2"]
    assert main([*argv, "--max-tokens", "8", "--max-steps", "6", "--progress", "none"]) == 0
    trajs = rollout_trajectories(run)
    assert sorted(t.task_id for t in trajs) == ["guess-0", "guess-1"]
    domain = guess_domain()
    for traj in trajs:
        assert traj.infra_error is None and traj.reward_info is not None
        guesses = [
            c.arguments.get("guess")
            for m in traj.messages
            if m.role == "assistant"
            for c in m.tool_calls or []
            if c.name == "act" and c.parse_error is None and isinstance(c.arguments.get("guess"), int)
        ]
        expected = direct_return(domain.classes.env_cls, domain.classes.action_cls, traj.seed, guesses)
        assert traj.reward_info.details["return"] == expected
        assert traj.reward == (min(expected, 1.0) if str(traj.termination) in ("user_stop", "agent_stop") else 0.0)


def test_rollout_from_a_config_with_a_scripted_policy(tmp_path):
    domain = guess_domain()
    env_cls, action_cls = domain.classes.env_cls, domain.classes.action_cls
    target = next(d for d in range(10) if direct_return(env_cls, action_cls, 0, [d]) > 0)
    script = [act(guess=(target + 5) % 10), act(guess=target), "Found it."]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"run: {{name: g, runs_dir: {tmp_path}}}\n"
        f"models: {{policy: {{kind: scripted, script: {json.dumps(script)}}}}}\n"
        f"env: {{name: 'openenv:{GUESS}', options: {{n_train: 1, n_test: 1}}, max_steps: 12}}\n"
        "rollout: {policy: policy}\n"
    )
    assert main(["rollout", "--config", str(cfg), "--progress", "none"]) == 0
    (traj,) = rollout_trajectories(tmp_path / "g")
    assert traj.env == f"openenv:{GUESS}" and traj.task_id == "guess-0"
    assert traj.reward == direct_return(env_cls, action_cls, 0, [(target + 5) % 10, target]) == 0.75


MCP_MODULE = '''
"""An MCP OpenEnv environment: reach the seed's target total with `add`; reaching it pays 1 and ends the episode."""

from fastmcp import FastMCP
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.types import Observation, State


class CounterEnvironment(MCPEnvironment):
    def __init__(self):
        mcp = FastMCP("counter")
        self.total, self.target = 0, 0

        @mcp.tool()
        def add(n: int) -> int:
            """Add n to the running total; returns the total."""
            self.total += n
            return self.total

        super().__init__(mcp)

    def reset(self, seed=None, episode_id=None, **kwargs):
        self.total, self.target = 0, 3 + (seed or 0)
        return Observation(metadata={"target": self.target})

    def step(self, action, timeout_s=None, **kwargs):
        obs = super().step(action, timeout_s=timeout_s, **kwargs)
        if self.target and self.total == self.target:
            obs.reward, obs.done = 1.0, True
        return obs

    def _step_impl(self, action, timeout_s=None, **kwargs):
        return Observation()

    @property
    def state(self):
        return State()
'''


def test_an_mcp_environment_module_gives_its_own_tools(tmp_path, monkeypatch):
    (tmp_path / "counter_env_mod.py").write_text(textwrap.dedent(MCP_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    domain = load_domain("openenv:counter_env_mod:CounterEnvironment", EnvConfig(name="x", options={"n_train": 3}))
    assert domain.classes.is_mcp and domain.classes.action_cls is None
    (tool,) = domain.make_env().tool_schemas()
    assert tool["function"]["name"] == "add" and "n" in tool["function"]["parameters"]["properties"]
    task = domain.tasks("train")[2]  # target 3 + 2 = 5
    add = [{"tool_calls": [{"name": "add", "arguments": {"n": n}}]} for n in (2, "x", 3)]
    traj = play(domain, task, [*add, {"tool_calls": [{"name": "add", "arguments": {"n": 1}}]}, "Total reached."])
    tool_msgs = [m for m in traj.messages if m.role == "tool"]
    assert [m.content.splitlines()[0] for m in tool_msgs[::2]] == ["2", "5"] and tool_msgs[1].error
    assert tool_msgs[3].error and "over" in tool_msgs[3].content  # after done: no more steps
    assert traj.reward == 1.0 and traj.success and traj.reward_info.details["rewards"] == [0.0, 0.0, 1.0]


def test_a_package_trace_rl_exported_imports_back_with_the_same_reward(tmp_path):
    from trace_rl.interop.session import EpisodeSession
    from trace_rl.interop.sources import resolve_source

    out = tmp_path / "lookup"
    assert main(["export", "env", "library:lookup_answer", "--format", "openenv", "--out", str(out)]) == 0
    domain = load_domain(f"openenv:{out}", EnvConfig(name="x", options={"n_train": 2}))
    assert domain.classes.env_cls.__name__ == "LookupAnswerEnvironment"
    task = domain.tasks("train")[1]
    ref = resolve_source("library:lookup_answer")
    gold = ref.load().make_task(1).evaluation_criteria
    call = {
        "id": "c0",
        "type": "function",
        "function": {"name": "search_catalog", "arguments": gold.actions[0].arguments},
    }
    answer = " ".join(gold.communicate_info)
    traj = play(domain, task, [act(tool_calls=[call]), act(content=answer), "Answered."])
    session = EpisodeSession(ref.load())
    session.reset(1)
    session.step({"tool_calls": [call]})
    expected = session.step({"content": answer})
    assert expected.done and traj.reward == expected.reward == 1.0 and traj.success


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("{tmp}/plain", "is not an OpenEnv environment (no openenv.yaml)"),
        ("{tmp}/missing", "is not an OpenEnv environment (no such folder)"),
        ("no_such_module_for_openenv_xyz", "import failed: ModuleNotFoundError"),
    ],
)
def test_what_is_not_an_openenv_environment_exits_2_with_one_line(tmp_path, capsys, name, message):
    (tmp_path / "plain").mkdir()
    argv = [
        "rollout",
        "--env",
        f"openenv:{name.format(tmp=tmp_path)}",
        "--model",
        "scripted",
        "--run",
        str(tmp_path / "r"),
    ]
    assert main(argv) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0]


def test_bad_options_are_user_errors():
    with pytest.raises(UserError, match="test_offset"):
        guess_domain(n_train=10, test_offset=5)
    with pytest.raises(UserError, match="no Environment class named 'Nope'"):
        guess_domain(env_class="Nope")
    with pytest.raises(UserError, match="colour"):
        guess_domain(colour="blue")
