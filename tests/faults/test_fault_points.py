"""The kill points the fault tests rely on (`TRACE_RL_FAULT_AT`) fire exactly where they say, and a Trainer checkpoint
torn by a kill mid-save is never resumed from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trace_rl.faults import ENV_VAR, parse
from trace_rl.training.checkpoints import last_complete_checkpoint

WRITER = """
import sys
from trace_rl.artifacts.store import JsonlStore, atomic_write_json
folder = sys.argv[1]
for i in range(1, 6):
    JsonlStore(folder + "/x.jsonl").append([{"id": str(i)}])
    atomic_write_json(folder + "/a.json", {"version": i})
"""


def write_until_killed(folder: Path, fault: str) -> int:
    env = {**os.environ, ENV_VAR: fault}
    return subprocess.run([sys.executable, "-c", WRITER, str(folder)], env=env, timeout=60).returncode


@pytest.mark.parametrize("spec", ["append:*.jsonl", "append:*.jsonl:0", "rename:*.json:1", "write::1", "write:x:y"])
def test_malformed_spec_is_an_error(spec: str):
    with pytest.raises(ValueError, match=ENV_VAR):
        parse(spec)


def test_append_point_kills_after_the_nth_append_is_on_disk(tmp_path: Path):
    assert write_until_killed(tmp_path, "append:*/x.jsonl:3") == -9
    assert [json.loads(line)["id"] for line in (tmp_path / "x.jsonl").read_text().splitlines()] == ["1", "2", "3"]
    assert json.loads((tmp_path / "a.json").read_text()) == {"version": 2}  # the write after append 3 never ran


def test_write_point_kills_between_fsync_and_rename(tmp_path: Path):
    assert write_until_killed(tmp_path, "write:*/a.json:2") == -9
    assert json.loads((tmp_path / "a.json").read_text()) == {"version": 1}  # the old file, whole
    (stray,) = tmp_path.glob(".a.json.*.tmp")
    assert json.loads(stray.read_text()) == {"version": 2}  # the new one, complete but never renamed
    assert len((tmp_path / "x.jsonl").read_text().splitlines()) == 2


def test_other_paths_do_not_count(tmp_path: Path):
    assert write_until_killed(tmp_path, "append:*/elsewhere.jsonl:1") == 0
    assert len((tmp_path / "x.jsonl").read_text().splitlines()) == 5


def test_resume_skips_and_removes_checkpoints_torn_by_a_kill(tmp_path: Path):
    assert last_complete_checkpoint(tmp_path / "none") is None
    for step, state in [(1, '{"global_step": 1}'), (2, '{"global_step": 2}'), (3, '{"global_st'), (10, None)]:
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "adapter_model.safetensors").write_bytes(b"weights")
        if state is not None:
            (folder / "trainer_state.json").write_text(state)
    (tmp_path / "checkpoint-x").mkdir()
    assert last_complete_checkpoint(tmp_path, remove_incomplete=False) == str(tmp_path / "checkpoint-2")
    assert (tmp_path / "checkpoint-10").exists()
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")  # 10 > 3 > 2 numerically
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-1", "checkpoint-2", "checkpoint-x"]
