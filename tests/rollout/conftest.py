from __future__ import annotations

import pytest

from trace_rl.artifacts.store import RunDir

from .toy import ToyDomain, register_toy


@pytest.fixture
def toy() -> ToyDomain:
    return register_toy(6)


@pytest.fixture
def run_dir(tmp_path) -> RunDir:
    return RunDir(tmp_path / "runs" / "r")
