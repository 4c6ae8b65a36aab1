"""τ² `mock`: the CI smoke domain with a user-side toolkit (dual control)."""

from trace_rl.envs.tau2.mock.data_model import MockDB, MockUserDB
from trace_rl.envs.tau2.mock.tools import MockTools, MockUserTools

__all__ = ["MockDB", "MockTools", "MockUserDB", "MockUserTools"]
