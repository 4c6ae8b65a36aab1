"""The held-in guard's verdicts (evaluate/guard.py): paired adapter − base on the train tasks routed to each adapter,
per task over its trials; infra failures and unpaired episodes are left out; unrouted adapters follow keep_unrouted."""

from __future__ import annotations

from typing import Any

import pytest

from trace_rl.config.evaluate import GuardConfig
from trace_rl.evaluate.guard import judge, route_of


def episode(task: str, trial: int, *, route: str | None, success: bool, reward: float = 0.0, infra: bool = False):
    record: dict[str, Any] = {
        "id": f"toy/train/{task}/{trial}",
        "task_id": task,
        "trial": trial,
        "success": success,
        "reward": reward,
        "infra_error": "connection" if infra else None,
        "adapter": None if route in (None, "base") else route,
        "metadata": {"route": {"name": route}} if route else {},
    }
    return record["id"], record


def records(*rows):
    return dict(rows)


def test_an_adapter_worse_than_base_on_its_routed_tasks_is_dropped_and_a_better_one_kept() -> None:
    routed = records(
        episode("t1", 0, route="good", success=True),
        episode("t1", 1, route="good", success=True),
        episode("t2", 0, route="bad", success=False),
        episode("t2", 1, route="bad", success=True),
        episode("t3", 0, route="base", success=True),
    )
    base = records(
        episode("t1", 0, route=None, success=False),
        episode("t1", 1, route=None, success=True),
        episode("t2", 0, route=None, success=True),
        episode("t2", 1, route=None, success=True),
        episode("t3", 0, route=None, success=False),
    )
    good, bad = judge(routed, base, ["good", "bad"], GuardConfig(), samples=100)
    assert (good.kept, bad.kept) == (True, False)
    assert good.tasks == 1 and good.episodes == 2
    assert good.delta == pytest.approx(0.5) and good.adapter_score == 1.0 and good.base_score == 0.5
    assert bad.delta == pytest.approx(-0.5)
    assert "routed train tasks" in bad.reason


def test_min_delta_infra_failures_and_unpaired_episodes() -> None:
    routed = records(
        episode("t1", 0, route="a", success=True),
        episode("t1", 1, route="a", success=False, infra=True),  # not scored: left out
        episode("t2", 0, route="a", success=True),  # base has no t2/0: unpaired
    )
    base = records(episode("t1", 0, route=None, success=True), episode("t1", 1, route=None, success=False))
    (only,) = judge(routed, base, ["a"], GuardConfig(min_delta=0.0))
    assert only.kept and only.episodes == 1 and only.delta == 0.0
    (strict,) = judge(routed, base, ["a"], GuardConfig(min_delta=0.01))
    assert not strict.kept


def test_reward_score_and_unrouted_adapters() -> None:
    routed = records(episode("t1", 0, route="a", success=False, reward=0.6))
    base = records(episode("t1", 0, route=None, success=False, reward=0.2))
    a, b = judge(routed, base, ["a", "b"], GuardConfig(score="reward"))
    assert a.kept and a.delta == pytest.approx(0.4)
    assert b.kept and b.tasks == 0 and b.delta is None
    _, b_off = judge(routed, base, ["a", "b"], GuardConfig(keep_unrouted=False))
    assert not b_off.kept and "keep_unrouted off" in b_off.reason


def test_route_of_reads_the_decision_else_the_adapter() -> None:
    assert route_of({"metadata": {"route": {"name": "x"}}, "adapter": "y"}) == "x"
    assert route_of({"adapter": "y"}) == "y"
    assert route_of({"adapter": None}) == "base"
