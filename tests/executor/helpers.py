"""Helpers for the executor tests, shipped to Ray workers by value (the tests package is not importable there).

`GoldClient` plays the library domain fast and deterministically: for most tasks the domain oracle's gold plan, for
one task in four its `no_tools` ablation (a failure), so the stored rewards are mixed. It can SIGKILL the worker
process it runs in, once per marker file, to simulate a lost worker.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
from pathlib import Path
from typing import Any

from trace_rl.artifacts.store import atomic_write_json
from trace_rl.config import EnvConfig, TraceConfig
from trace_rl.engine.episode import GREETING
from trace_rl.envs.library.oracle import plan
from trace_rl.envs.registry import load_domain
from trace_rl.models.base import ModelResponse, SamplingParams
from trace_rl.training.protocol import AdapterResult
from trace_rl.types import Message

LIBRARY = {"name": "library", "options": {"n_train": 12, "n_test": 8}, "max_steps": 30, "max_errors": 5}


def openings(env: dict[str, Any] = LIBRARY, splits: tuple[str, ...] = ("train", "test")) -> dict[str, Any]:
    """First user message -> task, for every task of `splits`."""
    domain = load_domain(env["name"], EnvConfig.model_validate(env))
    out: dict[str, Any] = {}
    for split in splits:
        for task in domain.tasks(split):
            reply = asyncio.run(domain.scripted_user(task).reply([Message(role="assistant", content=GREETING)]))
            out.setdefault(reply.text, task)
    return out


class GoldClient:
    """The library oracle's gold plan (for a quarter of the tasks its `no_tools` ablation, which fails)."""

    name = "gold"

    def __init__(
        self,
        by_opening: dict[str, Any],
        *,
        latency_s: float = 0.0,
        kill_marker: Path | None = None,
        kill_after_calls: int = 5,
        driver_pid: int | None = None,
    ) -> None:
        self.by_opening = by_opening
        self.latency_s = latency_s
        self.kill_marker = kill_marker
        self.kill_after_calls = kill_after_calls
        self.driver_pid = driver_pid if driver_pid is not None else os.getpid()
        self.calls = 0
        self.plans: dict[str, list[Message]] = {}

    def maybe_die(self) -> None:
        """SIGKILL this process once (never the test process): the first worker to reach the call count dies."""
        if self.kill_marker is None or os.getpid() == self.driver_pid or self.calls < self.kill_after_calls:
            return
        try:
            fd = os.open(self.kill_marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        *,
        adapter: str | None = None,
        sampling: SamplingParams | None = None,
    ) -> ModelResponse:
        self.calls += 1
        self.maybe_die()
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        # the domain's prompt puts worked examples before the conversation: the opening is the first known request
        at = next(i for i, m in enumerate(messages) if m.role == "user" and m.text in self.by_opening)
        opening = messages[at].text
        if opening not in self.plans:
            task = self.by_opening[opening]
            skip = int(hashlib.sha1(opening.encode()).hexdigest(), 16) % 4 == 0
            self.plans[opening] = plan(task, "no_tools" if skip else None)
        steps = self.plans[opening]
        done = sum(1 for m in messages[at:] if m.role == "assistant")
        message = steps[min(max(done, 0), len(steps) - 1)].model_copy(deep=True)
        return ModelResponse(message=message, prompt_tokens=10, completion_tokens=5)

    async def aclose(self) -> None:
        return None


def config(root: Path, **executor: Any) -> TraceConfig:
    return TraceConfig.model_validate(
        {
            "run": {"name": "r", "runs_dir": str(root)},
            "models": {"policy": {"kind": "scripted", "model": "gold"}},
            "env": LIBRARY,
            "rollout": {"policy": "policy", "split": "train", "trials": 3, "concurrency": 4},
            "executor": executor,
        }
    )


VOLATILE = {"timings", "started_at", "ended_at", "latency_s", "created_at"}


def stable(record: Any, digits: int | None = None) -> Any:
    """A trajectory without wall-clock fields (what must be equal under every executor); `digits` rounds floats
    (log-probabilities differ in the last bits between processes with different torch thread counts)."""
    if isinstance(record, dict):
        return {k: stable(v, digits) for k, v in record.items() if k not in VOLATILE}
    if isinstance(record, list):
        return [stable(v, digits) for v in record]
    if digits is not None and isinstance(record, float):
        return round(record, digits)
    return record


class MarkerBackend:
    """A `TrainerBackend` that "trains" by writing an adapter folder, recording the process and the GPUs it saw."""

    name = "marker"

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s

    def train(self, env: Any, cfg: Any, *, adapter_dir: Path, work_dir: Path) -> AdapterResult:
        import time

        started = time.time()
        time.sleep(self.delay_s)
        adapter_dir.mkdir(parents=True, exist_ok=True)
        (adapter_dir / "adapter_model.safetensors").write_bytes(env.name.encode())
        info = {
            "capability": env.name,
            "pid": os.getpid(),
            "started": started,
            "ended": time.time(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }
        atomic_write_json(adapter_dir / "done.json", info)
        return AdapterResult(capability=env.name, adapter_dir=adapter_dir, steps=cfg.max_steps, summary=info)


class NamedEnv:
    """The smallest `TrainEnv` stand-in the stage needs (it only passes it to the backend)."""

    def __init__(self, name: str) -> None:
        self.name = name
