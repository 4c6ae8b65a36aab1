"""The viewer: filters, and a readable rendering of messages, tool calls, tool results, rewards and errors."""

from __future__ import annotations

import asyncio
import io

from rich.console import Console
from tests.rollout.toy import ToyPolicy

from trace_rl.artifacts.store import JsonlStore
from trace_rl.engine.plan import plan_jobs
from trace_rl.engine.runner import EpisodeFactory, run_rollout
from trace_rl.report.view import ViewFilter, view


def outcome(task: str, trial: int) -> str:
    return {"train-1": "fail", "train-2": "infra"}.get(task, "ok")


def make_run(toy, run_dir):
    factory = EpisodeFactory(domain=toy, env_name="toy", split="train", client=ToyPolicy(outcome), model_name="toy")
    jobs = plan_jobs("toy", "train", toy.tasks("train")[:3], 2, 300)
    asyncio.run(run_rollout(jobs, factory, JsonlStore(run_dir.trajectories)))


def show(run_dir, **kw) -> tuple[int, str]:
    out = io.StringIO()
    flt_keys = {"failed", "infra", "task", "trial", "id", "env", "split"}
    flt = ViewFilter(**{k: v for k, v in kw.items() if k in flt_keys})
    rest = {k: v for k, v in kw.items() if k not in flt_keys}
    n = view(run_dir, flt, console=Console(file=out, width=200, highlight=False), **rest)
    return n, out.getvalue()


def test_filters(toy, run_dir):
    make_run(toy, run_dir)
    assert show(run_dir)[0] == 6
    n, out = show(run_dir, failed=True)
    assert n == 2 and "FAILED toy/train/train-1/0" in out and "FAILED toy/train/train-1/1" in out
    assert show(run_dir, infra=True)[0] == 2
    assert show(run_dir, failed=True, infra=True)[0] == 4
    assert show(run_dir, task="train-0", trial=1)[0] == 1
    assert show(run_dir, id="toy/train/train-2/0", infra=True)[0] == 1
    assert show(run_dir, split="test")[0] == 0


def test_one_trajectory_in_full(toy, run_dir):
    make_run(toy, run_dir)
    n, out = show(run_dir, id="toy/train/train-1/0")
    assert n == 1
    assert "FAILURE · reward 0.0" in out and "termination user_stop" in out
    assert "user: [train-1] please add 2 to a" in out
    assert 'increment(name="a", by=3)' in out  # the (wrong) tool call, with its arguments
    assert "tool increment (c3): 4" in out  # the tool result
    assert "DB 0.0" in out and "tokens: 3 prompt, 2 sampled" in out


def test_infra_trajectory_and_markup_safety(toy, run_dir):
    make_run(toy, run_dir)
    n, out = show(run_dir, id="toy/train/train-2/1")
    assert "INFRA FAILURE (not scored, retried on rerun): connection: connection refused" in out
    n, out = show(run_dir, task="train-0", show_all=True)
    assert n == 2 and out.count("SUCCESS") == 2 and "[train-0]" in out  # rich markup is not interpreted
