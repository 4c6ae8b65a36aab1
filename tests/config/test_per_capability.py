"""One capability's own training settings (TrainConfig.per_capability): applied over the section, validated when the
config is read, each problem one line naming the capability and the setting."""

from __future__ import annotations

import pytest

from trace_rl.config.core import load_config
from trace_rl.config.train import TrainConfig
from trace_rl.errors import UserError


def test_a_capability_entry_overrides_the_section_for_that_capability_only() -> None:
    cfg = TrainConfig(max_turns=1, max_episode_tokens=96, per_capability={"identify_first": {"max_turns": 2}})
    own = cfg.for_capability("identify_first")
    assert (own.max_turns, own.max_episode_tokens, own.per_capability) == (2, 96, {})
    assert cfg.for_capability("confirm_before_change") is cfg


def test_the_entry_wins_over_the_section_however_it_was_set() -> None:
    cfg = load_config(None, {"train.max_turns": 3, "train.per_capability": {"a": {"max_turns": 2}}})
    assert (cfg.train.max_turns, cfg.train.for_capability("a").max_turns) == (3, 2)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"a": {"max_trns": 2}}, r"per_capability\.a: not a train setting: max_trns"),
        ({"a": {"max_turns": 0}}, r"per_capability\.a\.max_turns: Input should be greater than or equal to 1"),
        ({"a": {"per_capability": {}}}, r"per_capability\.a: not a train setting: per_capability"),
    ],
)
def test_a_bad_entry_is_one_line_naming_it(entry: dict, message: str) -> None:
    with pytest.raises(UserError, match=message) as err:
        load_config(None, {"train.per_capability": entry})
    assert "\n" not in str(err.value)
