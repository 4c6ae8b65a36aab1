"""GRPO rollouts sampled by a vLLM server, on-policy: the adapter being trained is hot-swapped into the server.

Before the rollouts of each optimizer step, the trainer's current LoRA weights are saved under a versioned name
(`<capability>-step<N>`, N = optimizer steps taken) and loaded into the server (`/v1/load_lora_adapter`); the
previous version is unloaded and its folder deleted. Every turn of the step is sampled with that name, the server echoes
it back on each completion, and `OnPolicySampler` refuses a batch that came from another version — so a step never
mixes versions. This is what the released TRACE code, ART and verl do (an OpenAI-compatible vLLM server with runtime
LoRA updates); TRL's own vLLM integration instead merges the adapter and pushes full weights.

Log-probabilities come from the server (raw distribution); TRL is not told they are vLLM's (`use_vllm` stays off), so
it recomputes the old log-probs with the trainer's model and no importance-sampling correction is applied. One
process only: with several training processes each would load its own copy (refused in `choose_sampler`).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trace_rl.config.train import TrainConfig
from trace_rl.engine.sampler import SampledTurn, TurnSampler
from trace_rl.engine.vllm_sampler import VLLMSampler
from trace_rl.errors import InfraError, UserError
from trace_rl.models.vllm_client import VLLMClient

log = logging.getLogger(__name__)

NO_VLLM_ENV = "TRACE_RL_NO_VLLM"


class OnPolicySampler:
    """A `VLLMSampler` for one policy version that checks every turn came from it."""

    def __init__(self, inner: VLLMSampler, version: str) -> None:
        self.inner, self.version = inner, version
        self.stop_ids = inner.stop_ids

    def sample(
        self, contexts: Sequence[list[int]], *, max_new_tokens: int, temperature: float, top_p: float = 1.0
    ) -> list[SampledTurn]:
        turns = self.inner.sample(contexts, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p)
        stale = {t.version for t in turns if t.version != self.version}
        if stale:
            raise InfraError("training", f"sampled by {sorted(map(str, stale))}, not the current {self.version}")
        return turns


class AdapterSync:
    """`sampler_for(trainer)` of `GroupRollout`: the server sampler for the trainer's current adapter version."""

    def __init__(self, client: VLLMClient, *, work_dir: Path, prefix: str, save: Callable[[Any, Path], None]) -> None:
        self.client, self.work_dir, self.prefix, self.save = client, work_dir, prefix, save
        self.current: tuple[int, str, Path] | None = None  # (step, served name, folder)
        self.loads = 0

    def __call__(self, trainer: Any) -> TurnSampler:
        step = int(getattr(trainer.state, "global_step", 0) or 0)
        if self.current is None or self.current[0] != step:
            self._publish(trainer, step)
        assert self.current is not None
        return OnPolicySampler(VLLMSampler(self.client, adapter=self.current[1]), self.current[1])

    def _publish(self, trainer: Any, step: int) -> None:
        name = f"{self.prefix}-step{step}"
        folder = self.work_dir / name
        if folder.exists():
            shutil.rmtree(folder)
        self.save(trainer.accelerator.unwrap_model(trainer.model), folder)
        self.client.load_adapter(name, folder)
        self.loads += 1
        previous, self.current = self.current, (step, name, folder)
        if previous is not None and previous[1] != name:
            self.client.unload_adapter(previous[1])
            shutil.rmtree(previous[2], ignore_errors=True)


def choose_sampler(cfg: TrainConfig, *, world_size: int) -> str:
    """`vllm` or `transformers` for `cfg.sampler`; `auto` says in one log line why it chose transformers."""
    from trace_rl.models.managed_server import vllm_available

    if cfg.sampler == "transformers":
        return "transformers"
    why = None
    if world_size > 1:
        why = f"{world_size} training processes (the vLLM sampler serves one)"
    elif cfg.sampler == "auto" and os.environ.get(NO_VLLM_ENV):
        why = f"{NO_VLLM_ENV} is set"
    else:
        why = vllm_available()
    if why is None:
        return "vllm"
    if cfg.sampler == "vllm":
        raise UserError(f"train.sampler=vllm: {why}")
    log.warning("train.sampler=auto: sampling with transformers in process (%s)", why)
    return "transformers"


def vllm_sampler_for(
    cfg: TrainConfig, model_path: Path, *, work_dir: Path, capability: str, save: Callable[[Any, Path], None]
) -> AdapterSync:
    """The adapter-syncing sampler over the process's managed server for the policy's base model."""
    from trace_rl.config import ModelConfig
    from trace_rl.models.managed_server import server_for

    settings = cfg.vllm_server
    if settings.max_lora_rank < cfg.lora_r:
        settings = settings.model_copy(update={"max_lora_rank": cfg.lora_r})
    server = server_for(model_path, settings)
    model_cfg = ModelConfig(kind="vllm", model=str(model_path), concurrency=256, max_retries=4, timeout_s=600.0)
    client = VLLMClient(model_cfg, name="train-policy", model_path=model_path, server=server)
    return AdapterSync(client, work_dir=work_dir, prefix=capability, save=save)


__all__ = ["AdapterSync", "OnPolicySampler", "choose_sampler", "vllm_sampler_for"]
