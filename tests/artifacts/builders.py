"""Complete artifact files for tests that need one stage's output without running the stage."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trace_rl.artifacts.capabilities import CapabilitiesFile, SelectionParams, write_capabilities
from trace_rl.artifacts.layout import RunLayout
from trace_rl.types import Capability


def capabilities_file(
    selected: Iterable[Capability | dict[str, Any]], candidates: Iterable[Capability | dict[str, Any]] = ()
) -> CapabilitiesFile:
    """A valid `diagnose/capabilities.json` holding `selected` (and `candidates`), with neutral statistics."""
    return CapabilitiesFile(
        selected=[Capability.model_validate(c) for c in selected],
        candidates=[Capability.model_validate(c) for c in candidates],
        params=SelectionParams(rho=0.1, delta=0.2, n_runs=10, k=8),
        splits=["train"],
        n_trajectories={},
        analyst="scripted",
        created_at=time.time(),
    )


def write_capabilities_file(
    run: RunLayout,
    selected: Iterable[Capability | dict[str, Any]],
    candidates: Iterable[Capability | dict[str, Any]] = (),
) -> Path:
    return write_capabilities(run, capabilities_file(selected, candidates))
