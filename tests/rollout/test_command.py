"""`rollout(cfg, run_dir)`: checks before work, a self-explaining run dir, real HTTP clients, infra accounting."""

from __future__ import annotations

import pytest

from trace_rl.artifacts.trajectories import read_rollout_plans
from trace_rl.config import ModelConfig, TraceConfig
from trace_rl.errors import UserError
from trace_rl.rollout.stage import rollout
from trace_rl.types import Trajectory

from .fake_openai import FakeOpenAI
from .tau2_data import needs_tau2
from .toy import ToyPolicy, register_toy


def config(**rollout) -> TraceConfig:
    cfg = TraceConfig.model_validate(
        {"env": {"name": "toy"}, "rollout": {"policy": "toy", "trials": 2, "concurrency": 3, **rollout}}
    )
    return cfg


def test_success_writes_manifest_plan_and_stage(toy, run_dir):
    result = rollout(
        config(), run_dir, command="trace-rl rollout --env toy", progress="none", clients={"toy": ToyPolicy()}
    )
    assert result.ran == 12 and result.complete
    manifest = run_dir.manifest()
    assert manifest.commands == ["trace-rl rollout --env toy"]
    stage = manifest.stages["rollout"]
    assert stage.status == "done" and stage.summary["ran"] == 12 and stage.summary["complete"] is True
    plan = read_rollout_plans(run_dir)["toy/train"]
    assert plan.trials == 2 and len(plan.task_ids) == 6 and plan.identity["policy"] == "toy"
    assert len(run_dir.jsonl("rollout/trajectories.jsonl").latest()) == 12


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"env": {"name": "nope"}}, "unknown environment 'nope'"),
        ({"rollout": {"split": "dev"}}, "has no split 'dev'"),
        ({"rollout": {"task_ids": ["train-0", "zzz"]}}, "unknown task id"),
        ({"rollout": {"policy": "missing"}}, "unknown model 'missing'"),
        ({"rollout": {"user": "sim"}}, "unknown model 'sim'"),
    ],
)
def test_user_errors_before_any_work(toy, run_dir, change, message):
    data = config().model_dump()
    for section, values in change.items():
        data[section].update(values)
    with pytest.raises(UserError, match=message):
        rollout(TraceConfig.model_validate(data), run_dir, progress="none", clients={"toy": ToyPolicy()})
    assert not run_dir.root.exists()


def test_no_scripted_user_is_a_user_error(run_dir):
    register_toy(3, scripted=False)
    with pytest.raises(UserError, match="no scripted user: pass --user-model"):
        rollout(config(), run_dir, progress="none", clients={"toy": ToyPolicy()})
    assert not run_dir.root.exists()


def test_rerun_with_another_setup_is_refused(toy, run_dir):
    rollout(config(trials=1), run_dir, progress="none", clients={"toy": ToyPolicy()})
    with pytest.raises(UserError, match=r"different setup.*temperature"):
        rollout(config(trials=1, temperature=0.0), run_dir, progress="none", clients={"toy": ToyPolicy()})
    result = rollout(config(trials=2), run_dir, progress="none", clients={"toy": ToyPolicy()})
    assert result.resumed == 6 and result.ran == 6  # more trials is the same setup


def test_incomplete_run_is_recorded_failed_then_completed(toy, run_dir):
    flaky = ToyPolicy(lambda task, trial: "infra" if trial == 1 else "ok")
    result = rollout(config(), run_dir, progress="none", clients={"toy": flaky})
    assert result.infra == 6 and not result.complete
    stage = run_dir.manifest().stages["rollout"]
    assert stage.status == "failed" and stage.summary["infra"] == 6 and stage.summary["complete"] is False
    result = rollout(config(), run_dir, progress="none", clients={"toy": ToyPolicy()})
    assert result.ran == 6 and result.complete and run_dir.manifest().stages["rollout"].status == "done"


def openai_cfg(server: FakeOpenAI, **rollout_kw) -> TraceConfig:
    cfg = TraceConfig.model_validate(
        {"run": {"name": "x"}, "env": {"name": "toy", "max_steps": 6}, "rollout": {"policy": "srv", **rollout_kw}}
    )
    cfg.models["srv"] = ModelConfig(
        kind="openai", model="fake", base_url=server.base_url, max_retries=1, backoff_s=0.01
    )
    return cfg


