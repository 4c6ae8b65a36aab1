"""Generator 2: an author model's code is extracted, run in the sandbox, validated and leak-checked; rejected code
goes back to the author with the problems, and the accepted generator's tasks are materialised for every seed."""

from __future__ import annotations

from trace_rl.config.synthesize import SynthesizeConfig
from trace_rl.envs.synthetic import load_capability_env
from trace_rl.models.scripted import ScriptedClient
from trace_rl.synthesize.llm_author import extract_code
from trace_rl.synthesize.stage import run_synthesize

from .synth_helpers import BROKEN_GENERATOR, LIBRARY_GENERATOR, fenced, make_library_run, read_json


def test_extract_code():
    assert extract_code(fenced(LIBRARY_GENERATOR)).startswith("import json")
    two = fenced("x = 1") + fenced("def generate(seed, api):\n    return {}")
    assert extract_code(two) == "def generate(seed, api):\n    return {}\n"
    assert extract_code("def generate(seed, api):\n    return 1") is not None
    assert extract_code("I cannot do that.") is None


def test_author_rewrites_until_valid(tmp_path):
    name = "precondition_verification"
    run = make_library_run(tmp_path / "run", [name])
    author = ScriptedClient(["Let me think about it.", fenced(BROKEN_GENERATOR), fenced(LIBRARY_GENERATOR)])
    syn = SynthesizeConfig(generator="llm", calibrate=False, validation_seeds=4, train_seeds=10, test_seeds=4)
    report = run_synthesize(run, None, {"author": author}, syn=syn)
    folder = run.root / "envs" / name
    assert report["capabilities"][name]["status"] == "ready", read_json(folder / "status.json")
    assert (folder / "generator.py").read_text() == LIBRARY_GENERATOR.strip() + "\n"
    log = read_json(folder / "author" / "log.json")
    assert [a["ok"] for a in log] == [False, False, True]
    assert "no ```python block" in log[0]["feedback"] and "lend_book" in log[1]["feedback"]
    second = (folder / "author" / "attempt_2" / "prompt.md").read_text()
    third = (folder / "author" / "attempt_3" / "prompt.md").read_text()
    assert "It was rejected" in second and "lend_book" in third and "find_member_by_email" in third
    assert "library/test" not in third  # evidence shown to the author is train-only
    spec = read_json(folder / "spec.json")
    assert spec["generator"]["kind"] == "code" and spec["provenance"]["author"] == "scripted"
    pool = (folder / "tasks.jsonl").read_text().splitlines()
    assert len(pool) == 14  # every train and test seed
    assert read_json(folder / "leak.json")["ok"]
    env = load_capability_env(folder)
    task = env.make_task(3)
    assert task.id == f"{name}-3" and task.metadata["world_seed"] >= 2_000_000
    assert env.scripted_user(task).opening.startswith("Hi! I'd like to borrow")
    outside = env.make_task(777)  # not in the pool: generated in the sandbox on demand
    assert outside.id == f"{name}-777" and outside.evaluation_criteria.actions
