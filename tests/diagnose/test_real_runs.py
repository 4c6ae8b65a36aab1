"""Real agent failures (../shared/data/real_runs): import the grok-4-fast τ² airline run, diagnose it with the
structural analyzer, and score the analyzer against the hand-labelled causes of its 29 failed trajectories
(fixtures/grok_airline_failures.json). The figures are stated in docs/real-runs.md."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from trace_rl.artifacts.capabilities import read_capabilities
from trace_rl.artifacts.store import RunDir
from trace_rl.artifacts.trajectories import read_trajectories
from trace_rl.config.diagnose import DiagnoseConfig
from trace_rl.diagnose.stage import run_diagnose
from trace_rl.envs.tau2.data import candidate_dirs
from trace_rl.rollout.imported import import_log

REAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "real_runs"
GROK = REAL / "tau2_airline_grok-4-fast-reasoning.json.gz"
FIXTURE = Path(__file__).parent / "fixtures" / "grok_airline_failures.json"
pytestmark = pytest.mark.skipif(
    not GROK.exists() or not any(d.is_dir() for d in candidate_dirs()),
    reason=f"real runs ({REAL}) or τ² data absent",
)


@pytest.fixture(scope="module")
def diagnosed(tmp_path_factory: pytest.TempPathFactory):
    run = RunDir(tmp_path_factory.mktemp("grok") / "run")
    import_log(GROK, run)
    cfg = DiagnoseConfig(splits=["imported"])
    result = run_diagnose(run, cfg)
    return run, result, read_capabilities(run)


def scores(per_source: dict[str, dict], selected: set[str]) -> dict:
    """Against the hand labels: how often the selected capabilities (or the user attribution) name the cause, and
    precision / recall per cause (a prediction = a selected capability LACKING, or the user attribution)."""
    hand = json.loads(FIXTURE.read_text())["trajectories"]
    predicted: Counter[str] = Counter()
    true_pos: Counter[str] = Counter()
    wanted: Counter[str] = Counter(label["cause"] for label in hand)
    rows = []
    for label in hand:
        got = per_source[label["source_id"]]
        named = ({"user"} if got["user_fault"] else set()) | (set(got["lacking"]) & selected)
        predicted.update(named)
        true_pos.update(c for c in named if c == label["cause"])
        rows.append((label["task_id"], label["trial"], label["cause"], sorted(named)))
    hits = sum(label["cause"] in row[3] for label, row in zip(hand, rows, strict=True))
    return {
        "n": len(hand),
        "hit_rate": hits / len(hand),
        "precision": sum(true_pos.values()) / max(1, sum(predicted.values())),
        "per_cause": {
            c: (true_pos[c] / predicted[c] if predicted[c] else None, true_pos[c] / wanted[c]) for c in sorted(wanted)
        },
        "rows": rows,
    }


def test_hand_labelled_causes_are_named(diagnosed) -> None:
    run, _, caps = diagnosed
    trajs, _ = read_trajectories(run.trajectories)
    per = {t["id"]: t for t in caps.trajectories}
    per_source = {t.metadata["source_id"]: per[t.id] for t in trajs.values()}
    s = scores(per_source, {c.name for c in caps.selected})
    print(json.dumps({k: v for k, v in s.items() if k != "rows"}, indent=1))
    assert s["n"] >= 20
    assert s["hit_rate"] >= 0.70, s["rows"]
    p, r = s["per_cause"]["policy_rule_application"]
    assert p is not None and p >= 0.9 and r >= 0.9  # the over-refusal mode: found, and rarely named wrongly
    assert s["precision"] >= 0.8


def test_over_refusal_is_selected_with_support_and_reasons(diagnosed) -> None:
    _, result, caps = diagnosed
    assert result.selected[0] == "policy_rule_application"
    policy = next(c for c in caps.selected if c.name == "policy_rule_application")
    assert policy.stats["cov_mean"] >= 0.5 and policy.stats["support"]["passed"] >= 5
    reasons = [r for t in caps.trajectories for r in t["reasons"] if r.startswith("policy_rule_application")]
    assert any("transferred to a human instead of calling" in r for r in reasons)
    assert sum(bool(t["user_fault"]) for t in caps.trajectories if not t["success"]) == 3
    assert any("fewer than 5" in w for w in caps.warnings)  # weak-support capabilities are flagged
    assert caps.splits == ["imported"] and caps.n_trajectories["diagnosed"] == 66
