"""Fixtures for the train stage tests: the tiny model, its tokenizer and chat codec (`tiny_fixtures.py`)."""

from tests.training.tiny_fixtures import codec, tiny_dir, tokenizer

__all__ = ["codec", "tiny_dir", "tokenizer"]
