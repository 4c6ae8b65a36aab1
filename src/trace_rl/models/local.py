"""`LocalClient`: an in-process model on transformers + PEFT with any number of named LoRA adapters.

The CPU stand-in for a vLLM multi-LoRA server: `chat(..., adapter=name)` generates with that adapter (None: the base
model), and returns the parsed message together with the token ids it sampled and their log-probabilities, so training
never re-tokenizes text. Log-probabilities are those of the temperature-scaled distribution before top-p (what TRL
recomputes); at temperature 0 (greedy) they are the raw model's. One generation runs at a time per client (a lock; torch
is not safely re-entrant), in a worker thread so the event loop stays free.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from trace_rl.artifacts.layout import PEFT_CONFIG_FILE, AdapterLayout
from trace_rl.config import ModelConfig
from trace_rl.errors import UserError
from trace_rl.models.base import ModelResponse, SamplingParams
from trace_rl.models.prompt_format import PromptFormat
from trace_rl.types import Message

BASE_ADAPTER_NAMES = (None, "", "__base__")


def pick_device(device: str) -> str:
    """`auto` → cuda when available, else cpu."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def pick_dtype(dtype: str, device: str) -> Any:
    """`auto` → bfloat16 on cuda, float32 on cpu."""
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return getattr(torch, dtype)


