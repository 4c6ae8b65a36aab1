"""`trace-rl run` against a model server that drops connections mid-response, answers HTTP 500 or a body without
choices, stalls past the client's timeout, and sends malformed tool calls (arguments that are not JSON, a tool that
does not exist), in rollout, calibration (synthesize) and evaluate.

What it shows: retryable faults are retried (the next request repeats the failed one) and cost nothing else; a burst
longer than the retries becomes an infrastructure failure that is recorded, counted in the denominators and reported
(`trace-rl report --json`), stops the pipeline with one line, and is retried by rerunning the same command, which then
completes; malformed tool calls are data in the trajectories (a parse error or a tool error the agent sees), never a
crash; every (task, trial) of every stage ends with exactly one scored trajectory.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from trace_rl.cli.app import main

from .fault_server import BAD_ARGUMENTS, RETRYABLE, UNKNOWN_TOOL, Fault, FaultServer

STAGE_MODELS = ("rollout", "synthesize", "evaluate")  # one served model name per stage, each with its schedule
CYCLE: list[Fault] = ["drop", "bad_arguments", "http_500", "unknown_tool", "stall", "no_choices"]
BURST: dict[int, Fault] = {2: "http_500", 3: "drop", 4: "stall"}  # 3 failed attempts of one request: max_retries 2


def schedule(model: str, n: int) -> Fault:
    """Rollout: the burst, then a fault every 3rd request; calibration and evaluate: every 2nd request."""
    if model == "rollout":
        if n in BURST:
            return BURST[n]
        return CYCLE[(n // 3) % len(CYCLE)] if n >= 6 and n % 3 == 0 else "ok"
    return CYCLE[(n // 2 - 1) % len(CYCLE)] if n % 2 == 0 else "ok"


MODEL = (
    "{{kind: openai, model: {name}, base_url: '{url}', timeout_s: 2.0, max_retries: 2, backoff_s: 0.01, "
    "concurrency: 1, max_tokens: 32}}"
)
CONFIG = """
run: {{name: served, runs_dir: {runs_dir}}}
models:
  policy: {rollout}
  calib: {synthesize}
  held_out: {evaluate}
env: {{name: library, options: {{n_train: 3, n_test: 2}}, max_steps: 8, max_errors: 3}}
rollout: {{policy: policy, user: scripted, split: train, trials: 2, concurrency: 1}}
diagnose: {{analyst: structural}}
synthesize: {{generator: target, author: null, policy: calib, groups: 1, samples: 2, max_attempts: 1,
             concurrency: 1, validation_seeds: 2}}
