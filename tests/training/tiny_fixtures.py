"""Fixtures for the token-level tests (engine's token driver, training): the cached tiny random model (built once
per session into the trace-rl cache), its left-padding tokenizer and its chat codec. Imported by the conftest of each
test folder that needs them."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_dir() -> Path:
    """The default tiny model, built once into the trace-rl cache (TRACE_RL_CACHE) and reused."""
    from trace_rl.models.resolve import tiny_path

    return tiny_path()


@pytest.fixture(scope="session")
def tokenizer(tiny_dir: Path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    tok.padding_side = "left"
    return tok


@pytest.fixture(scope="session")
def codec(tokenizer):
    from trace_rl.engine.chat_codec import ChatCodec

    return ChatCodec(tokenizer)
