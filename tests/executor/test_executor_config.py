"""The executor section of the config, the endpoint pool and the local executor (no Ray needed)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from trace_rl.config import ExecutorConfig, ModelConfig, TraceConfig, executor_with, load_config
from trace_rl.errors import UserError
from trace_rl.executor import LocalExecutor, WorkJob, make_executor
from trace_rl.models.base import ModelResponse
from trace_rl.models.pool import EndpointPool, episode_scope
from trace_rl.training.launcher import accelerate_command, train_job
from trace_rl.types import Message


def test_executor_section_is_typed_and_strict(tmp_path: Path) -> None:
    cfg = TraceConfig.model_validate(
        {
            "executor": {
                "kind": "ray",
                "address": "auto",
                "num_workers": 8,
                "gpus_per_train_job": 4,
                "stages": {"train": "local"},
            }
        }
    )
    assert cfg.executor.kind == "ray" and cfg.executor.for_stage("rollout").kind == "ray"
    assert cfg.executor.for_stage("train").kind == "local" and TraceConfig().executor.kind == "local"
    bad_values = [
        ({"nodes": 3}, "executor.nodes"),
        ({"kind": "dask"}, "executor.kind"),
        ({"num_workers": 0}, "executor.num_workers"),
        ({"stages": {"report": "ray"}}, "executor.stages"),
    ]
    for bad, field in bad_values:
        path = tmp_path / "c.yaml"
        path.write_text(f"executor: {bad}\n".replace("'", ""))
        with pytest.raises(UserError, match=field.replace(".", r"\.")):
            load_config(path)
    assert executor_with(cfg.executor, "local").stages == {}  # --executor applies to every stage
    with pytest.raises(UserError, match="--executor"):
        executor_with(cfg.executor, "spark")
    assert isinstance(make_executor(cfg.executor, "train"), LocalExecutor)


def test_base_urls_make_a_pool_and_exclude_base_url() -> None:
    from trace_rl.models.registry import build_client

    urls = ["http://a:8000/v1", "http://b:8000/v1", "http://c:8000/v1"]
    pool = build_client(ModelConfig(kind="openai", model="m", base_urls=urls), name="policy")
    assert isinstance(pool, EndpointPool) and [c.base_url for c in pool.clients] == urls
    one = build_client(ModelConfig(kind="openai", model="m", base_urls=urls[:1]), name="policy")
    assert one.base_url == urls[0]
    with pytest.raises(ValueError, match="base_url or base_urls"):
        ModelConfig(kind="openai", model="m", base_url=urls[0], base_urls=urls)
    assert ModelConfig(base_urls=urls).endpoints() == urls


class Echo:
    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: list[str] = []

    async def chat(self, messages, tools=None, *, adapter=None, sampling=None) -> ModelResponse:
        self.seen.append(messages[-1].text)
        return ModelResponse(message=Message(role="assistant", content=self.name))

    async def aclose(self) -> None:
        return None


def test_pool_balances_episodes_and_keeps_each_on_one_endpoint() -> None:
    clients = [Echo("a"), Echo("b"), Echo("c")]
    pool = EndpointPool(clients, offset=0)

    async def episode(i: int) -> set[str]:
        with episode_scope():
            names = set()
            for turn in range(3):
                await asyncio.sleep(0.001 * ((i + turn) % 3))
                names.add((await pool.chat([Message(role="user", content=f"{i}/{turn}")])).message.text)
            return names

    async def main() -> list[set[str]]:
        return await asyncio.gather(*(episode(i) for i in range(9)))

    served = asyncio.run(main())
    assert all(len(s) == 1 for s in served)  # sticky: every turn of an episode on one endpoint
    assert pool.episodes == [3, 3, 3] and pool.leased == [0, 0, 0]  # balanced, all released
    # without a lease (a wrapping client): pinned by the conversation's opening, so still sticky
    convo = [Message(role="system", content="s"), Message(role="user", content="hello")]
    assert len({pool.client_for([*convo, Message(role="assistant", content=str(t))]).name for t in range(5)}) == 1


def test_local_executor_runs_jobs_in_order_and_stops_at_the_first_error() -> None:
    ran: list[str] = []

    def job(name: str, fail: bool = False):
        def fn() -> str:
            ran.append(name)
            if fail:
                raise RuntimeError(name)
            return name.upper()

        return WorkJob(name=name, fn=fn)

    assert LocalExecutor().run_jobs([job("a"), job("b")]) == ["A", "B"]
    with pytest.raises(RuntimeError, match="x"):
        LocalExecutor().run_jobs([job("x", fail=True), job("y")])
    assert ran == ["a", "b", "x"]


def test_train_jobs_ask_for_their_gpus_and_build_the_accelerate_launch(tmp_path: Path) -> None:
    ray_cfg = ExecutorConfig(
        kind="ray",
        gpus_per_train_job=4,
        cpus_per_train_job=8,
        train_launcher="accelerate",
        accelerate_config=Path("zero2.yaml"),
    )
    job = train_job(ray_cfg, name="cap", backend=None, env=None, cfg=None, run_root=tmp_path, from_run=True)
    assert (job.name, job.num_gpus, job.num_cpus) == ("train:cap", 4, 8)
    local = train_job(
        ExecutorConfig(gpus_per_train_job=4),
        name="cap",
        backend=None,
        env=None,
        cfg=None,
        run_root=tmp_path,
        from_run=True,
    )
    assert local.num_gpus == 0  # the local executor ignores the Ray resources
    cmd = accelerate_command(tmp_path, "cap", tmp_path / "l.yaml", 4, Path("zero2.yaml"))
    assert cmd[1:] == ["-m", "accelerate.commands.launch", "--num_processes", "4", "--config_file", "zero2.yaml",
                       "-m", "trace_rl.cli.train", "--run", str(tmp_path), "--capability", "cap",
                       "--config", str(tmp_path / "l.yaml")]  # fmt: skip  # argv: each flag beside its value
    with pytest.raises(UserError, match="synthesized environments only"):
        train_job(ray_cfg, name="cap", backend=None, env=None, cfg=None, run_root=tmp_path, from_run=False)


def test_a_missing_ray_package_and_a_bad_executor_flag_are_one_line_errors(monkeypatch, tmp_path: Path, capsys) -> None:
    import sys

    from trace_rl.cli.app import main

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(UserError, match=r"needs the ray package: pip install -e '\.\[ray\]'"):
        make_executor(ExecutorConfig(kind="ray"))
    code = main(
        ["rollout", "--env", "library", "--model", "scripted", "--run", str(tmp_path / "r"), "--executor", "spark"]
    )
    assert code == 2 and "executor.kind: Input should be 'local' or 'ray'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
