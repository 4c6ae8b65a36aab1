"""`trace-rl rollout | report | view` end to end: a real subprocess killed with SIGKILL mid-run, then resumed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from trace_rl.artifacts.store import JsonlStore
from trace_rl.cli.app import main

from .fake_openai import FakeOpenAI

TRACE_RL = Path(sys.executable).with_name("trace-rl")


def rollout_argv(server: FakeOpenAI, run: Path, *extra: str) -> list[str]:
    return [
        "rollout", "--env", "library", "--split", "train", "--trials", "2", "--task-limit", "24",
        "--model", f"openai:fake@{server.base_url}", "--run", str(run), "--concurrency", "4", "--progress", "plain",
        *extra,
    ]  # fmt: skip  # argv: each flag beside its value


def test_kill_9_mid_run_then_resume(tmp_path):
    run = tmp_path / "runs" / "kill"
    store = JsonlStore(run / "rollout" / "trajectories.jsonl")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with FakeOpenAI(("fake",), delay_s=0.03) as server:
        argv = [str(TRACE_RL), *rollout_argv(server, run)]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if store.path.exists() and len(store.records()) >= 6:
                break
            time.sleep(0.02)
        assert proc.poll() is None, f"finished before the kill: {proc.stdout.read().decode()[-2000:]}"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        partial = store.records()
        assert 6 <= len(partial) < 48
        assert run.joinpath("manifest.json").exists()

        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"{48 - len(partial)} episodes run, {len(partial)} already done" in done.stdout
    latest = store.latest()
    expected = {f"library/train/{t}/{k}" for t in {r["task_id"] for r in latest.values()} for k in (0, 1)}
    assert len(latest) == 48 and set(latest) == expected
    assert all(r["infra_error"] is None and r["reward"] is not None for r in latest.values())
    counts = Counter(r["id"] for r in store.records() if r["infra_error"] is None)
    assert max(counts.values()) == 1  # nothing written twice, nothing lost
    manifest = json.loads((run / "manifest.json").read_text())
    assert [c.startswith("trace-rl rollout --env library") for c in manifest["commands"]] == [True, True]
    assert manifest["stages"]["rollout"]["status"] == "done"


def test_sigterm_stops_cleanly(tmp_path):
    run = tmp_path / "runs" / "term"
    store = JsonlStore(run / "rollout" / "trajectories.jsonl")
    with FakeOpenAI(("fake",), delay_s=0.05) as server:
        proc = subprocess.Popen(
            [str(TRACE_RL), *rollout_argv(server, run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None and len(store.records()) < 4:
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted; rerun the same command to resume" in err
    records = store.records()
    assert 4 <= len(records) < 48 and len({r["id"] for r in records}) == len(records)
    assert '"status": "failed"' in (run / "manifest.json").read_text()


def test_cli_report_and_view(tmp_path, capsys):
    run = tmp_path / "r"
    with FakeOpenAI(("fake",)) as server:
        assert main([*rollout_argv(server, run)[:-2], "--progress", "none"]) == 0
    out = capsys.readouterr().out
    assert "48 episodes run, 0 already done, 48 planned" in out and f"trace-rl report --run {run}" in out

    assert main(["report", "--run", str(run)]) == 0
    out = capsys.readouterr().out
    for text in ("library", "train", "pass^k", "95% CI", "termination reasons", "user_stop", "24/24"):
        assert text in out

    assert main(["report", "--run", str(run), "--json"]) == 0
    assert '"pass_k"' in capsys.readouterr().out

    assert main(["view", str(run), "--failed", "--limit", "5"]) == 0
    out = capsys.readouterr().out
    assert out.count("FAILED library/train/") == 5 and "48 trajectories match" in out

    first = sorted(JsonlStore(run / "rollout" / "trajectories.jsonl").latest())[0]
    assert main(["view", str(run), "--id", first]) == 0
    out = capsys.readouterr().out
    assert first in out and "assistant: Hi! How can I help you today?" in out and "reward" in out
    assert "tokens: " in out  # sampled token ids were recorded

    assert main(["view", str(run), "--infra"]) == 1
    assert "no trajectories match" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["rollout", "--env", "nope"], "unknown environment 'nope'"),
        (["rollout", "--env", "library", "--split", "dev"], "has no split 'dev'"),
        (["rollout", "--env", "library", "--model", "nonexistent-model"], "unknown model 'nonexistent-model'"),
        (["report", "--run", "/nonexistent/run"], "is not a trace-rl run"),
    ],
)
def test_cli_user_errors_are_one_line(tmp_path, capsys, argv, message):
    assert main([*argv, *(["--run", str(tmp_path / "r")] if argv[0] == "rollout" else [])]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
