"""kill -9 of `trace-rl run` at six points (mid-rollout, mid-calibration, mid-training with a torn checkpoint,
mid-route, mid-evaluate, mid-report), each followed by the same command again, ends with the same artefacts as an
uninterrupted run: every trajectory once, the same capabilities, calibration decisions, adapter weights, training
metrics, router, comparison numbers and report.

Kill points are deterministic: `TRACE_RL_FAULT_AT=<event>:<path glob>:<n>` (src/trace_rl/faults.py) makes the process
SIGKILL itself right after the n-th append to a JSONL store, or between an atomic write's fsync and its rename. Each
run in the chain is the same command; its fault point only decides where it dies, and the next run resumes from there.
Everything here is deterministic across processes (trial seeds, the tiny model's seeded sampling, the Trainer's saved
RNG state), so artefacts are compared exactly, less clocks, durations and the run directory's path.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from .pipeline_run import EVAL_EPISODES, ROLLOUT_EPISODES, by_id, finish, jsonl_records, read, start_run, write_config


def snapshot(run: Path) -> dict[str, Any]:
    """The run's deterministic artefacts, one entry per file (per record for JSONL stores, last record of a key)."""
    snap: dict[str, Any] = {
        "rollout": by_id(run / "rollout/trajectories.jsonl", run),
        "diagnose": read(run / "diagnose/capabilities.json", run),
        "synthesize": read(run / "synthesize/capabilities.json", run),
        "route/router": read(run / "route/router.json", run),
        "route/accuracy": read(run / "route/accuracy.json", run),
    }
    for env in sorted(p for p in (run / "envs").iterdir() if p.is_dir()):
        snap[f"envs/{env.name}/status"] = read(env / "status.json", run)
        snap[f"envs/{env.name}/calibration"] = read(env / "calibration.json", run)
        snap[f"envs/{env.name}/calibration-episodes"] = by_id(env / "calibration/trajectories.jsonl", run)
    for adapter in sorted(p for p in (run / "adapters").iterdir() if p.is_dir()):
        name = f"adapters/{adapter.name}"
        snap[f"{name}/weights"] = hashlib.sha256((adapter / "adapter_model.safetensors").read_bytes()).hexdigest()
        snap[f"{name}/metrics"] = by_id(adapter / "metrics.jsonl", run, key="step")
        snap[f"{name}/done"] = (adapter / "done.json").is_file()
        for part in ("eval_before", "eval_after"):
            snap[f"{name}/{part}"] = read(adapter / f"{part}.json", run)
        snap[f"{name}/training-episodes"] = sorted(by_id(run / "train" / adapter.name / "trajectories.jsonl", run))
    comparison = read(run / "evaluate/comparison.json", run)
    for arm in comparison["arms"]:
        arm.get("details", {}).pop("route_calls", None)  # classifier calls made by this process, not a result
    snap["evaluate/comparison"] = comparison
    for arm_file in sorted((run / "evaluate/arms").glob("*.jsonl")):
        snap[f"evaluate/arms/{arm_file.stem}"] = by_id(arm_file, run)
    return snap


def stages(run: Path) -> dict[str, str]:
    return {name: s["status"] for name, s in json.loads((run / "manifest.json").read_text())["stages"].items()}


def count(path: Path) -> int:
    return len(jsonl_records(path)) if path.exists() else 0


def tear_checkpoint(checkpoints: Path, step: int) -> None:
    """What a kill inside the Trainer's checkpoint save leaves: the adapter weights of `checkpoint-<step>` written, the
    optimizer state cut short, no trainer_state.json (the Trainer writes it last, in place, without a temp folder)."""
    done, torn = checkpoints / f"checkpoint-{step - 1}", checkpoints / f"checkpoint-{step}"
    torn.mkdir()
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        shutil.copy(done / name, torn / name)
    (torn / "optimizer.pt").write_bytes((done / "optimizer.pt").read_bytes()[:100])


def check_mid_rollout(run: Path) -> None:
    assert 0 < count(run / "rollout/trajectories.jsonl") < ROLLOUT_EPISODES
    assert stages(run)["rollout"] == "running"  # SIGKILL: no chance to record anything