class LocalClient:
    """A base model plus named LoRA adapters, generating in process."""

    def __init__(self, cfg: ModelConfig, *, name: str = "local", model_path: Path | str | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if model_path is None:
            from trace_rl.models.resolve import resolve_model_path

            model_path = resolve_model_path(cfg.model or "tiny")
        self._torch = torch
        self.name = name
        self.cfg = cfg
        self.model_path = Path(model_path)
        self.device = pick_device(cfg.device)
        self.dtype = pick_dtype(cfg.dtype, self.device)
        self.model: Any = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=self.dtype).to(self.device)
        self.model.eval()
        self.format = PromptFormat(
            self.model_path,
            tokenizer=AutoTokenizer.from_pretrained(self.model_path),
            generation_eos_id=getattr(self.model.generation_config, "eos_token_id", None),
        )
        self.tokenizer = self.format.tokenizer
        self.stop_ids = self.format.stop_ids
        self.pad_id = self.format.pad_id
        self.caps = self.format.caps
        self.adapters: dict[str, Path] = {}
        self._lock = threading.Lock()
        for adapter_name, folder in cfg.adapters.items():
            self.load_adapter(adapter_name, folder)

    # -- adapters ---------------------------------------------------------------------------------------------------

    def load_adapter(self, name: str, path: Path | str) -> None:
        """Load (or replace) the LoRA adapter `name` from a PEFT folder."""
        from peft import PeftModel

        folder = Path(path)
        if name in "lora_":
            raise UserError(f"adapter name '{name}' is part of PEFT's parameter prefix 'lora_'; choose another name")
        if not AdapterLayout(folder).is_peft():
            raise UserError(f"adapter '{name}': {folder} is not a PEFT adapter folder (no {PEFT_CONFIG_FILE})")
        with self._lock:
            if isinstance(self.model, PeftModel):
                if name in self.model.peft_config:
                    self.model.delete_adapter(name)
                self.model.load_adapter(str(folder), adapter_name=name)
            else:
                self.model = PeftModel.from_pretrained(self.model, str(folder), adapter_name=name)
            self.model.eval()
            self.adapters[name] = folder

    @contextmanager
    def _use_adapter(self, adapter: str | None) -> Iterator[None]:
        from peft import PeftModel

        if adapter in BASE_ADAPTER_NAMES:
            ctx = self.model.disable_adapter() if isinstance(self.model, PeftModel) else nullcontext()
            with ctx:
                yield
            return
        if adapter not in self.adapters:
            known = ", ".join(sorted(self.adapters)) or "none loaded"
            raise UserError(f"model '{self.name}' has no adapter '{adapter}' (adapters: {known})")
        self.model.set_adapter(adapter)
        yield

    # -- prompts ----------------------------------------------------------------------------------------------------

    def render_prompt(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> str:
        """The prompt text for the next assistant turn."""
        return self.format.render_prompt(messages, tools)

    def prompt_ids(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> list[int]:
        """Token ids of the prompt for the next assistant turn."""
        return self.format.prompt_ids(messages, tools)

    # -- generation -------------------------------------------------------------------------------------------------

    def _sampling(self, sampling: SamplingParams | None) -> SamplingParams:
        if sampling is not None:
            return sampling
        cfg = self.cfg
        return SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k, max_tokens=cfg.max_tokens)

    def generate(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        *,
        adapter: str | None = None,
        sampling: SamplingParams | None = None,
    ) -> ModelResponse:
        """Synchronous `chat`: one assistant turn with its sampled token ids and log-probabilities."""
        torch = self._torch
        from transformers import GenerationConfig

        params = self._sampling(sampling)
        started = time.perf_counter()
        prompt = self.prompt_ids(messages, tools)
        greedy = params.temperature <= 0
        gen_cfg = GenerationConfig(
            max_new_tokens=params.max_tokens,
            do_sample=not greedy,
            temperature=None if greedy else params.temperature,
            top_p=None if greedy else params.top_p,
            top_k=None if greedy else params.top_k,  # 0 = off; None would mean transformers' default of 50
            eos_token_id=sorted(self.stop_ids),
            pad_token_id=self.pad_id,
            stop_strings=params.stop or None,
            return_dict_in_generate=True,
            output_logits=True,
        )
        input_ids = torch.tensor([prompt], dtype=torch.long, device=self.device)
        extra = {"tokenizer": self.tokenizer} if params.stop else {}
        rng_devices = [torch.device(self.device).index or 0] if self.device.startswith("cuda") else []
        with self._lock, self._use_adapter(adapter), torch.inference_mode():
            seeded = torch.random.fork_rng(devices=rng_devices) if params.seed is not None else nullcontext()
            with seeded:
                if params.seed is not None:
                    torch.manual_seed(params.seed)
                out = self.model.generate(
                    input_ids=input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    generation_config=gen_cfg,
                    **extra,
                )
        completion = [int(t) for t in out.sequences[0, len(prompt) :].tolist()]
        logprobs = self._logprobs(out.logits, completion, params.temperature)
        turn = self.format.parse(prompt, completion, logprobs, turn=len(messages))
        return ModelResponse(
            message=turn.message,
            prompt_tokens=len(prompt),
            completion_tokens=len(completion),
            finish_reason=turn.finish_reason,
            latency_s=time.perf_counter() - started,
            raw_text=turn.raw_text,
        )

    def _logprobs(self, logits: Any, completion: list[int], temperature: float) -> list[float]:
        torch = self._torch
        if not completion:
            return []
        steps = torch.stack([step[0] for step in logits[: len(completion)]]).float()
        if temperature > 0:
            steps = steps / temperature
        logp = torch.log_softmax(steps, dim=-1)
        index = torch.tensor(completion, device=logp.device).unsqueeze(-1)
        return [float(x) for x in logp.gather(-1, index).squeeze(-1).tolist()]

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        *,
        adapter: str | None = None,
        sampling: SamplingParams | None = None,
    ) -> ModelResponse:
        """One assistant turn, generated in a worker thread."""
        return await asyncio.to_thread(self.generate, messages, tools, adapter=adapter, sampling=sampling)

    def next_token_logits(
        self, messages: list[Message], tools: list[dict[str, Any]] | None = None, *, adapter: str | None = None
    ) -> Any:
        """Logits (float32, cpu, shape [vocab]) of the first token of the next assistant turn."""
        torch = self._torch
        prompt = self.prompt_ids(messages, tools)
        input_ids = torch.tensor([prompt], dtype=torch.long, device=self.device)
        with self._lock, self._use_adapter(adapter), torch.inference_mode():
            logits = self.model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).logits
        return logits[0, -1].float().cpu()

    async def aclose(self) -> None:
        """Nothing to release; the model is freed with the client."""
