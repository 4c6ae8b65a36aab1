"""A local Ray cluster on CPU for the executor tests (several worker processes on 127.0.0.1), started once.

Without the `ray` package the Ray tests skip with the reason; under CI=true they fail instead (the extra is part of
the bootstrap there).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from typing import Any

import pytest

from . import helpers

RAY_MISSING = "ray is not installed: pip install -e '.[ray]' (make bootstrap installs it)"


def need_ray() -> Any:
    if importlib.util.find_spec("ray") is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {RAY_MISSING}")
        pytest.skip(RAY_MISSING)
    import ray

    return ray


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """`ray.init(num_cpus=4)` on this machine for one test module; executors find it initialised and leave it
    running; it stops after the module (so no Ray processes linger for the rest of the suite)."""
    ray = need_ray()
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(helpers)  # the workers cannot import the tests package
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=4, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()
