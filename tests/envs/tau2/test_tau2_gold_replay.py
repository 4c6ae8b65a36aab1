"""Gold replay through `check_domain` (retail 114/114, airline 50/50, mock) on both task sets; pristine DBs intact."""

from __future__ import annotations

import json

import pytest

from trace_rl.config import EnvConfig
from trace_rl.envs.check import check_domain
from trace_rl.envs.evaluator import gold_environment
from trace_rl.envs.registry import load_domain

from .tau2_helpers import DATA, domain, needs_data

pytestmark = needs_data

EXPECTED = {("mock", "head"): 10, ("mock", "v0.2"): 9, ("retail", "head"): 114, ("retail", "v0.2"): 114}
EXPECTED |= {("airline", "head"): 50, ("airline", "v0.2"): 50}


@pytest.mark.parametrize(("name", "task_set"), sorted(EXPECTED))
def test_gold_replay_matches_every_task(name: str, task_set: str) -> None:
    result = check_domain(domain(name, task_set), ["base"])
    n = EXPECTED[(name, task_set)]
    assert result.line == f"gold-replay: {n}/{n} db-match", result.mismatched
    if name == "airline":  # docs/tau2-fidelity.md §8: no gold-action errors on either task set
        assert result.gold_errors == {}
    if name == "retail":  # some gold actions fail on purpose (docs/tau2-fidelity.md §8)
        errors = [e for errs in result.gold_errors.values() for e in errs]
        assert "find_user_id_by_email: Error: User not found" in errors
        assert (
            "exchange_delivered_order_items: Error: Insufficient gift card balance to pay for the price difference"
            in errors
        )


def test_registry_path_with_v02_task_set() -> None:
    dom = load_domain("tau2:retail", EnvConfig(name="tau2:retail", task_set="v0.2", data_dir=DATA))
    assert check_domain(dom, ["base"]).line == "gold-replay: 114/114 db-match"


@pytest.mark.parametrize(("task_set", "unchanged"), [("head", 24), ("v0.2", 20)])
def test_airline_gold_leaves_db_unchanged_in_the_expected_number_of_tasks(task_set: str, unchanged: int) -> None:
    dom = domain("airline", task_set)
    pristine = dom.make_env().tools.db.get_hash()
    same = sum(gold_environment(dom.make_env(), t)[0].tools.db.get_hash() == pristine for t in dom.tasks("base"))
    assert same == unchanged  # docs/tau2-fidelity.md §8


@pytest.mark.parametrize("name", ["retail", "airline", "mock"])
def test_replays_never_touch_the_cached_pristine_db(name: str) -> None:
    dom = domain(name)
    check_domain(dom, ["base"])
    cached = dom.make_env()._pristine_db
    fresh = type(cached).model_validate(json.loads((dom.dir / "db.json").read_text()))
    assert cached.full_hash() == fresh.full_hash()
    assert cached.get_hash() == fresh.get_hash()
