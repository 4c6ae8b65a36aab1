"""A run's records as Hugging Face `datasets`: every trajectory store of the run in one dataset, the evaluation
comparison in another, each written with `save_to_disk` and/or as one parquet file (schema: docs/formats.md).

    <out>/trajectories/          Dataset.save_to_disk      <out>/trajectories.parquet
    <out>/evaluation/            (when evaluate ran)        <out>/evaluation.parquet

Trajectories: one row per latest record of each episode store (`rollout/trajectories.jsonl`, calibration, training,
held-out, routing-oracle and evaluation episodes: every `*.jsonl` under the run whose records are trajectories, read
with `trace_rl.artifacts.trajectories.read_trajectories`), with `source` (the file, relative to the run) and `stage`
(the stage that wrote it). Scalar fields are typed columns; the nested ones (`messages`, `reward_info`, `timings`,
`tokens`, `errors`, `metadata`: tool calls, token ids and free-form metadata, whose shapes vary between records) are
JSON text columns, so a loaded row validates to exactly the original `Trajectory` and any parquet reader can read
the file. Evaluation: one row per arm of `evaluate/comparison.json`, pass^k rows as typed lists of structs, `details`
as JSON text, and the comparison's env/split/tasks/trials on every row.

Departs from a plain `datasets` export in that nothing is inferred: the features are fixed (`TRAJECTORY_FEATURES`,
`EVALUATION_FEATURES`), so an all-null column keeps its type and two runs' datasets concatenate.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from trace_rl.artifacts.evaluation import ArmResult, Comparison
from trace_rl.artifacts.store import RunDir
from trace_rl.artifacts.trajectories import read_trajectories
from trace_rl.errors import UserError
from trace_rl.types import Trajectory

FORMATS = ("disk", "parquet", "both")
TRAJECTORIES = "trajectories"
EVALUATION = "evaluation"

SCALAR_FIELDS = {
    "id": "string",
    "env": "string",
    "split": "string",
    "task_id": "string",
    "trial": "int64",
    "seed": "int64",
    "reward": "float64",
    "success": "bool",
    "termination": "string",
    "infra_error": "string",
    "model": "string",
    "adapter": "string",
    "capability": "string",
    "user_model": "string",
}
"""Trajectory fields stored as typed columns; every other field is a JSON text column (`json_fields()`)."""

STAGE_OF_FOLDER = {"envs": "synthesize"}
"""The run folder a store sits in -> the stage that wrote it (rollout, train, route, evaluate keep their names)."""


def json_fields() -> list[str]:
    """The nested Trajectory fields, stored as JSON text (whatever `Trajectory` has beyond `SCALAR_FIELDS`)."""
    return [name for name in Trajectory.model_fields if name not in SCALAR_FIELDS]


def trajectory_features() -> Any:
    from datasets import Features, Value

    columns = {"source": Value("string"), "stage": Value("string")}
    columns.update({name: Value(dtype) for name, dtype in SCALAR_FIELDS.items()})
    columns.update({name: Value("string") for name in json_fields()})
    return Features(columns)


def evaluation_features() -> Any:
    from datasets import Features, List, Value

    row = {"k": Value("int64"), "value": Value("float64"), "low": Value("float64"), "high": Value("float64")}
    row["tasks"] = Value("int64")
    return Features(
        {
            "env": Value("string"),
            "split": Value("string"),
            "tasks": Value("int64"),
            "trials": Value("int64"),
            "name": Value("string"),
            "label": Value("string"),
            "description": Value("string"),
            "pass_k": List(row),
            "diff_to_base": List(row),
            "mean_reward": Value("float64"),
            "episodes": Value("int64"),
            "rollout_budget": Value("int64"),
            "adapters": List(Value("string")),
            "by_family": Value("string"),
            "details": Value("string"),
        }
    )


# -- rows ------------------------------------------------------------------------------------------------------


def trajectory_row(traj: Trajectory, source: str, stage: str) -> dict[str, Any]:
    data = traj.model_dump(mode="json")
    row: dict[str, Any] = {"source": source, "stage": stage}
    row.update({name: data[name] for name in SCALAR_FIELDS})
    row.update({name: None if data[name] is None else json.dumps(data[name]) for name in json_fields()})
    return row


def row_trajectory(row: dict[str, Any]) -> Trajectory:
    data = {name: row[name] for name in SCALAR_FIELDS}
    data.update({name: None if row[name] is None else json.loads(row[name]) for name in json_fields()})
    return Trajectory.model_validate(data)


def evaluation_row(comparison: Comparison, arm: ArmResult) -> dict[str, Any]:
    data = arm.model_dump(mode="json")
    data["details"] = json.dumps(data["details"])
    data["by_family"] = json.dumps(data["by_family"])
    context = {"env": comparison.env, "split": comparison.split, "tasks": comparison.tasks}
    return {**context, "trials": comparison.trials, **data}


def row_arm(row: dict[str, Any]) -> ArmResult:
    data = {name: row[name] for name in ArmResult.model_fields if name in row}
    data["details"] = json.loads(row["details"]) if row["details"] else {}
    data["by_family"] = json.loads(row["by_family"]) if row.get("by_family") else []
    return ArmResult.model_validate(data)


# -- reading the run -------------------------------------------------------------------------------------------


def trajectory_stores(run: RunDir) -> list[tuple[str, list[Trajectory]]]:
    """(path relative to the run, its latest trajectories) for every JSONL store of the run holding any, in path
    order (files whose records are not trajectories, like tasks.jsonl or serve/routes.jsonl, have none)."""
    out = []
    for path in sorted(run.root.rglob("*.jsonl")):
        rel = path.relative_to(run.root)
        if any(part.startswith(".") for part in rel.parts):
            continue
        found, _invalid = read_trajectories(path)
        if found:
            out.append((rel.as_posix(), list(found.values())))
    return out


def trajectory_rows(run: RunDir) -> list[dict[str, Any]]:
    rows = []
    for source, trajectories in trajectory_stores(run):
        folder = source.split("/", 1)[0]
        stage = STAGE_OF_FOLDER.get(folder, folder)
        rows.extend(trajectory_row(t, source, stage) for t in trajectories)
    return rows


def evaluation_rows(run: RunDir) -> list[dict[str, Any]]:
    if not run.comparison.exists():
        return []
    try:
        comparison = Comparison.load(run.comparison)
    except ValueError as exc:
        raise UserError(f"{run.comparison} is not a valid comparison: {str(exc).splitlines()[0]}") from None
    return [evaluation_row(comparison, arm) for arm in comparison.arms]


# -- export ----------------------------------------------------------------------------------------------------


def _write(dataset: Any, out: Path, name: str, fmt: str) -> list[Path]:
    written = []
    if fmt in ("disk", "both"):
        dataset.save_to_disk(str(out / name))
        written.append(out / name)
    if fmt in ("parquet", "both"):
        dataset.to_parquet(str(out / f"{name}.parquet"))
        written.append(out / f"{name}.parquet")
    return written


def export_run_datasets(run: Path, out: Path, *, fmt: str = "both", overwrite: bool = False) -> list[str]:
    """Write the run's trajectories (and evaluation, when there is one) as datasets into `out`; the lines to print.

    The folder is written beside `out` and renamed into place, so a failed export leaves no half-written `out`."""
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    run_dir = Path(run)
    if not run_dir.is_dir():
        raise UserError(f"run directory {run_dir} does not exist or is not a folder")
    rd = RunDir(run_dir)
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise UserError(f"{out} exists and is not empty (pass --overwrite to replace it)")
    if out.resolve().is_relative_to(run_dir.resolve()):
        raise UserError(f"--out {out} is inside the run directory {run_dir}; choose a folder outside it")
    trajectories, evaluation = trajectory_rows(rd), evaluation_rows(rd)
    if not trajectories and not evaluation:
        raise UserError(f"{run_dir}: no trajectories or evaluation results to export (is it a trace-rl run?)")
    from datasets import Dataset

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        lines = []
        for name, rows, features in (
            (TRAJECTORIES, trajectories, trajectory_features()),
            (EVALUATION, evaluation, evaluation_features()),
        ):
            if not rows:
                continue
            dataset = Dataset.from_list(rows, features=features)
            for path in _write(dataset, tmp, name, fmt):
                lines.append(f"{name}: {len(rows)} rows -> {out / path.name}")
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    sources = sorted({r["source"] for r in trajectories})
    if sources:
        lines.append(f"trajectories from {len(sources)} files: {', '.join(sources)}")
    return lines


# -- loading back ----------------------------------------------------------------------------------------------


def load_dataset_at(path: Path, name: str = TRAJECTORIES) -> Any:
    """A dataset written by `export_run_datasets`: its save_to_disk folder, its parquet file, or the export folder
    (the save_to_disk copy of `name` when present, else its parquet file)."""
    import datasets

    path = Path(path)
    if path.is_dir() and not (path / "dataset_info.json").exists():
        inner = path / name if (path / name).is_dir() else path / f"{name}.parquet"
        if not inner.exists():
            raise UserError(f"{path}: no {name} dataset (neither {name}/ nor {name}.parquet)")
        path = inner
    if path.is_dir():
        return datasets.load_from_disk(str(path))
    if path.suffix == ".parquet" and path.is_file():
        with tempfile.TemporaryDirectory() as cache:
            return datasets.Dataset.from_parquet(str(path), cache_dir=cache, keep_in_memory=True)
    raise UserError(f"{path}: not a dataset folder or a .parquet file")


def load_trajectories(path: Path) -> list[Trajectory]:
    """The trajectories of an exported dataset, each validated back into a `Trajectory`."""
    return [row_trajectory(row) for row in load_dataset_at(path, TRAJECTORIES)]


def load_evaluation(path: Path) -> list[ArmResult]:
    """The arms of an exported evaluation dataset, each validated back into an `ArmResult`."""
    return [row_arm(row) for row in load_dataset_at(path, EVALUATION)]


__all__ = [
    "EVALUATION",
    "FORMATS",
    "SCALAR_FIELDS",
    "TRAJECTORIES",
    "evaluation_features",
    "export_run_datasets",
    "json_fields",
    "load_dataset_at",
    "load_evaluation",
    "load_trajectories",
    "trajectory_features",
    "trajectory_stores",
]
