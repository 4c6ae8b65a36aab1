"""Shared fixtures for the library domain tests: the default domain (200 train + 100 test tasks), built once."""

from __future__ import annotations

import pytest

from trace_rl.config import EnvConfig
from trace_rl.envs.library import LibraryDomain
from trace_rl.envs.registry import load_domain


@pytest.fixture(scope="session")
def domain() -> LibraryDomain:
    d = load_domain("library", EnvConfig(name="library"))
    assert isinstance(d, LibraryDomain)
    return d
