"""Skip marker for tests that need the τ² data (read from TRACE_TAU2_DATA or ../shared/data/tau2, never copied)."""

from __future__ import annotations

import pytest

from trace_rl.config import EnvConfig
from trace_rl.envs.registry import load_domain
from trace_rl.errors import UserError


def tau2_data_present() -> bool:
    try:
        load_domain("tau2:mock", EnvConfig(name="tau2:mock"))
    except UserError:
        return False
    return True


needs_tau2 = pytest.mark.skipif(
    not tau2_data_present(), reason="τ² data not found: set TRACE_TAU2_DATA or provide ../shared/data/tau2"
)
