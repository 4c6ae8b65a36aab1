"""Process environment defaults for training, set before torch is imported (explicit values win)."""

from __future__ import annotations

import os


def quiet_defaults() -> None:
    """Environment defaults for training on shared CPUs, set before torch is imported (explicit values win):
    passive OpenMP waiting (spin-waiting made torch 3-5x slower under contention, docs/cpu-notes.md §2), offline hub,
    no TRL experimental-API banner."""
    for key, value in (
        ("OMP_WAIT_POLICY", "PASSIVE"),
        ("HF_HUB_OFFLINE", "1"),
        ("TRANSFORMERS_OFFLINE", "1"),
        ("TRL_EXPERIMENTAL_SILENCE", "1"),
        ("TOKENIZERS_PARALLELISM", "false"),
    ):
        os.environ.setdefault(key, value)


__all__ = ["quiet_defaults"]