def check_mid_calibration(run: Path) -> None:
    (env,) = [p.parent.parent for p in run.glob("envs/*/calibration/trajectories.jsonl")]  # the first capability
    assert count(env / "calibration/trajectories.jsonl") > 0 and not (env / "status.json").exists()
    assert stages(run)["synthesize"] == "running"


def check_mid_training(run: Path) -> None:
    (adapter,) = [p.parent for p in run.glob("adapters/*/metrics.jsonl")]  # the first capability
    checkpoints = run / "train" / adapter.name / "checkpoints"
    assert [r["step"] for r in jsonl_records(adapter / "metrics.jsonl")] == [1, 2]  # step 2 done, not saved
    assert (checkpoints / "checkpoint-1/trainer_state.json").is_file() and not (checkpoints / "checkpoint-2").exists()
    assert not (adapter / "done.json").exists() and not (adapter / "adapter_model.safetensors").exists()
    tear_checkpoint(checkpoints, 2)  # the rerun must resume from checkpoint-1, not crash on the torn checkpoint-2


def check_mid_route(run: Path) -> None:
    assert not (run / "route/router.json").exists() and list((run / "route").glob(".router.json.*.tmp"))
    assert stages(run)["train"] == "done" and "route" not in stages(run)  # the router is written first


def check_mid_evaluate(run: Path) -> None:
    assert count(run / "evaluate/arms/base.jsonl") == EVAL_EPISODES
    assert count(run / "evaluate/arms/trace.jsonl") == 1
    assert not (run / "evaluate/comparison.json").exists()


def check_mid_report(run: Path) -> None:
    assert not (run / "report.html").exists() and list(run.glob(".report.html.*.tmp"))
    assert (run / "evaluate/comparison.json").exists()


KILL_POINTS = [
    ("append:*/rollout/trajectories.jsonl:2", check_mid_rollout),
    ("append:*/envs/*/calibration/trajectories.jsonl:1", check_mid_calibration),
    ("append:*/adapters/*/metrics.jsonl:2", check_mid_training),
    ("write:*/route/router.json:1", check_mid_route),
    ("append:*/evaluate/arms/trace.jsonl:1", check_mid_evaluate),
    ("write:*/report.html:1", check_mid_report),
]


def test_kill_9_at_six_points_then_rerun_gives_the_uninterrupted_artefacts(tmp_path: Path):
    ref_config, ref_run = write_config(tmp_path / "reference")
    uninterrupted = start_run(ref_config, tmp_path / "reference.log")  # runs alongside the killed chain
    try:
        config, run = write_config(tmp_path / "killed")
        for i, (fault, check) in enumerate(KILL_POINTS):
            log = tmp_path / f"killed-{i}.log"
            code, out = finish(start_run(config, log, fault), log)
            assert code == -9, f"{fault}: exit {code}\n{out}"
            check(run)
        code, out = finish(start_run(config, tmp_path / "rerun.log"), tmp_path / "rerun.log")
        assert code == 0, out
    except BaseException:
        uninterrupted.kill()
        uninterrupted.wait()
        raise
    ref_code, ref_out = finish(uninterrupted, tmp_path / "reference.log")
    assert ref_code == 0, ref_out
    reference = snapshot(ref_run)
    assert [k for k in reference if k.endswith("/done") and reference[k]], "no adapter was trained: nothing resumed"
    assert len(reference["evaluate/arms/trace"]) == EVAL_EPISODES  # the routed-adapter arm ran

    assert set(stages(run).values()) == {"done"}
    assert (run / "report.html").read_text().rstrip().endswith("</html>")
    for store in [
        run / "rollout/trajectories.jsonl",
        *run.glob("evaluate/arms/*.jsonl"),
        *run.glob("envs/*/calibration/trajectories.jsonl"),
    ]:
        ids = [r["id"] for r in jsonl_records(store)]
        assert len(ids) == len(set(ids)), f"{store}: an episode was written twice"
    assert count(run / "rollout/trajectories.jsonl") == ROLLOUT_EPISODES
    assert {r["task_id"] for r in jsonl_records(run / "rollout/trajectories.jsonl")} == {
        r["task_id"] for r in reference["rollout"].values()
    }
    for path in run.rglob("*.json"):
        json.loads(path.read_text())  # nothing torn (stray `.*.tmp` files from the write kills are not read)

    resumed = snapshot(run)
    assert sorted(resumed) == sorted(reference)
    for key in reference:
        assert resumed[key] == reference[key], key
