"""Every run config the repository ships (configs/*.yaml, configs/measured/*.yaml) loads: a renamed or removed field
would otherwise surface only when someone runs the command in its header."""

from __future__ import annotations

from pathlib import Path

import pytest

from trace_rl.config.core import load_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SHIPPED = sorted([*CONFIGS.glob("*.yaml"), *(CONFIGS / "measured").glob("*.yaml")])


def test_the_repository_ships_configs() -> None:
    assert (CONFIGS / "demo.yaml") in SHIPPED and len(SHIPPED) > 5


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(CONFIGS)))
def test_a_shipped_config_loads(path: Path) -> None:
    cfg = load_config(path)
    assert cfg.run.name


def test_the_demo_on_its_second_range_differs_only_in_the_range() -> None:
    demo = load_config(CONFIGS / "demo.yaml").model_dump(mode="json")
    second = load_config(CONFIGS / "measured" / "demo-range2.yaml").model_dump(mode="json")
    assert second["env"]["options"].pop("test_start") == 100 and "test_start" not in demo["env"]["options"]
    assert second == demo
