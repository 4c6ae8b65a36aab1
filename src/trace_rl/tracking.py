"""Experiment tracking (`run.report_to`): where GRPO curves, calibration attempts and evaluation tables go besides
the run directory's own files.

- `TrackingSettings`: the run-level choice (`none | trackio | wandb | mlflow | tensorboard`), the project (default:
  the run folder's name), the run name (a capability, a stage) and trackio's local folder (default `<run>/trackio`,
  so a run stays self-contained). Picklable: it travels with a training job into a spawned process.
- `Tracker`: `log(metrics, step)`, `log_table(key, rows, step)`, `finish()`; `make_tracker(settings)` builds one by
  name from `TRACKERS` (`none` is a no-op). trace-rl's own figures go through it; GRPO training instead hands the
  choice to transformers' own integration callbacks (`trainer_arguments`).
- `use_trackio_dir`: trackio reads `TRACKIO_DIR` once, when it is imported (TRL's GRPO trainer imports it), and
  keeps the paths in module constants; pointing it at a run's folder later rebinds those constants, then checks
  that trackio's own storage resolves into the folder.

Nothing is sent anywhere unless asked: the default is `none`; trackio logs to local SQLite files (no Space: unless
the user's own TRACKIO_SPACE_ID / TRACKIO_SERVER_URL environment says otherwise, which trackio itself honours).
wandb, mlflow and tensorboard are not dependencies: selecting one that is not installed is a one-line `UserError`;
their trackers are thin and untested here (the packages are absent from the test environment).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import math
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from trace_rl.config.core import RunSection
from trace_rl.errors import UserError

log = logging.getLogger(__name__)

TRACKIO_DIR_ENV = "TRACKIO_DIR"
TRACKIO_FOLDER = "trackio"
"""`<run>/trackio/`: trackio's SQLite files (`<project>.db`) when `run.tracking_dir` is unset."""

PACKAGES = {"trackio": "trackio", "wandb": "wandb", "mlflow": "mlflow", "tensorboard": "tensorboard"}
"""report_to -> the package it needs (import name = pip name for all four)."""


@dataclass(frozen=True)
class TrackingSettings:
    """Where one run's metrics go: `report_to`, the project, the run name, trackio's local folder."""

    report_to: str = "none"
    project: str = "trace-rl"
    run_name: str | None = None
    directory: Path | None = None

    @property
    def enabled(self) -> bool:
        return self.report_to != "none"

    def for_run(self, name: str) -> TrackingSettings:
        """The same project and folder under another run name (one per capability or stage)."""
        return replace(self, run_name=name)

    @classmethod
    def from_run(cls, section: RunSection, run_root: Path, run_name: str | None = None) -> TrackingSettings:
        """The config's run section for the run directory `run_root`."""
        root = Path(run_root)
        return cls(
            report_to=section.report_to,
            project=section.tracking_project or root.resolve().name,
            run_name=run_name,
            directory=section.tracking_dir or root / TRACKIO_FOLDER,
        )


@runtime_checkable
class Tracker(Protocol):
    """An experiment tracker's run."""

    name: str

    def log(self, metrics: Mapping[str, float], step: int | None = None) -> None: ...

    def log_table(self, key: str, rows: Sequence[Mapping[str, Any]], step: int | None = None) -> None: ...

    def finish(self) -> None: ...


def check_available(report_to: str) -> None:
    """A one-line `UserError` when `report_to` is unknown or its package is not installed."""
    if report_to not in TRACKERS:
        raise UserError(f"run.report_to: unknown tracker '{report_to}' (one of: {', '.join(TRACKERS)})")
    package = PACKAGES.get(report_to)
    if package is not None and importlib.util.find_spec(package) is None:
        raise UserError(
            f"run.report_to: {report_to} needs the '{package}' package, which is not installed "
            f"(pip install {package}, or set run.report_to: none)"
        )


