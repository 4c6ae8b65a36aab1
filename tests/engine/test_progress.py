"""Progress: plain log lines off a terminal, counters right, a rich bar that starts and stops cleanly."""

from __future__ import annotations

import io

from trace_rl.engine.progress import PlainProgress, RichProgress, make_progress
from trace_rl.types import TokenCounts, Trajectory


def traj(success: bool | None, infra: str | None = None) -> Trajectory:
    return Trajectory(
        id="e/s/t/0",
        env="e",
        split="s",
        task_id="t",
        trial=0,
        seed=0,
        success=success,
        infra_error=infra,
        tokens=TokenCounts(prompt=10, completion=50, model_calls=2),
    )


def test_auto_is_plain_off_a_terminal():
    assert isinstance(make_progress("auto", io.StringIO()), PlainProgress)
    assert isinstance(make_progress("rich"), RichProgress)


def test_plain_lines():
    out = io.StringIO()
    progress = PlainProgress(out, interval_s=0.0)
    progress.start("tau2:mock/train", total=3, resumed=2)
    for t in (traj(True), traj(False), traj(None, "timeout: request timed out")):
        progress.episode_started()
        progress.episode_finished(t)
    progress.note("stopping")
    progress.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "[tau2:mock/train] 3 episodes to run (2 already done)"
    assert "5/5 episodes (3 this run)" in lines[-1]
    assert "success 50.0% (1/2)" in lines[-1] and "infra errors 1" in lines[-1] and "in flight 0" in lines[-1]
    assert "tok/s" in lines[-1] and "[tau2:mock/train] stopping" in lines


def test_rich_bar_runs():
    progress = RichProgress()
    progress.start("x", total=2, resumed=0)
    progress.episode_started()
    progress.episode_finished(traj(True))
    progress.close()
    assert progress.state.done == 1 and progress.state.successes == 1
