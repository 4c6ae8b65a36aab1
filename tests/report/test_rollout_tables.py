"""The report: tables per env and split, infra failures apart, the incomplete-run note, JSON output."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console
from tests.rollout.toy import ToyPolicy

from trace_rl.config import TraceConfig
from trace_rl.errors import UserError
from trace_rl.report.rollout_tables import report
from trace_rl.rollout.stage import rollout


def make_run(run_dir):
    cfg = TraceConfig.model_validate({"env": {"name": "toy"}, "rollout": {"policy": "toy", "trials": 3}})
    policy = ToyPolicy(
        lambda task, trial: {"train-1": "fail", "train-2": "infra" if trial == 2 else "ok"}.get(task, "ok")
    )
    rollout(cfg, run_dir, progress="none", clients={"toy": policy})


def render(run_dir, **kw) -> str:
    out = io.StringIO()
    report(run_dir, console=Console(file=out, width=200), samples=200, **kw)
    return out.getvalue()


def test_tables(toy, run_dir):
    make_run(run_dir)
    out = render(run_dir)
    assert "│ toy │ train │     6 │      3 │       18 │     17 │     1 │       0 │ 14/17 = 0.824" in out
    assert "pass^k" in out and "95% CI" in out and "6/6" in out and "5/6" in out  # train-2 has 2 scored trials
    assert "user_stop" in out and "infra_error" in out
    assert "infrastructure failures" in out and "connection" in out
    assert "1 planned episode(s) have no score yet" in out


def test_json(toy, run_dir):
    make_run(run_dir)
    payload = json.loads(render(run_dir, as_json=True, k_max=2))
    group = payload["groups"][0]
    assert group["episodes"]["infra"] == 1 and list(group["pass_k"]) == ["1", "2"]
    assert group["pass_k"]["1"]["value"] == pytest.approx((1 + 0 + 1 + 1 + 1 + 1) / 6)
    low, high = group["pass_k"]["1"]["ci95"]
    assert low <= group["pass_k"]["1"]["value"] <= high


def test_not_a_rollout_run(run_dir):
    with pytest.raises(UserError, match="no rollout trajectories"):
        report(run_dir)
