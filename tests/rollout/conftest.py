"""Fixtures for the rollout tests (`fixtures.py`)."""

from tests.rollout.fixtures import run_dir, toy

__all__ = ["run_dir", "toy"]
