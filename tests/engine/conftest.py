"""Fixtures for the engine tests: the toy domain and a run directory (`tests/rollout/fixtures.py`), and for the
token driver the tiny model, its tokenizer and chat codec (`tests/training/tiny_fixtures.py`)."""

from tests.rollout.fixtures import run_dir, toy
from tests.training.tiny_fixtures import codec, tiny_dir, tokenizer

__all__ = ["codec", "run_dir", "tiny_dir", "tokenizer", "toy"]
