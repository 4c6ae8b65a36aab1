from __future__ import annotations

from pathlib import Path

import pytest
from tests.rollout.fixtures import run_dir, toy

from trace_rl.artifacts.store import RunDir

from .synthetic import build_synthetic_run


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    """A run with every artefact the report reads (built once per module)."""
    return build_synthetic_run(Path(tmp_path_factory.mktemp("runs")) / "synthetic")


__all__ = ["full_run", "run_dir", "toy"]
