"""ToolSandbox's result table: perfect counts, mean similarity, pass^k and per-category cells over the latest scored
trajectory of each (task, trial), infrastructure failures apart; and the benchmark script end to end on a run
directory written by the real rollout command (scripted policy), with the do-nothing floor beside it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trace_rl.envs.toolsandbox.scoreboard import markdown_table, scoreboard
from trace_rl.types import Task, TerminationReason, Trajectory

from .helpers import needs_data

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "toolsandbox_table.py"


def _task(tid: str, *cats: str) -> Task:
    return Task(id=tid, description="x", metadata={"categories": list(cats)})


def _traj(tid: str, trial: int, reward: float | None, termination=TerminationReason.USER_STOP) -> Trajectory:
    return Trajectory(
        id=f"{tid}-{trial}",
        env="toolsandbox:x",
        split="all",
        task_id=tid,
        trial=trial,
        seed=trial,
        model="m",
        reward=reward,
        termination=termination,
    )


def test_cells_count_perfect_mean_and_pass_k_per_category() -> None:
    tasks = [_task("a", "STATE_DEPENDENCY", "MULTIPLE_TOOL_CALL"), _task("b", "MULTIPLE_TOOL_CALL"), _task("c", "X")]
    trajs = [
        _traj("a", 0, 0.2),
        _traj("a", 0, 1.0),  # a later record of the same key wins
        _traj("a", 1, 1.0),
        _traj("b", 0, 0.5),
        _traj("b", 1, 1.0),
        _traj("c", 0, None, TerminationReason.INFRA_ERROR),
        _traj("zzz", 0, 1.0),  # not one of the tasks
    ]
    board = scoreboard(trajs, tasks, ks=[1, 2])
    assert board.unscored == 1
    assert (board.overall.tasks, board.overall.episodes, board.overall.perfect) == (2, 4, 3)
    assert board.overall.mean_similarity == pytest.approx((1.0 + 1.0 + 0.5 + 1.0) / 4)
    assert board.overall.pass_k == {1: 0.5, 2: 0.5}  # a: both trials perfect; b: first not
    multi = board.categories["MULTIPLE_TOOL_CALL"]
    assert (multi.tasks, multi.perfect) == (2, 3)
    state = board.categories["STATE_DEPENDENCY"]
    assert state.pass_k == {1: 1.0, 2: 1.0} and state.mean_similarity == 1.0
    assert "X" not in board.categories  # its only episode was not scored
    table = markdown_table({"agent": board})
    assert "| all | 3/4 | 0.875 |" in table and "| STATE_DEPENDENCY | 2/2 | 1.000 |" in table


@needs_data
def test_table_script_on_a_real_rollout_run(tmp_path) -> None:
    from trace_rl.cli.app import main as cli

    def table_main(argv: list[str]) -> int:
        return subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True).returncode

    model = tmp_path / "sorry.yaml"
    # one apology per call (the scripted user ends each episode at the agent's first text turn)
    model.write_text("kind: scripted\nscript:\n" + "  - I am sorry, but I cannot assist with that.\n" * 24)
    run = tmp_path / "run"
    argv = ["rollout", "--env", "toolsandbox:base_offline", "--split", "all", "--model", str(model), "--run", str(run)]
    assert cli([*argv, "--task-limit", "12", "--progress", "none"]) == 0
    assert table_main(["--run", str(run)]) == 0
    table = json.loads((run / "toolsandbox_table.json").read_text())
    assert table["tasks"] == 12
    # the scripted apology is the do-nothing agent: the same table as the floor, category by category
    assert table["agent"] == table["floor"]
    assert table["agent"]["overall"]["episodes"] == 12
    assert table_main(["--run", str(tmp_path / "missing")]) == 2
