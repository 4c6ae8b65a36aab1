"""The diagnose stage: rollouts → discovery → N labeling runs → aggregation → `diagnose/capabilities.json`.

Reads `rollout/trajectories.jsonl` (last record of an id wins). Excludes, and counts: infrastructure failures
(`infra_error` set), unscored episodes (`success` is None), records that do not parse, and trajectories of splits not in
`splits` (default: train only). A test split in `splits` is refused unless `allow_test_split` (docs/method-notes.md
§6.1: the paper mined capabilities from its test tasks); without it, a split that mixes train and test tasks (τ²'s
`base`) keeps only its train tasks. The splits used are recorded in capabilities.json. Each kept trajectory is paired
with its task (gold actions) from the environments the trajectories name.

The analyst comes from `analyst.py` (with no gold actions the structural analyzer gives way to the behavioral one;
capabilities.json and the fingerprints name the analyst that ran); discovery and the labeling runs, each reused when
its stored file has the same fingerprint, from `labeling.py`; the runs are aggregated (`aggregate.py`) into
`diagnose/capabilities.json`, written atomically after validation. A failure in any step raises before
capabilities.json is touched, so the previous file stays intact.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import ValidationError

from trace_rl.artifacts.capabilities import (
    CapabilitiesFile,
    DiscoveryRecord,
    Label,
    LabelRunRecord,
    SelectionParams,
    write_capabilities,
)
from trace_rl.artifacts.store import RunDir
from trace_rl.artifacts.trajectories import read_reference_tasks, read_trajectories
from trace_rl.config import EnvConfig, TraceConfig
from trace_rl.config.diagnose import PROBE, DiagnoseConfig, is_test_split
from trace_rl.diagnose.aggregate import aggregate
from trace_rl.diagnose.analyst import make_analyst
from trace_rl.diagnose.calls import WriteOracle, domain_write_kinds, write_oracle
from trace_rl.diagnose.items import Analyst, DiagnosisItem
from trace_rl.diagnose.labeling import check_matrix, discover, fingerprint, label_all
from trace_rl.engine.progress import Progress, make_progress
from trace_rl.errors import UserError
from trace_rl.models.base import ModelClient
from trace_rl.models.registry import build_client
from trace_rl.models.specs import model_from_spec
from trace_rl.stage import StageContext
from trace_rl.types import Capability, Task, Trajectory

STAGE = "diagnose"


@dataclass
class DiagnoseResult:
    path: Path
    file: CapabilitiesFile
    reused: dict[str, Any] = field(default_factory=dict)

    @property
    def selected(self) -> list[str]:
        return [c.name for c in self.file.selected]


# -- inputs ---------------------------------------------------------------------------------------------------------
def load_trajectories(run: RunDir) -> tuple[list[Trajectory], int]:
    """Latest record per id from the rollout store, and how many records did not parse."""
    if not run.trajectories.exists():
        raise UserError(f"no rollouts in {run.trajectories}: run `trace-rl rollout` for this run first")
    by_id, bad = read_trajectories(run.trajectories)
    return list(by_id.values()), bad


def select_trajectories(
    trajectories: Sequence[Trajectory], cfg: DiagnoseConfig
) -> tuple[list[Trajectory], dict[str, Any]]:
    """The diagnosed set D and the counts of everything left out (leak guard included)."""
    leaking = [s for s in cfg.splits if is_test_split(s)]
    if leaking and not cfg.allow_test_split:
        raise UserError(
            f"diagnose: refusing to diagnose test split(s) {leaking}: capabilities mined from test tasks leak into "
            "training; use train splits, or set allow_test_split / --allow-test-split on purpose"
        )
    kept: list[Trajectory] = []
    excluded_split: Counter[str] = Counter()
    infra = unscored = 0
    for t in trajectories:
        if t.split not in cfg.splits:
            excluded_split[t.split] += 1
        elif t.is_infra_failure:
            infra += 1
        elif t.success is None:
            unscored += 1
        else:
            kept.append(t)
    if not kept:
        seen = sorted({t.split for t in trajectories})
        raise UserError(
            f"diagnose: no scored trajectories in split(s) {cfg.splits} (rollouts hold splits {seen or 'none'}; "
            f"{infra} infrastructure failures, {unscored} unscored)"
        )
    kept.sort(key=lambda t: t.id)
    counts = {
        "diagnosed": len(kept),
        "succeeded": sum(bool(t.success) for t in kept),
        "failed": sum(not t.success for t in kept),
        "by_split": dict(Counter(t.split for t in kept)),
        "excluded": {"infra_error": infra, "unscored": unscored, "other_splits": dict(excluded_split)},
    }
    return kept, counts


@dataclass
class EnvInfo:
    """What the diagnosed environments give the stage: tasks keyed (env, task id), tool write kinds, the ids of
    their test tasks (for the leak guard), and warnings for whatever could not be loaded."""

    tasks: dict[tuple[str, str], Task] = field(default_factory=dict)
    kinds: dict[str, bool] = field(default_factory=dict)
    test_ids: set[tuple[str, str]] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)
    policies: dict[str, str] = field(default_factory=dict)
    tool_envs: set[str] = field(default_factory=set)  # environments that offer the agent tools
    domains: dict[str, Any] = field(default_factory=dict)  # environment name -> its Domain (the probe's targets)


def load_tasks(run: RunDir, wanted: Mapping[str, Sequence[str]]) -> EnvInfo:
    """Tasks of each environment the trajectories name (`wanted`: env name -> splits). Settings (data_dir,
    options, ...) come from the manifest's `env` section when it names the same environment. Problems are warnings:
    an LLM analyst works without gold actions."""
    from trace_rl.envs.registry import load_domain

    recorded = run.manifest().config.get("env") or {}
    info = EnvInfo()
    reference = read_reference_tasks(run)
    for env_name, splits in wanted.items():
        if recorded.get("name") == env_name:
            data = dict(recorded)
        else:
            data = {k: recorded[k] for k in ("data_dir", "task_set") if recorded.get(k) is not None}
            data["name"] = env_name
        try:
            env_cfg = EnvConfig.model_validate(data)
            domain = load_domain(env_cfg.name, env_cfg)
        except (UserError, ValidationError, ImportError) as exc:
            info.warnings.append(f"could not load environment {env_name!r} for gold actions: {exc}")
            continue
        info.domains[env_name] = domain
        info.kinds.update(domain_write_kinds(domain))
        info.policies[env_name] = _policy(domain)
        if _offers_tools(domain):
            info.tool_envs.add(env_name)
        if reference is not None and reference.env == env_name:
            _imported_tasks(info, env_name, reference.tasks, domain)
            continue
        for split in splits:
            try:
                info.tasks.update({(env_name, t.id): t for t in domain.tasks(split)})
            except Exception as exc:
                info.warnings.append(f"could not load {env_name} tasks of split {split!r}: {exc}")
        try:
            for split in domain.splits():
                if is_test_split(split):
                    info.test_ids |= {(env_name, t.id) for t in domain.tasks(split)}
        except Exception as exc:
            info.warnings.append(f"could not list {env_name} test tasks for the leak guard: {exc}")
    if reference is not None and reference.env not in wanted:
        info.warnings.append(f"{run.reference_tasks} is for {reference.env}, not for {', '.join(wanted)}: not used")
    return info


def _offers_tools(domain: Any) -> bool:
    try:
        return bool(domain.make_env().tool_schemas())
    except Exception:
        return False


def _policy(domain: Any) -> str:
    try:
        return str(domain.policy())
    except Exception:
        return ""


def _imported_tasks(info: EnvInfo, env_name: str, tasks: Sequence[Task], domain: Any) -> None:
    """An imported run's reference: the tasks it was scored against (rollout/reference_tasks.json), never the
    environment's default task set. Its episodes are the user's own logs, so the leak guard does not drop them;
    a warning counts those of the environment's test tasks (do not evaluate adapters trained from this diagnosis on
    them)."""
    info.tasks.update({(env_name, t.id): t for t in tasks})
    try:
        test = {t.id for s in domain.splits() if is_test_split(s) for t in domain.tasks(s)}
    except Exception:
        test = set()
    ids = {str(t.metadata.get("tau2_task_id", t.id)) for t in tasks} & test
    if ids:
        info.warnings.append(
            f"imported run: {len(ids)} of its tasks are {env_name} test tasks; capabilities mined here must not be "
            "evaluated on them"
        )


def _drop_test_tasks(
    kept: list[Trajectory],
    test_ids: set[tuple[str, str]],
    cfg: DiagnoseConfig,
    counts: dict[str, Any],
    warnings: list[str],
) -> list[Trajectory]:
    """The leak guard's second check: a split that mixes train and test tasks (τ²'s `base`) keeps only train tasks."""
    leaked = [t for t in kept if (t.env, t.task_id) in test_ids]
    if not leaked or cfg.allow_test_split:
        return kept
    counts["excluded"]["test_tasks"] = len(leaked)
    warnings.append(
        f"left out {len(leaked)} trajectories of test tasks found in split(s) {cfg.splits} (test-set leakage)"
    )
    kept = [t for t in kept if (t.env, t.task_id) not in test_ids]
    if not kept:
        raise UserError(f"diagnose: every trajectory in split(s) {cfg.splits} is of a test task (test-set leakage)")
    counts.update(
        diagnosed=len(kept),
        succeeded=sum(bool(t.success) for t in kept),
        failed=sum(not t.success for t in kept),
        by_split=dict(Counter(t.split for t in kept)),
    )
    return kept


def _items(
    run: RunDir,
    cfg: DiagnoseConfig,
    kept: list[Trajectory],
    counts: dict[str, Any],
    warnings: list[str],
    tasks: Mapping[str, Task] | Sequence[Task] | None,
    write_kinds: Mapping[str, bool] | None,
) -> tuple[list[DiagnosisItem], WriteOracle, dict[str, Any]]:
    """Pair each kept trajectory with its task (gold actions), after the leak guard's task-id check; also the
    domains loaded (environment name -> Domain)."""
    if tasks is None:
        wanted: dict[str, set[str]] = {}
        for t in kept:
            wanted.setdefault(t.env, set()).add(t.split)
        env = load_tasks(run, {e: sorted(s) for e, s in wanted.items()})
        warnings.extend(env.warnings)
    else:
        given = tasks.values() if isinstance(tasks, Mapping) else tasks
        env = EnvInfo(tasks={("", t.id): t for t in given})
    kept = _drop_test_tasks(kept, env.test_ids, cfg, counts, warnings)
    items = [
        DiagnosisItem(
            t,
            env.tasks.get((t.env, t.task_id)) or env.tasks.get(("", t.task_id)),
            policy=env.policies.get(t.env, ""),
            offers_tools=t.env in env.tool_envs,
        )
        for t in kept
    ]
    counts["with_reference"] = sum(
        1 for i in items if i.task and i.task.evaluation_criteria and i.task.evaluation_criteria.actions is not None
    )
    return items, write_oracle(write_kinds if write_kinds is not None else env.kinds), env.domains


# -- the stage ------------------------------------------------------------------------------------------------------
def _dedupe(lines: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(lines))


def _per_trajectory(items: list[DiagnosisItem], runs: list[Any], analyst: Analyst) -> list[dict[str, Any]]:
    """Each trajectory's capabilities LACKING in most runs, and the analyst's reasons when it gives them."""
    out = []
    explain = getattr(analyst, "report", None)
    for item in items:
        votes: Counter[str] = Counter()
        for labels in runs:
            votes.update(c for c, label in labels.get(item.id, {}).items() if label == Label.LACKING)
        report = explain(item) if callable(explain) else None
        out.append(
            {
                "id": item.id,
                "task_id": item.task_id,
                "success": item.success,
                "lacking": sorted(c for c, n in votes.items() if 2 * n > len(runs)),
                "reasons": report.notes() if report is not None else list(item.notes),
                "user_fault": getattr(report, "user_fault", None),
            }
        )
    return out


def _user_fault_note(per_trajectory: list[dict[str, Any]]) -> list[str]:
    faults = [t["id"] for t in per_trajectory if t.get("user_fault") and not t["success"]]
    if not faults:
        return []
    return [
        f"{len(faults)} failed trajectories are attributed to the simulated user, not the agent (see trajectories[]."
        "user_fault): their missing changes count against no capability"
    ]


def _capabilities_file(
    cfg: DiagnoseConfig,
    items: list[DiagnosisItem],
    discovery: DiscoveryRecord,
    runs: list[LabelRunRecord],
    counts: dict[str, Any],
    warnings: list[str],
    analyst: Analyst,
) -> CapabilitiesFile:
    """Aggregate the runs (TRACE §3.3) and build the validated capabilities.json record."""
    candidates = discovery.candidates
    outcomes = {i.id: i.success for i in items}
    stats = aggregate(
        [c.name for c in candidates],
        [r.labels for r in runs],
        outcomes,
        rho=cfg.rho,
        delta=cfg.delta,
        k=cfg.min_passes,
        max_examples=cfg.max_examples,
    )
    per_trajectory = _per_trajectory(items, [r.labels for r in runs], analyst)
    specs = {c.name: c for c in candidates}
    task_of = {i.id: i.task_id for i in items}
    capabilities = []
    for s in stats:
        body = s.as_stats(cfg.runs, cfg.min_passes)
        body["example_failed_task_ids"] = list(dict.fromkeys(task_of[t] for t in s.example_failed_ids))
        body["discovery_example_task_ids"] = specs[s.name].example_task_ids
        capabilities.append(
            Capability(
                name=s.name,
                definition=specs[s.name].definition,
                example_task_ids=body["example_failed_task_ids"],
                stats=body,
                status="pending" if s.selected else "rejected",
            )
        )
    notes = [
        *warnings,
        *_user_fault_note(per_trajectory),
        *discovery.warnings,
        *(w for r in runs for w in r.warnings),
        *(w for s in stats for w in s.warnings),
    ]
    data = CapabilitiesFile(
        selected=[c for c in capabilities if c.status == "pending"],
        candidates=capabilities,
        params=SelectionParams(rho=cfg.rho, delta=cfg.delta, n_runs=cfg.runs, k=cfg.min_passes),
        splits=sorted(counts["by_split"]),
        n_trajectories=counts,
        analyst=analyst.name,
        warnings=_dedupe(notes),
        trajectories=per_trajectory,
        created_at=time.time(),
    )
    return CapabilitiesFile.model_validate(data.model_dump(mode="json"))


async def diagnose_async(
    run: RunDir,
    cfg: DiagnoseConfig,
    clients: Mapping[str, ModelClient] | ModelClient | None = None,
    *,
    tasks: Mapping[str, Task] | Sequence[Task] | None = None,
    write_kinds: Mapping[str, bool] | None = None,
    domains: Mapping[str, Any] | None = None,
    fresh: bool = False,
    command: str | None = None,
    progress: Progress | None = None,
) -> DiagnoseResult:
    """Run the stage. `tasks` / `write_kinds` / `domains` (the probe's targets) override loading the environments the
    trajectories name; `fresh` redoes discovery and every labeling run; `command` (the command line that ran it) is
    recorded in the manifest."""
    trajectories, bad = load_trajectories(run)
    kept, counts = select_trajectories(trajectories, cfg)
    counts["excluded"]["invalid_record"] = bad
    warnings: list[str] = []
    items, is_write, loaded = _items(run, cfg, kept, counts, warnings, tasks, write_kinds)
    targets = dict(domains) if domains is not None else loaded
    analyst = make_analyst(cfg, clients, items, is_write, counts["with_reference"], warnings, targets, progress)
    probing = [cfg.probe.model_dump(mode="json")] if analyst.name == PROBE else []  # what the probe samples, and how
    base_fp = fingerprint(  # the analyst that runs: the structural one falls back to the behavioral one without gold
        analyst.name, sorted((i.id, i.success) for i in items), cfg.max_candidates, cfg.structural_evidence, *probing
    )
    if command is not None:
        run.ensure(command=command)
    with run.stage(STAGE, cfg.model_dump(mode="json"), command=command) as record:
        discovery, disc_reused = await discover(analyst, items, cfg, run.discovery, base_fp, fresh)
        label_fp = fingerprint(base_fp, [c.model_dump() for c in discovery.candidates])
        runs, reused_runs = await label_all(analyst, items, discovery.candidates, cfg, run, label_fp, fresh)
        data = _capabilities_file(cfg, items, discovery, runs, counts, warnings, analyst)
        path = write_capabilities(run, data)
        reused = {"discovery": disc_reused, "label_runs": reused_runs}
        record.summary = {
            "selected": [c.name for c in data.selected],
            "n_trajectories": counts["diagnosed"],
            "splits": data.splits,
            "analyst": analyst.name,
            "reused": reused,
        }
    return DiagnoseResult(path=path, file=data, reused=reused)


def run_diagnose(
    run: RunDir,
    cfg: DiagnoseConfig,
    clients: Mapping[str, ModelClient] | ModelClient | None = None,
    **kwargs: Any,
) -> DiagnoseResult:
    """Synchronous entry point (see `diagnose_async`)."""
    return asyncio.run(diagnose_async(run, cfg, clients, **kwargs))


async def _diagnose_with_analyst(ctx: StageContext, cfg: DiagnoseConfig, fresh: bool) -> DiagnoseResult:
    """The stage with the analyst's client (or the probed agent's) built and closed; SIGTERM cancels it, so that the
    client closes and a model server the command started stops with it."""
    task = asyncio.current_task()
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)  # type: ignore[union-attr]
    client = None
    if cfg.analyst == PROBE:  # the probe samples the agent: the rollout's policy unless `probe.policy` names another
        policy = cfg.probe.policy or ctx.config.rollout.policy
        cfg = cfg.model_copy(update={"probe": cfg.probe.model_copy(update={"policy": policy})})  # recorded as run
        name, model_cfg = model_from_spec(policy, ctx.config)
        client = build_client(model_cfg, name=name)
    elif cfg.needs_analyst_model:  # the structural and behavioral analyzers need no model
        name, model_cfg = model_from_spec(cfg.analyst, ctx.config)
        client = build_client(model_cfg, name=name)
    try:
        progress = make_progress(ctx.progress)
        return await diagnose_async(ctx.run, cfg, client, fresh=fresh, command=ctx.command, progress=progress)
    finally:
        if client is not None:
            await client.aclose()


@dataclass(frozen=True)
class DiagnoseStage:
    """The diagnose stage over the run's rollouts; `fresh` redoes discovery and every labeling run."""

    fresh: bool = False
    name: ClassVar[str] = STAGE

    def section(self, config: TraceConfig) -> DiagnoseConfig:
        return config.diagnose

    def run(self, ctx: StageContext, section: DiagnoseConfig) -> DiagnoseResult:
        ctx.run.require()
        try:
            result = asyncio.run(_diagnose_with_analyst(ctx, section, self.fresh))
        except asyncio.CancelledError:  # SIGTERM: stopped as Ctrl-C would stop it
            raise KeyboardInterrupt from None
        ctx.echo(f"wrote {result.path} ({len(result.selected)} selected: {', '.join(result.selected) or 'none'})")
        return result


DIAGNOSE = DiagnoseStage()


__all__ = [
    "DIAGNOSE",
    "DiagnoseResult",
    "DiagnoseStage",
    "EnvInfo",
    "check_matrix",
    "diagnose_async",
    "load_tasks",
    "load_trajectories",
    "run_diagnose",
    "select_trajectories",
]
