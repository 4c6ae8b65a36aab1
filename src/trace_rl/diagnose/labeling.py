"""Discovery and the N labeling runs of the diagnose stage, each stored as it finishes and reused on a rerun.

`discover` asks the analyst once for a capability dictionary (at most `max_candidates`) → `diagnose/discovery.json`;
`label_all` runs the N labeling runs concurrently (at most `concurrency` at a time; run i with seed `seed + i`) →
`diagnose/labels/run_<i>.json`, each written atomically once `check_matrix` finds its labels complete (every
trajectory × every capability, except those the analyst reported as failed: `LabelResult.failed`, warned, counted NA
by the aggregation, and the reason a stored run is redone on a rerun). Resumable: a stored file is reused, not
redone, when its fingerprint (`fingerprint`, which the stage takes over the trajectories and outcomes, the analyst
and its settings and, for labeling runs, the dictionary) matches and, for a labeling run, its labels are complete for
the same capabilities; `fresh` redoes them all. Failed labeling runs raise once every run has finished: the others
are on disk, so a rerun redoes only the failed ones.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trace_rl.artifacts.capabilities import CandidateSpec, DiscoveryRecord, Label, LabelMatrix, LabelRunRecord
from trace_rl.artifacts.store import RunDir, atomic_write_json
from trace_rl.config.diagnose import DiagnoseConfig
from trace_rl.diagnose.items import Analyst, AnalystError, DiagnosisItem
from trace_rl.errors import UserError


def fingerprint(*parts: Any) -> str:
    blob = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _read_record(path: Path, model: type[Any]) -> Any | None:
    if not path.exists():
        return None
    try:
        return model.model_validate(json.loads(path.read_text()))
    except (ValueError, ValidationError):
        return None


def check_matrix(labels: LabelMatrix, ids: Sequence[str], names: Sequence[str], what: str) -> LabelMatrix:
    """Complete (every id × every name) or AnalystError; extra ids and names are dropped."""
    missing_ids = [i for i in ids if i not in labels]
    incomplete = [i for i in ids if i in labels and any(n not in labels[i] for n in names)]
    if missing_ids or incomplete:
        shown = ", ".join((missing_ids + incomplete)[:5])
        raise AnalystError(
            f"{what}: labels missing for {len(missing_ids)} trajectories and incomplete for {len(incomplete)} "
            f"({shown}); nothing was written"
        )
    return {i: {n: Label(labels[i][n]) for n in names} for i in ids}


async def discover(
    analyst: Analyst, items: Sequence[DiagnosisItem], cfg: DiagnoseConfig, path: Path, fp: str, fresh: bool
) -> tuple[DiscoveryRecord, bool]:
    old = None if fresh else _read_record(path, DiscoveryRecord)
    if old is not None and old.fingerprint == fp:
        return old, True
    result = await analyst.discover(items, seed=cfg.seed)
    candidates = result.candidates[: cfg.max_candidates]
    if not candidates:
        raise AnalystError(f"analyst '{analyst.name}' proposed no capabilities")
    record = DiscoveryRecord(
        analyst=analyst.name,  # the analyzer that ran (the structural one may give way to the behavioral)
        fingerprint=fp,
        candidates=candidates,
        warnings=result.warnings,
        prompt_chars=result.prompt_chars,
        created_at=time.time(),
    )
    record = DiscoveryRecord.model_validate(record.model_dump(mode="json"))
    atomic_write_json(path, record)
    return record, False


async def _label_run(
    analyst: Analyst,
    items: Sequence[DiagnosisItem],
    candidates: Sequence[CandidateSpec],
    cfg: DiagnoseConfig,
    run_index: int,
    path: Path,
    fp: str,
    gate: asyncio.Semaphore,
) -> LabelRunRecord:
    names = [c.name for c in candidates]
    ids = [i.id for i in items]
    async with gate:
        result = await analyst.label(items, candidates, run=run_index, seed=cfg.seed + run_index)
    failed = set(getattr(result, "failed", None) or ())  # per-trajectory failures are data: left out of this run
    labels = check_matrix(result.labels, [i for i in ids if i not in failed], names, f"labeling run {run_index}")
    record = LabelRunRecord(
        run=run_index,
        seed=cfg.seed + run_index,
        analyst=analyst.name,  # the analyzer that ran (the structural one may give way to the behavioral)
        fingerprint=fp,
        capabilities=names,
        labels=labels,
        warnings=result.warnings,
        calls=result.calls,
        created_at=time.time(),
    )
    atomic_write_json(path, record)
    return record


def _reusable(path: Path, fp: str, ids: Sequence[str], names: Sequence[str]) -> LabelRunRecord | None:
    old = _read_record(path, LabelRunRecord)
    if old is None or old.fingerprint != fp or old.capabilities != list(names):
        return None
    try:
        check_matrix(old.labels, ids, names, "stored run")
    except AnalystError:
        return None
    return old


async def label_all(
    analyst: Analyst,
    items: list[DiagnosisItem],
    candidates: Sequence[CandidateSpec],
    cfg: DiagnoseConfig,
    run: RunDir,
    fp: str,
    fresh: bool,
) -> tuple[list[LabelRunRecord], list[int]]:
    """N labeling runs, concurrently; stored runs with the same fingerprint are reused. Returns (runs, reused)."""
    names = [c.name for c in candidates]
    ids = [i.id for i in items]
    gate = asyncio.Semaphore(cfg.concurrency)
    records: dict[int, LabelRunRecord] = {}
    jobs: dict[int, Any] = {}
    for r in range(cfg.runs):
        path = run.label_run(r)
        old = None if fresh else _reusable(path, fp, ids, names)
        if old is not None:
            records[r] = old
        else:
            jobs[r] = _label_run(analyst, items, candidates, cfg, r, path, fp, gate)
    results = await asyncio.gather(*jobs.values(), return_exceptions=True)
    failures = []
    for r, res in zip(jobs, results, strict=True):
        if isinstance(res, BaseException):
            failures.append(res)
        else:
            records[r] = res
    if failures:  # the runs that finished are on disk; a rerun redoes only the failed ones
        first = next((f for f in failures if isinstance(f, UserError)), failures[0])
        if isinstance(first, UserError) and len(failures) > 1:
            raise type(first)(f"{first} ({len(failures)} of {cfg.runs} labeling runs failed)") from None
        raise first
    return [records[r] for r in range(cfg.runs)], sorted(set(records) - set(jobs))


__all__ = ["check_matrix", "discover", "fingerprint", "label_all"]