def test_openai_server_token_ids_and_adapter_by_model_name(toy, run_dir):
    with FakeOpenAI(("fake", "lora-a")) as server:
        result = rollout(openai_cfg(server, adapter="lora-a", task_limit=2), run_dir, progress="none")
        assert result.ran == 2 and result.complete
        assert {b["model"] for b in server.bodies} == {"lora-a"}
        assert all(b.get("return_token_ids") is True for b in server.bodies)
    traj = Trajectory.model_validate(next(iter(run_dir.jsonl("rollout/trajectories.jsonl").latest().values())))
    assert traj.adapter == "lora-a" and traj.model == "fake"
    turns = [m for m in traj.messages if m.role == "assistant" and m.sampled is not None]
    assert turns and turns[0].sampled.completion_ids == [11, 12, 13, 14, 15, 16, 2]
    assert turns[0].sampled.prompt_ids is not None and traj.tokens.completion == 7 * len(turns)


def test_adapter_the_server_does_not_serve_is_a_user_error(toy, run_dir):
    with FakeOpenAI(("fake",)) as server, pytest.raises(UserError, match="does not serve 'lora-b'"):
        rollout(openai_cfg(server, adapter="lora-b"), run_dir, progress="none")
    assert not run_dir.root.exists()


def test_server_errors_are_infra_failures(toy, run_dir):
    with FakeOpenAI(("fake",), down=("fake",)) as server:
        result = rollout(openai_cfg(server, trials=1, stop_after_infra=2, concurrency=1), run_dir, progress="none")
    assert result.ran == 2 and result.infra == 2 and result.not_started == 4 and result.scored == 0
    record = next(iter(run_dir.jsonl("rollout/trajectories.jsonl").latest().values()))
    assert record["infra_error"].startswith("http_5xx: HTTP 503") and record["success"] is None


def test_server_down_through_the_cli_exits_1_and_records_infra(toy, tmp_path, capsys):
    from trace_rl.cli.app import main

    config_path = tmp_path / "c.yaml"
    config_path.write_text(
        "models:\n  dead:\n    kind: openai\n    model: m\n    base_url: http://127.0.0.1:9/v1\n"
        "    max_retries: 1\n    backoff_s: 0.01\n"
    )
    run = tmp_path / "dead"
    argv = ["rollout", "--env", "toy", "--model", "dead", "--config", str(config_path), "--run", str(run)]
    assert main([*argv, "--task-limit", "2", "--progress", "none"]) == 1
    assert "incomplete: 2 episode(s) left" in capsys.readouterr().err
    records = run.joinpath("rollout", "trajectories.jsonl").read_text().splitlines()
    assert len(records) == 2 and all('"infra_error": "connection' in r for r in records)


def test_tasks_without_a_scripted_user_are_named(run_dir):
    from .toy import ToyDomain

    class Partly(ToyDomain):
        def scripted_user(self, task):
            return None if task.id in ("train-1", "train-4") else super().scripted_user(task)

    from trace_rl.envs.registry import register_domain

    register_domain("toy", lambda rest, cfg: Partly(6))
    with pytest.raises(UserError, match=r"2 of 6 tasks have no scripted user \(train-1, train-4\)"):
        rollout(config(), run_dir, progress="none", clients={"toy": ToyPolicy()})
    result = rollout(config(task_ids=["train-0", "train-2"]), run_dir, progress="none", clients={"toy": ToyPolicy()})
    assert result.ran == 4 and result.complete


@needs_tau2
def test_local_backend_records_token_ids_with_and_without_adapter(tmp_path):
    """The in-process transformers + PEFT backend on the tiny random model: real sampled ids and log-probs."""
    pytest.importorskip("torch", reason="the local backend needs the [train] extra")
    from trace_rl.artifacts.store import RunDir
    from trace_rl.models.resolve import tiny_path
    from trace_rl.models.tiny import make_lora_adapter

    adapter = make_lora_adapter(tiny_path(), tmp_path / "lora-x", r=4, seed=3)
    for name in (None, "x"):
        cfg = TraceConfig.model_validate(
            {
                "env": {"name": "tau2:mock", "max_steps": 4},
                "rollout": {"policy": "tiny", "split": "base", "task_limit": 2, "max_tokens": 6, "adapter": name},
                "models": {
                    "tiny": {"kind": "local", "model": "tiny", "device": "cpu", "adapters": {"x": str(adapter)}}
                },
            }
        )
        run_dir = RunDir(tmp_path / f"local-{name}")
        result = rollout(cfg, run_dir, progress="none")
        assert result.ran == 2 and result.complete
        for record in run_dir.jsonl("rollout/trajectories.jsonl").latest().values():
            traj = Trajectory.model_validate(record)
            turns = [m.sampled for m in traj.messages if m.role == "assistant" and m.sampled is not None]
            assert traj.adapter == name and turns
            assert all(t.prompt_ids and t.completion_ids and len(t.logprobs) == len(t.completion_ids) for t in turns)
