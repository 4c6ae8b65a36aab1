"""Fixtures over the toy domain (`toy.py`): a registered toy environment and an empty run directory."""

from __future__ import annotations

import pytest
from tests.rollout.toy import ToyDomain, register_toy

from trace_rl.artifacts.store import RunDir


@pytest.fixture
def toy() -> ToyDomain:
    return register_toy(6)


@pytest.fixture
def run_dir(tmp_path) -> RunDir:
    return RunDir(tmp_path / "runs" / "r")
