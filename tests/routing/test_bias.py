"""Label offsets of the label-logit router: contextual calibration, the fitted offsets by hand, and the router and
router.json applying them."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from trace_rl.artifacts.router import RouterSpec
from trace_rl.routing.bias import apply_bias, balanced_accuracy, content_free_bias, fit_bias
from trace_rl.routing.router import LabelLogitRouter
from trace_rl.routing.spec import make_options
from trace_rl.types import Message


def test_content_free_offsets_make_the_empty_message_a_tie() -> None:
    scores = {"A": 2.5, "B": -1.0, "C": -math.inf}
    bias = content_free_bias(scores)
    assert bias == {"A": -2.5, "B": 1.0, "C": 0.0}
    adjusted = apply_bias(scores, bias)
    assert adjusted["A"] == adjusted["B"] == 0.0 and adjusted["C"] == -math.inf
    assert apply_bias({"A": 1.0}, {}) == {"A": 1.0}


def test_fitted_offset_separates_a_label_that_always_wins() -> None:
    # A always outscores B by 1..2; the tasks whose truth is B have the smaller margins (1.0-1.4)
    examples = [("A", {"A": 2.0 + i / 10, "B": 0.0}) for i in range(5)]
    examples += [("B", {"A": 1.0 + i / 10, "B": 0.0}) for i in range(5)]
    assert balanced_accuracy(examples, {}, ["A", "B"]) == 0.5
    bias = fit_bias(examples, ["A", "B"], fixed="B")
    assert bias["B"] == 0.0 and -2.0 < bias["A"] < -1.4
    assert balanced_accuracy(examples, bias, ["A", "B"]) == 1.0


def test_fitted_offsets_balance_recall_and_stay_near_zero() -> None:
    # already right: nothing moves
    examples = [("A", {"A": 1.0, "B": 0.0}), ("B", {"A": 0.0, "B": 1.0})]
    assert fit_bias(examples, ["A", "B"], fixed="B") == {"A": 0.0, "B": 0.0}
    # 9 A tasks and 1 B task, inseparable: plain accuracy would give every task to A; balanced accuracy is the same
    # (0.5) either way, so the offset nearest 0 is kept
    lopsided = [("A", {"A": 1.0, "B": 0.0})] * 9 + [("B", {"A": 1.0, "B": 0.0})]
    assert fit_bias(lopsided, ["A", "B"], fixed="B")["A"] == 0.0
    # three labels: C (base, fixed) never wins raw; its tasks are the ones where both others are low
    three = [("A", {"A": 3.0, "B": 1.0, "C": 0.0}), ("B", {"A": 1.0, "B": 3.0, "C": 0.0})]
    three += [("C", {"A": 0.5, "B": 0.4, "C": 0.0}), ("C", {"A": 0.4, "B": 0.6, "C": 0.0})]
    bias = fit_bias(three, ["A", "B", "C"], fixed="C")
    assert bias["C"] == 0.0 and balanced_accuracy(three, bias, ["A", "B", "C"]) == 1.0
    assert fit_bias([], ["A", "B"], fixed="B") == {"A": 0.0, "B": 0.0}


class _Scorer:
    def scores(self, messages: list[Message], labels: list[str]) -> dict[str, float]:
        return {"A": 2.0, "B": 1.0}


def _spec(**kw: object) -> RouterSpec:
    options = make_options([("identify_first", "Identify the member first.", Path("/x/a"))])
    return RouterSpec(base_model="tiny", options=options, **kw)


def test_router_applies_the_spec_offsets_and_router_json_keeps_them(tmp_path: Path) -> None:
    assert LabelLogitRouter(_spec(), _Scorer()).route("Who wrote it?") == "identify_first"
    spec = _spec(bias={"A": -1.5}, calibration="fitted")
    router = LabelLogitRouter(spec, _Scorer())
    decision = router.decide("Who wrote it?")
    assert decision.name == "base" and decision.scores == {"A": 0.5, "B": 1.0}
    assert router.raw_scores("Who wrote it?") == {"A": 2.0, "B": 1.0}
    loaded = RouterSpec.load(spec.save(tmp_path / "router.json"))
    assert loaded.bias == {"A": -1.5} and loaded.calibration == "fitted"
    with pytest.raises(ValueError, match="unknown labels"):
        _spec(bias={"Z": 1.0})
