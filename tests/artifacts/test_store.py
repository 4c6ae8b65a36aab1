"""Atomic writes and append-only JSONL survive kill -9 at any instant; a killed stage resumes without loss."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trace_rl.artifacts.store import JsonlStore, RunDir, atomic_write_json, atomic_write_text, read_json
from trace_rl.errors import UserError

DUMMY_STAGE = textwrap.dedent(
    """
    import sys, time
    from trace_rl.artifacts.store import JsonlStore
    store = JsonlStore(sys.argv[1])
    done = store.keys()
    for i in range(int(sys.argv[2])):
        key = f"item-{i}"
        if key in done:
            continue
        store.append([{"id": key, "payload": "x" * 2000, "i": i}])
        time.sleep(0.01)
    print("finished", flush=True)
    """
)


def test_atomic_write_replaces_whole_file(tmp_path: Path):
    target = tmp_path / "a" / "f.json"
    atomic_write_json(target, {"v": 1})
    atomic_write_json(target, {"v": 2})
    assert read_json(target) == {"v": 2}
    assert [p.name for p in target.parent.iterdir()] == ["f.json"]  # no temp files left behind


def test_atomic_write_leaves_the_mode_a_plain_write_would(tmp_path: Path):
    fresh = tmp_path / "fresh.json"
    atomic_write_json(fresh, {"v": 1})
    plain = tmp_path / "plain.json"
    plain.write_text("{}")
    assert fresh.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777  # not mkstemp's 0600
    os.chmod(fresh, 0o640)
    atomic_write_json(fresh, {"v": 2})
    assert fresh.stat().st_mode & 0o777 == 0o640  # an existing file keeps its mode


def test_atomic_write_under_kill_leaves_old_or_new(tmp_path: Path):
    target = tmp_path / "big.txt"
    atomic_write_text(target, "old" * 10)
    script = (
        "import sys\nfrom trace_rl.artifacts.store import atomic_write_text\n"
        "while True:\n    atomic_write_text(sys.argv[1], 'new' * 3_000_000)\n"
    )
    for delay in (0.05, 0.2, 0.4):
        proc = subprocess.Popen([sys.executable, "-c", script, str(target)])
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        text = target.read_text()
        assert text in ("old" * 10, "new" * 3_000_000)


def test_jsonl_ignores_and_repairs_torn_tail(tmp_path: Path):
    store = JsonlStore(tmp_path / "t.jsonl")
    store.append([{"id": "a"}, {"id": "b"}])
    with store.path.open("ab") as fh:
        fh.write(b'{"id": "c", "trunc')  # a kill mid-append
    assert [r["id"] for r in store.records()] == ["a", "b"]
    store.append([{"id": "c"}])
    assert [r["id"] for r in store.records()] == ["a", "b", "c"]
    assert store.path.read_text().count("\n") == 3


def test_jsonl_last_record_of_a_key_wins(tmp_path: Path):
    store = JsonlStore(tmp_path / "t.jsonl")
    store.append([{"id": "a", "v": 1}, {"id": "b", "v": 1}])
    store.append([{"id": "a", "v": 2}])
    assert store.latest()["a"]["v"] == 2 and len(store.latest()) == 2


def wait_for_records(path: Path, at_least: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= at_least:
            return
        time.sleep(0.005)
    raise AssertionError(f"the stage wrote fewer than {at_least} records in {timeout_s} s")


@pytest.mark.parametrize("kill_at", [3, 25])
def test_killed_dummy_stage_resumes_without_loss_or_duplicates(tmp_path: Path, kill_at: int):
    path = tmp_path / "stage.jsonl"
    n = 60
    proc = subprocess.Popen([sys.executable, "-c", DUMMY_STAGE, str(path), str(n)], stdout=subprocess.PIPE)
    wait_for_records(path, kill_at)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = JsonlStore(path).keys()
    assert 0 < len(partial) < n, "the kill should land mid-stage"
    out = subprocess.run([sys.executable, "-c", DUMMY_STAGE, str(path), str(n)], capture_output=True, text=True)
    assert "finished" in out.stdout
    records = JsonlStore(path).records()
    ids = [r["id"] for r in records]
    assert sorted(ids, key=lambda k: int(k.split("-")[1])) == [f"item-{i}" for i in range(n)]  # none lost, none twice
    assert all(len(r["payload"]) == 2000 for r in records)


def test_run_dir_manifest_records_config_versions_and_stages(tmp_path: Path):
    run = RunDir(tmp_path / "runs" / "r1")
    run.ensure({"env": {"name": "library"}}, command="trace-rl rollout")
    with run.stage("rollout", {"trials": 2}) as record:
        record.summary["episodes"] = 3
    manifest = run.manifest()
    assert manifest.config == {"env": {"name": "library"}}
    assert manifest.stages["rollout"].status == "done" and manifest.stages["rollout"].summary == {"episodes": 3}
    assert "pydantic" in manifest.packages and manifest.python
    with pytest.raises(RuntimeError), run.stage("diagnose"):
        raise RuntimeError("boom")
    assert run.manifest().stages["diagnose"].status == "failed"
    run.ensure(command="trace-rl report")
    assert run.manifest().commands == ["trace-rl rollout", "trace-rl report"]
    assert json.loads(run.manifest_path.read_text())["name"] == "r1"


def test_not_a_run_dir_is_a_user_error(tmp_path: Path):
    with pytest.raises(UserError, match="not a trace-rl run"):
        RunDir(tmp_path).manifest()
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(UserError, match="not valid JSON"):
        read_json(tmp_path / "bad.json")