def flat_metrics(values: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numeric leaves of a nested mapping, keys joined with '/' (bools as 0/1; NaN, text and lists dropped)."""
    out: dict[str, float] = {}
    for key, value in values.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            out.update(flat_metrics(value, name))
        elif isinstance(value, bool | int | float) and not (isinstance(value, float) and math.isnan(value)):
            out[name] = float(value)
    return out


# -- trackio's local folder -------------------------------------------------------------------------------------


def use_trackio_dir(directory: Path) -> Path:
    """Point trackio at `directory` (created): `TRACKIO_DIR` for what imports trackio from now on (child processes
    too), and trackio's module constants rebound when it is already imported. Checked through trackio's storage."""
    folder = Path(directory).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    os.environ[TRACKIO_DIR_ENV] = str(folder)
    paths = {"TRACKIO_DIR": folder, "MEDIA_DIR": folder / "media", "ARTIFACTS_DIR": folder / "artifacts"}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "trackio" or name.startswith("trackio.")):
            continue
        for attr, value in paths.items():
            if isinstance(getattr(module, attr, None), Path):
                setattr(module, attr, value)
    from trackio.sqlite_storage import SQLiteStorage

    where = SQLiteStorage.get_project_db_path("trace-rl").parent
    if where != folder:
        raise UserError(f"trackio writes to {where}, not {folder}: this trackio version keeps its folder elsewhere")
    return folder


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """trackio prints its progress to stdout; it goes to this module's log instead (stdout carries command output)."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        yield
    for line in buffer.getvalue().splitlines():
        if line.strip():
            log.info("trackio: %s", line.strip())


# -- trackers ---------------------------------------------------------------------------------------------------


class NoTracker:
    """`report_to: none`: logs nothing."""

    name = "none"

    def log(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        return None

    def log_table(self, key: str, rows: Sequence[Mapping[str, Any]], step: int | None = None) -> None:
        return None

    def finish(self) -> None:
        return None


class TrackioTracker:
    """One trackio run in the settings' project, in its local folder (resumed when the name exists)."""

    name = "trackio"

    def __init__(self, settings: TrackingSettings) -> None:
        if settings.directory is not None:
            use_trackio_dir(settings.directory)
        import trackio

        self._trackio = trackio
        with _quiet_stdout():
            self._run = trackio.init(
                project=settings.project,
                name=settings.run_name,
                resume="allow",
                embed=False,
                auto_log_cpu=False,
                auto_log_gpu=False,
            )

    def log(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self._run.log(dict(metrics), step=step)

    def log_table(self, key: str, rows: Sequence[Mapping[str, Any]], step: int | None = None) -> None:
        self._run.log({key: self._trackio.Table(data=[dict(r) for r in rows])}, step=step)

    def finish(self) -> None:
        with _quiet_stdout():
            self._run.finish()
        current = self._trackio.context_vars.current_run
        if current.get() is self._run:
            current.set(None)  # trackio's exit hook would finish it again


class WandbTracker:
    """A Weights & Biases run (needs `wandb`; its own settings decide online/offline)."""

    name = "wandb"

    def __init__(self, settings: TrackingSettings) -> None:
        import wandb

        self._wandb = wandb
        self._run = wandb.init(project=settings.project, name=settings.run_name, reinit=True)

    def log(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self._run.log(dict(metrics), step=step)

    def log_table(self, key: str, rows: Sequence[Mapping[str, Any]], step: int | None = None) -> None:
        columns = list(dict.fromkeys(k for r in rows for k in r))
        table = self._wandb.Table(columns=columns, data=[[r.get(c) for c in columns] for r in rows])
        self._run.log({key: table}, step=step)

    def finish(self) -> None:
        self._run.finish()


class MlflowTracker:
    """An MLflow run in the experiment named after the project (needs `mlflow`; MLFLOW_TRACKING_URI decides where)."""

    name = "mlflow"

    def __init__(self, settings: TrackingSettings) -> None:
        import mlflow

        self._mlflow = mlflow
        mlflow.set_experiment(settings.project)
        self._run = mlflow.start_run(run_name=settings.run_name)

    def log(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self._mlflow.log_metrics(dict(metrics), step=step)

    def log_table(self, key: str, rows: Sequence[Mapping[str, Any]], step: int | None = None) -> None:
        columns = list(dict.fromkeys(k for r in rows for k in r))
        self._mlflow.log_table({c: [r.get(c) for r in rows] for c in columns}, artifact_file=f"{key}.json")

    def finish(self) -> None:
        self._mlflow.end_run()


class TensorboardTracker:
    """Event files under `<trackio folder's parent>/tensorboard/<run name>` (needs `tensorboard`)."""

    name = "tensorboard"

    def __init__(self, settings: TrackingSettings) -> None:
        from torch.utils.tensorboard import SummaryWriter

        base = (settings.directory.parent if settings.directory is not None else Path(".")) / "tensorboard"
        self._writer = SummaryWriter(log_dir=str(base / (settings.run_name or settings.project)))

    def log(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, global_step=step)

    def log_table(self, key: str, rows: Sequence[Mapping[str, Any]], step: int | None = None) -> None:
        columns = list(dict.fromkeys(k for r in rows for k in r))
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(str(r.get(c, "")) for c in columns) + " |" for r in rows]
        self._writer.add_text(key, "\n".join(lines), global_step=step)

    def finish(self) -> None:
        self._writer.close()


TRACKERS: dict[str, Callable[[TrackingSettings], Tracker]] = {
    "none": lambda settings: NoTracker(),
    "trackio": TrackioTracker,
    "wandb": WandbTracker,
    "mlflow": MlflowTracker,
    "tensorboard": TensorboardTracker,
}


def make_tracker(settings: TrackingSettings | None) -> Tracker:
    """The tracker `settings.report_to` names (a no-op for none or no settings); one-line `UserError` otherwise."""
    if settings is None or not settings.enabled:
        return NoTracker()
    check_available(settings.report_to)
    return TRACKERS[settings.report_to](settings)


@contextlib.contextmanager
def tracking(settings: TrackingSettings | None) -> Iterator[Tracker]:
    """`make_tracker`, finished on the way out."""
    tracker = make_tracker(settings)
    try:
        yield tracker
    finally:
        tracker.finish()


# -- GRPO training: transformers' own integration callbacks ------------------------------------------------------


def trainer_arguments(settings: TrackingSettings | None) -> dict[str, Any]:
    """`TrainingArguments` / `GRPOConfig` fields for `settings` (report_to, project, run name); for trackio, its
    folder is set and no Space is made (`trackio_space_id=None`, no static Space after training)."""
    if settings is None or not settings.enabled:
        return {"report_to": "none"}
    check_available(settings.report_to)
    args: dict[str, Any] = {"report_to": [settings.report_to], "run_name": settings.run_name}
    if settings.report_to == "trackio":
        if settings.directory is not None:
            use_trackio_dir(settings.directory)
        args.update(project=settings.project, trackio_space_id=None, trackio_static_space_id=False)
    elif settings.report_to == "wandb":
        os.environ.setdefault("WANDB_PROJECT", settings.project)
    elif settings.report_to == "mlflow":
        os.environ.setdefault("MLFLOW_EXPERIMENT_NAME", settings.project)
    return args


__all__ = [
    "PACKAGES",
    "TRACKERS",
    "TRACKIO_DIR_ENV",
    "TRACKIO_FOLDER",
    "MlflowTracker",
    "NoTracker",
    "TensorboardTracker",
    "Tracker",
    "TrackingSettings",
    "TrackioTracker",
    "WandbTracker",
    "check_available",
    "flat_metrics",
    "make_tracker",
    "tracking",
    "trainer_arguments",
    "use_trackio_dir",
]