train: {{model: tiny, device: cpu}}
evaluate: {{arms: [base], policy: held_out, trials: 2, concurrency: 1, curve: {{enabled: false}}}}
"""
ROLLOUT_EPISODES, EVAL_EPISODES = 3 * 2, 2 * 2


def trace_rl_run(config: Path) -> subprocess.CompletedProcess[str]:
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    argv = [sys.executable, "-m", "trace_rl.cli", "run", "--config", str(config)]
    return subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True, timeout=300)


def report_json(run: Path, capsys: Any) -> dict[str, Any]:
    assert main(["report", "--run", str(run), "--json"]) == 0
    (group,) = json.loads(capsys.readouterr().out)["groups"]
    return group


def latest(path: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in records(path)}


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def delivered(server: FaultServer, fault: Fault) -> list[str]:
    """The call ids of the `fault` replies the client took: those not followed by the same request again."""
    ids = []
    for model in STAGE_MODELS:
        served = server.of(model)
        for s, after in itertools.zip_longest(served, served[1:]):
            if s.fault == fault and (after is None or after.messages != s.messages):
                ids.append(f"call_fault_{s.n}")
    return sorted(ids)


def test_run_survives_a_faulty_model_server(tmp_path: Path, capsys):
    with FaultServer(schedule, models=STAGE_MODELS, stall_s=2.4) as server:
        models = {m: MODEL.format(name=m, url=server.base_url) for m in STAGE_MODELS}
        config = tmp_path / "config.yaml"
        config.write_text(CONFIG.format(runs_dir=tmp_path / "runs", **models))
        run = tmp_path / "runs" / "served"

        first = trace_rl_run(config)  # the burst outlasts the retries: one rollout episode is an infra failure
        assert first.returncode == 1, first.stdout[-3000:] + first.stderr[-3000:]  # work left to retry
        assert "Traceback" not in first.stderr
        assert "error: stage 'rollout' failed (exit 1); fix it and rerun the same command" in first.stderr
        assert "incomplete: 1 episode(s) left" in first.stderr
        group = report_json(run, capsys)
        assert group["episodes"] == {"expected": 6, "scored": 5, "infra": 1, "missing": 0, "unplanned": 0}
        assert sum(group["infra_kinds"].values()) == 1  # counted and reported by kind, not dropped
        (failed,) = [r for r in records(run / "rollout/trajectories.jsonl") if r["infra_error"]]
        assert "3 attempt(s)" in failed["infra_error"] and failed["reward"] is None
        assert failed["termination"] == "infra_error" and [e["kind"] for e in failed["errors"]] == ["infra"]
        assert main(["report", "--run", str(run)]) == 0
        assert "infrastructure failures" in capsys.readouterr().out

        second = trace_rl_run(config)  # the same command: retries the failed episode, then every other stage
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
        assert "1 episodes run, 5 already done" in second.stdout

    # retries: each retryable fault is followed by the same request again, except the burst's last attempt
    for model in STAGE_MODELS:
        served = server.of(model)
        assert any(s.fault in RETRYABLE for s in served), f"{model}: no retryable fault reached this stage"
        for s, after in itertools.pairwise(served):
            if s.fault in RETRYABLE and (model, s.n) != ("rollout", max(BURST)):
                assert after.messages == s.messages, f"{model} request {s.n} ({s.fault}) was not retried"
    burst = server.of("rollout")[min(BURST) - 1 : max(BURST) + 1]
    assert all(s.messages == burst[0].messages for s in burst[:-1])  # 3 attempts of one request, then it gave up:
    assert burst[-1].messages != burst[0].messages  # the next request is another episode's
    assert set(server.counts()) == {"ok", *CYCLE}

    # denominators: every planned (task, trial) has one scored trajectory; the infra failure stays in the history
    rollout = records(run / "rollout/trajectories.jsonl")
    assert len(rollout) == ROLLOUT_EPISODES + 1 and len(latest(run / "rollout/trajectories.jsonl")) == ROLLOUT_EPISODES
    assert report_json(run, capsys)["episodes"] == {
        "expected": 6,
        "scored": 6,
        "infra": 0,
        "missing": 0,
        "unplanned": 0,
    }
    comparison = json.loads((run / "evaluate/comparison.json").read_text())
    (base,) = [a for a in comparison["arms"] if a["name"] == "base"]
    assert base["details"]["episodes"]["expected"] == EVAL_EPISODES
    assert base["details"]["episodes"]["scored"] == EVAL_EPISODES and base["details"]["episodes"]["infra"] == 0
    calibrations = sorted(run.glob("envs/*/calibration/trajectories.jsonl"))
    assert calibrations
    for path in calibrations:
        status = json.loads((path.parent.parent / "status.json").read_text())
        assert status["figures"]["n_rollouts"] == 2 and status["figures"]["infra_failures"] == 0
    stores = [run / "rollout/trajectories.jsonl", run / "evaluate/arms/base.jsonl", *calibrations]
    final = [r for path in stores for r in latest(path).values()]
    assert all(r["infra_error"] is None and r["reward"] is not None for r in final)

    # malformed tool calls are data: each one served is in a trajectory, as a parse error or a tool error
    # (a reply the client gave up on, past its timeout on a loaded machine, is followed by the same request again:
    # the client never saw it, so it is not in a trajectory)
    bad = [c for r in final for m in r["messages"] for c in m.get("tool_calls") or [] if c.get("raw") == BAD_ARGUMENTS]
    assert bad and all(c["parse_error"] for c in bad)
    assert sorted(c["id"] for c in bad) == delivered(server, "bad_arguments")
    unknown = [m for r in final for m in r["messages"] if m["role"] == "tool" and m.get("name") == UNKNOWN_TOOL]
    assert unknown and all(m["error"] for m in unknown)
    assert len(unknown) == len(delivered(server, "unknown_tool"))
    assert all("not found" in m["content"] for m in unknown)
    kinds = {e["kind"] for r in final for e in r["errors"]}
    assert {"parse", "tool"} <= kinds and "infra" not in kinds
    manifest = json.loads((run / "manifest.json").read_text())
    assert {s: v["status"] for s, v in manifest["stages"].items() if s != "train"} == dict.fromkeys(
        ("rollout", "diagnose", "synthesize", "evaluate"), "done"
    )
