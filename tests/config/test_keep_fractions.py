"""Which training steps keep their adapter for the score-vs-budget curve (TrainConfig.keep_fractions), and how the
run config fills them from evaluate.curve."""

from __future__ import annotations

import pytest

from trace_rl.config import TraceConfig
from trace_rl.config.train import TrainConfig, steps_at_fractions
from trace_rl.errors import UserError


def test_steps_at_fractions_are_distinct_sorted_and_below_the_last() -> None:
    assert steps_at_fractions(10, [0.75, 0.25, 0.5]) == [2, 5, 8]
    assert steps_at_fractions(3, [0.1, 0.2, 0.99]) == [1]
    assert steps_at_fractions(0, [0.5]) == []


def test_kept_steps_force_a_checkpoint_at_each_of_them() -> None:
    cfg = TrainConfig(max_steps=10, save_steps=5, keep_fractions=[0.25, 0.5, 0.75])
    assert cfg.kept_steps() == [2, 5, 8] and cfg.save_interval() == 1
    assert TrainConfig(max_steps=20, save_steps=5, keep_fractions=[0.25, 0.5, 0.75]).save_interval() == 5
    assert TrainConfig(max_steps=10, save_steps=5).kept_steps() == [] and TrainConfig(save_steps=5).save_interval() == 5
    with pytest.raises(ValueError):
        TrainConfig(keep_fractions=[1.0])


def test_the_run_config_keeps_the_curve_fractions_unless_told() -> None:
    curve = TraceConfig.model_validate({"train": {"max_steps": 10}, "evaluate": {"curve": {"fractions": [0.5]}}})
    assert curve.train.keep_fractions == [0.5] and curve.train.kept_steps() == [5]
    told = TraceConfig.model_validate({"train": {"keep_fractions": []}, "evaluate": {"curve": {"fractions": [0.5]}}})
    assert told.train.keep_fractions == []
    off = TraceConfig.model_validate({"evaluate": {"curve": {"enabled": False}}})
    assert off.train.keep_fractions == []


def test_a_bad_keep_fraction_is_one_line() -> None:
    from trace_rl.config.core import load_config

    with pytest.raises(UserError, match="keep_fractions"):
        load_config(None, {"train.keep_fractions": [1.5]})
