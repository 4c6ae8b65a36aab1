"""`synthesize_one`: one capability's environment, `envs/<capability>/` inside the run directory, to its final status.

1. evidence: failed train-split trajectories attributed to it (`evidence.py`); its type (`design.py`);
2. a first spec from the target (generator 1, `from_target.py`) or from an author model's code, run only in the sandbox
   (generator 2, `llm_author.py`; an author rewrites until its code validates, up to `author_attempts`); author code
   then generates every split seed into tasks.jsonl (a leaking or invalid seed gets another draw);
3. per attempt, up to `max_attempts`: validation (`validate.py`) and the leak check (`leak.py`), then calibration
   (`calibrate.py`) with the base policy, its rollouts appended to calibration/trajectories.jsonl;
4. the moves on failure: a failed validation or leak check regenerates (the target generator draws other seeds, the
   author rewrites with the feedback); a calibration out of range moves the difficulty knob (0-4) one step (too easy:
   harder, too hard: easier) and regenerates with the figures when the knob cannot move;
5. the final status: `ready` (calibration accepted, or validated with `calibrate: false`), else `needs_attention`
   with the reason and the figures (no training on it).
Files: spec.json, generator.py and tasks.jsonl (author code and its tasks for every split seed), tasks_sample.jsonl
(target variants), system_prompt.md (with its hint block), leak_index.json (fingerprints only), validation.json,
leak.json, calibration.json, calibration/trajectories.jsonl, author/attempt_<n>/, status.json (written last, so a
folder with one is final).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trace_rl.artifacts.environments import (
    CalibrationAttempt,
    CalibrationFile,
    EnvSpec,
    EnvStatus,
    GeneratorSpec,
    write_calibration,
    write_env_spec,
    write_env_status,
    write_task_pool,
)
from trace_rl.artifacts.layout import GENERATOR_FILE, SPEC_FILE, EnvLayout
from trace_rl.artifacts.store import JsonlStore, RunDir, atomic_write_json, atomic_write_text
from trace_rl.config import EnvConfig
from trace_rl.config.synthesize import SynthesizeConfig
from trace_rl.engine.episode import EpisodeLimits
from trace_rl.envs.base import Domain
from trace_rl.envs.synthetic.environment import CapabilityEnvironment
from trace_rl.envs.synthetic.leak_guard import task_leaks
from trace_rl.envs.synthetic.sandbox import run_generator
from trace_rl.errors import UserError
from trace_rl.models.base import ModelClient
from trace_rl.synthesize import leak as leakmod
from trace_rl.synthesize.calibrate import CalibrationResult, calibrate, log_calibration
from trace_rl.synthesize.design import capability_type
from trace_rl.synthesize.evidence import Evidence, collect_evidence, load_trajectories
from trace_rl.synthesize.from_target import base_spec, target_spec
from trace_rl.synthesize.llm_author import AuthorAttempt, author_code, tasks_from
from trace_rl.synthesize.validate import validate
from trace_rl.tracking import NoTracker, Tracker
from trace_rl.types import Capability, Task


class Context:
    """What every capability of one run shares."""

    def __init__(
        self, run: RunDir, syn: SynthesizeConfig, target_cfg: EnvConfig, target: Domain, clients: dict[str, ModelClient]
    ) -> None:
        self.run = run
        self.syn = syn
        self.target_cfg = target_cfg
        self.target = target
        self.clients = clients
        self.index, self.entities = leakmod.build_index(target)
        self.trajectories = load_trajectories(run)
        self.limits = EpisodeLimits(max_steps=syn.max_steps or target_cfg.max_steps, max_errors=target_cfg.max_errors)
        self.tracker: Tracker = NoTracker()  # run.report_to: calibration attempts are logged there too

    @property
    def policy(self) -> ModelClient | None:
        return self.clients.get(self.syn.policy)

    @property
    def author(self) -> ModelClient | None:
        return self.clients.get(self.syn.author) if self.syn.author else None


class _Builder:
    """Holds one capability's current spec (and author code) across attempts."""

    def __init__(self, ctx: Context, cap: Capability, folder: Path, evidence: Evidence, kind: str) -> None:
        self.ctx, self.cap, self.folder, self.evidence, self.kind = ctx, cap, folder, evidence, kind
        self.files = EnvLayout(folder)
        self.spec: EnvSpec | None = None
        self.code: str | None = None
        self.mode: str = ""
        self.author_log: list[AuthorAttempt] = []
        self.notes: list[str] = []

    # the environment of the current spec
    def env(self) -> CapabilityEnvironment:
        assert self.spec is not None
        return CapabilityEnvironment(self.spec, self.folder, status="needs_attention", target=self.ctx.target)

    def save(self) -> None:
        assert self.spec is not None
        write_env_spec(self.files, self.spec)
        self.ctx.index.save(self.folder)

    def validation_seeds(self) -> list[int]:
        assert self.spec is not None
        return list(self.spec.splits.seeds("train"))[: self.ctx.syn.validation_seeds]

    # generator 1
    def from_target(self) -> str:
        spec, why = target_spec(self.evidence, self.kind, self.ctx.target_cfg, self.ctx.target, self.ctx.syn)
        if spec is None:
            return why
        self.spec, self.mode = spec, "target"
        self.save()
        return ""

    # generator 2
    def code_spec(self, difficulty: int) -> EnvSpec:
        spec = base_spec(
            self.evidence,
            self.kind,
            self.ctx.target_cfg,
            self.ctx.target,
            self.ctx.syn,
            GeneratorSpec(kind="code", difficulty=difficulty, params={"sandbox": self.ctx.syn.sandbox.model_dump()}),
        )
        spec.provenance = {"generator": "llm", "author": getattr(self.ctx.author, "name", None)}
        return spec

    def sandbox_tasks(self, code: str, spec: EnvSpec, seeds: list[int]) -> tuple[dict[int, Task], dict[str, Any]]:
        result = run_generator(
            code,
            seeds,
            target=self.ctx.target_cfg.model_dump(mode="json"),
            difficulty=spec.generator.difficulty,
            limits=self.ctx.syn.sandbox,
            capability=self.cap.name,
            exclude=self.ctx.entities.as_exclude(),
        )
        tasks, problems = tasks_from(result.tasks, spec, self.ctx.target_cfg.name)
        info = result.as_dict()
        info["schema_problems"] = {str(k): v for k, v in problems.items()}
        info["seed_errors"] = {str(k): v for k, v in result.errors.items()}
        return tasks, info

    def write_pool(self, tasks: dict[int, Task]) -> None:
        write_task_pool(self.files, [t for _, t in sorted(tasks.items())])

    def check_code(self, difficulty: int) -> Callable[[str], AuthorAttempt]:
        def check(code: str) -> AuthorAttempt:
            spec = self.code_spec(difficulty)
            seeds = list(spec.splits.seeds("train"))[: self.ctx.syn.validation_seeds]
            tasks, info = self.sandbox_tasks(code, spec, seeds)
            attempt = AuthorAttempt(0, code, False, sandbox=info)
            problems: list[str] = []
            if info["killed"] or info["fatal"]:
                problems.append(f"the sandbox stopped the code: {info['killed'] or info['fatal']}")
            if info["blocked"]:
                problems.append(f"the sandbox refused: {'; '.join(sorted(set(info['blocked']))[:3])}")
            for seed, err in list(info["seed_errors"].items())[:4]:
                problems.append(f"seed {seed}: {err}")
            for seed, err in list(info["schema_problems"].items())[:4]:
                problems.append(f"seed {seed}: {err}")
            leaks = [h for t in tasks.values() for h in task_leaks(self.ctx.index, t)]
            leaks += self.ctx.index.check_text(code, "generator code")
            if leaks:
                problems.append(
                    f"{len(leaks)} references to held-out test data ({', '.join(sorted({h.kind for h in leaks}))}); "
                    "use other records"
                )
            attempt.leak = {"ok": not leaks, "hits": [h.as_dict() for h in leaks[:10]]}
            if tasks and not problems:
                self.spec, self.code = spec, code
                atomic_write_text(self.files.generator, code)
                self.write_pool(tasks)
                self.save()
                report = validate(self.env(), seeds, min_sensitivity=self.ctx.syn.min_sensitivity)
                attempt.validation = report.as_dict()
                if not report.ok:
                    problems.append(report.feedback())
            elif not tasks and not problems:
                problems.append("no task was generated")
            attempt.ok = not problems
            attempt.feedback = "\n".join(problems)
            return attempt

        return check

    async def from_author(self, difficulty: int, feedback: str | None = None) -> str:
        client = self.ctx.author
        if client is None:
            return f"no author model '{self.ctx.syn.author}' configured"
        env = self.ctx.target.make_env()
        db = env.tools.db.model_dump(mode="json") if env.tools.db is not None else {}  # type: ignore[attr-defined]
        from trace_rl.synthesize.design import CHECKS
        from trace_rl.synthesize.evidence import summarize_trajectory

        prompt_args = {
            "name": self.cap.name,
            "definition": self.cap.definition,
            "kind": self.kind,
            "checks": [c for c, _ in CHECKS[self.kind]],
            "domain": self.ctx.target_cfg.name,
            "schemas": env.tool_schemas(),
            "policy": env.policy(),
            "evidence": [summarize_trajectory(t) for t in self.evidence.trajectories[:4]],
            "example_db_keys": sorted(db),
        }
        code, log = await author_code(
            client,
            prompt_args=prompt_args,
            check=self.check_code(difficulty),
            folder=self.folder,
            attempts=self.ctx.syn.author_attempts,
            max_tokens=self.ctx.syn.author_max_tokens,
            temperature=self.ctx.syn.author_temperature,
            first_feedback=feedback,
            previous=self.code,
            start=len(self.author_log) + 1,
        )
        self.author_log += log
        if code is None:
            self.spec = None  # the last rejected module is kept under author/, never used
            return f"the author's code failed validation {len(log)} times: {log[-1].feedback[:300] if log else ''}"
        self.mode = "llm"
        return ""

    def usable(self, task: Task, rewarder: Any) -> bool:
        """No test-split data, and the gold actions replay without a tool error."""
        if task_leaks(self.ctx.index, task):
            return False
        try:
            return not rewarder.gold(task).errors
        except Exception:
            return False

    async def materialize(self) -> str:
        """Author code: generate every split seed into tasks.jsonl (leaking or invalid seeds get another draw)."""
        assert self.spec is not None and self.code is not None
        seeds = [*self.spec.splits.seeds("train"), *self.spec.splits.seeds("test")]
        tasks, _ = self.sandbox_tasks(self.code, self.spec, seeds)
        rewarder = self.env().rewarder
        bad = [s for s in seeds if s not in tasks or not self.usable(tasks[s], rewarder)]
        if bad:
            alt = {s + 10_000_019: s for s in bad}
            more, _ = self.sandbox_tasks(self.code, self.spec, list(alt))
            for alt_seed, task in more.items():
                if self.usable(task, rewarder):
                    tasks[alt[alt_seed]] = to_task_like(task, self.spec, alt[alt_seed])
        pool = {s: t for s, t in tasks.items() if self.usable(t, rewarder)}
        self.write_pool(pool)
        missing = [s for s in seeds if s not in pool]
        return f"{len(missing)} of {len(seeds)} seeds produced no task" if missing else ""


def to_task_like(task: Task, spec: EnvSpec, seed: int) -> Task:
    """A task drawn for another seed, filed under `seed`."""
    meta = {**task.metadata, "synthetic_seed": seed, "drawn_for_seed": task.metadata.get("synthetic_seed")}
    return task.model_copy(update={"id": f"{spec.name}-{seed}", "metadata": meta})


async def synthesize_one(ctx: Context, cap: Capability, folder: Path, echo: Callable[[str], None]) -> EnvStatus:
    evidence = collect_evidence(cap, ctx.trajectories, ctx.target)
    kind, why_kind = capability_type(cap, [str(t.metadata.get("capability_type", "")) for t in evidence.tasks])
    b = _Builder(ctx, cap, folder, evidence, kind)
    b.notes.append(f"capability type {kind} ({why_kind}); {len(evidence.tasks)} evidence tasks")
    syn = ctx.syn
    files = EnvLayout(folder)
    calibrations: list[CalibrationAttempt] = []
    validations: list[dict[str, Any]] = []

    def finish(status: str, reason: str, figures: dict[str, Any] | None = None) -> EnvStatus:
        write_calibration(
            files,
            CalibrationFile(
                accepted=status == "ready" and bool(calibrations) and calibrations[-1].accepted,
                acceptance=syn.acceptance.model_dump(mode="json"),
                policy=syn.policy,
                groups=syn.groups,
                samples=syn.samples,
                temperature=syn.temperature,
                attempts=calibrations,
                final=calibrations[-1] if calibrations else None,
            ),
        )
        atomic_write_json(files.validation, {"attempts": validations, "notes": b.notes})
        if b.author_log:
            atomic_write_json(files.author_log, [a.as_dict() for a in b.author_log])
        st = EnvStatus(
            status=status, reason=reason, attempts=len(calibrations), figures=figures or {}, updated_at=time.time()
        )
        write_env_status(files, st)
        return st

    # 1. a first spec
    problem = ""
    if syn.generator in ("target", "auto"):
        problem = b.from_target()
    if b.spec is None and syn.generator in ("llm", "auto"):
        problem = await b.from_author(syn.initial_difficulty, None) or ""
        if not problem:
            problem = await b.materialize()
    if b.spec is None:
        return finish("needs_attention", problem or "no generator could build this environment")
    echo(f"{cap.name}: {b.mode} generator ({b.spec.generator.kind}), type {kind}")

    last_fig: dict[str, Any] = {}
    stopped = ""  # why calibration ended before its attempts ran out
    for attempt in range(1, syn.max_attempts + 1):
        env = b.env()
        report = validate(env, b.validation_seeds(), min_sensitivity=syn.min_sensitivity)
        leak = _leak_check(ctx, b, env)
        validations.append(
            {"attempt": attempt, "difficulty": b.spec.generator.difficulty, **report.as_dict(), "leak_ok": leak.ok}
        )
        atomic_write_json(files.leak, leak.as_dict())
        if not report.ok or not leak.ok:
            why = report.feedback() if not report.ok else f"leak check: {len(leak.hits)} hits"
            b.notes.append(f"attempt {attempt}: validation failed: {why[:500]}")
            if attempt == syn.max_attempts or await _regenerate(b, f"validation failed:\n{why}"):
                return finish("needs_attention", f"validation failed: {why[:500]}", last_fig)
            continue
        if not syn.calibrate:
            _write_sample(b, env)
            return finish("ready", "calibration skipped (stages.synthesize.calibrate: false)")
        assert ctx.policy is not None
        result = await calibrate(
            env,
            ctx.policy,
            groups=syn.groups,
            samples=syn.samples,
            acceptance=syn.acceptance,
            temperature=syn.temperature,
            max_tokens=syn.max_tokens,
            concurrency=syn.concurrency,
            limits=ctx.limits,
            model_name=syn.policy,
        )
        _store_rollouts(folder, attempt, result)
        calibrations.append(
            CalibrationAttempt(
                attempt=attempt,
                difficulty=b.spec.generator.difficulty,
                generator=b.spec.generator.kind,
                **result.as_dict(),
            )
        )
        last_fig = result.figures
        log_calibration(ctx.tracker, cap.name, attempt, result)
        echo(
            f"{cap.name}: attempt {attempt}: mean {result.figures['mean_reward']}, success "
            f"{result.figures['success_rate']}, informative {result.figures['informative_groups']}"
            f" -> {'accepted' if result.accepted else result.direction}"
        )
        if result.accepted:
            _write_sample(b, env)
            return finish("ready", "", result.figures)
        if attempt == syn.max_attempts:
            break
        if syn.stop_without_success and result.figures["success_rate"] == 0:
            stopped = f"no calibration sample succeeded at attempt {attempt}, hinted or not (stop_without_success)"
            break
        moved = _reweight_decisions(b, env, result) or _move_difficulty(b, result.direction)
        if moved and b.mode == "llm":
            problem = await b.materialize()
        elif not moved:
            feedback = (
                f"calibration with the base policy: {json.dumps(result.figures)[:1500]}\n"
                f"The environment is {result.direction}: " + _direction_text(result.direction)
            )
            if await _regenerate(b, feedback):
                break
    if b.spec is not None:
        _write_sample(b, b.env())
    reason = stopped or f"calibration out of range after {len(calibrations)} attempts"
    if b.spec is None:
        reason += "; regeneration failed: " + (b.notes[-1] if b.notes else "")
    return finish("needs_attention", reason, last_fig)


def _direction_text(direction: str | None) -> str:
    return {
        "too_easy": "make tasks harder (more distractors, more conditions, fewer given values).",
        "too_hard": "make tasks easier (fewer distractors and conditions, clearer requests).",
    }.get(direction or "", "make outcomes vary more within a seed: partial solutions should be possible.")


HINT_CEILING = 0.5  # the largest hinted share of a group in the released TRACE code


def split_outcomes(direction: str | None, success: float | None, window: tuple[float, float]) -> bool:
    """A too-hard verdict with the success rate inside its window: the all-zero groups, not the mean, failed."""
    return direction == "too_hard" and success is not None and window[0] <= success <= window[1]


def _reweight_decisions(b: _Builder, env: CapabilityEnvironment, result: CalibrationResult) -> bool:
    """A decision environment first moves its weight toward the decisions the base policy gets right more (too hard)
    or less (too easy) often, as far as the middle of the success window; with no easier decision to move toward, or
    when only the all-zero groups failed (`split_outcomes`), a too-hard one hints up to half of each group; the
    difficulty knob moves when neither can."""
    assert b.spec is not None
    if b.spec.generator.kind != "library_decisions":
        return False
    from trace_rl.envs.synthetic.library_decisions import reweighted

    outcomes = [(str(env.make_task(r.seed).metadata["decision"]["kind"]), r.success) for r in result.rollouts]
    low, high = b.ctx.syn.acceptance.success_range
    split = split_outcomes(result.direction, result.figures.get("success_rate"), (low, high))
    params = None if split else reweighted(b.spec.generator.params, outcomes, result.direction, target=(low + high) / 2)
    if params is None and result.direction == "too_hard" and b.spec.hint.fraction < HINT_CEILING:
        # hint more of each group (the released code hints a quarter to a half): either nothing easier to move
        # toward, or the success is in the window and only the all-zero groups failed (some decisions always missed,
        # others always made), where re-weighting only trades them for all-success groups (measured on the library:
        # 0.41 -> 0.81 -> 0.45)
        why = "success in the window, all-zero groups over the limit" if split else "too_hard, no easier decision"
        hint = b.spec.hint.model_copy(update={"fraction": HINT_CEILING})
        b.spec = b.spec.model_copy(update={"hint": hint})
        b.notes.append(f"hint fraction -> {HINT_CEILING} ({why})")
        b.save()
        return True
    if params is None:
        return False
    b.spec = b.spec.model_copy(update={"generator": b.spec.generator.model_copy(update={"params": params})})
    b.notes.append(f"decisions re-weighted {params['decisions']} ({result.direction})")
    b.save()
    return True


def _move_difficulty(b: _Builder, direction: str | None) -> bool:
    assert b.spec is not None
    d = b.spec.generator.difficulty
    new = d + 1 if direction == "too_easy" else d - 1 if direction == "too_hard" else d
    if new == d or not 0 <= new <= 4:
        return False
    b.spec = b.spec.model_copy(update={"generator": b.spec.generator.model_copy(update={"difficulty": new})})
    b.notes.append(f"difficulty {d} -> {new} ({direction})")
    b.save()
    return True


async def _regenerate(b: _Builder, feedback: str) -> bool:
    """A new environment after a failure; True when none could be made (give up)."""
    assert b.spec is not None
    if b.mode == "target":
        # the target generator is deterministic: draw other seeds instead (library: an offset off its 32-seed
        # stride, staying inside the library's fresh range; τ²: another random stream)
        gen = b.spec.generator
        shift = 1_000_003 if gen.kind == "tau2_variants" else 8_191
        b.spec = b.spec.model_copy(update={"generator": gen.model_copy(update={"seed_base": gen.seed_base + shift})})
        b.notes.append(f"regenerated: seed_base -> {b.spec.generator.seed_base}")
        b.save()
        return False
    problem = await b.from_author(b.spec.generator.difficulty, feedback)
    if problem:
        b.notes.append(problem)
        return True
    problem = await b.materialize()
    if problem:
        b.notes.append(problem)
    return False


def _leak_check(ctx: Context, b: _Builder, env: CapabilityEnvironment) -> leakmod.LeakReport:
    assert b.spec is not None
    texts = {
        SPEC_FILE: b.spec.model_dump_json(),
        "system prompt (hinted)": env.system_prompt(hinted=True),
    }
    if b.code:
        texts[GENERATOR_FILE] = b.code
    for path in b.files.author_prompts():
        texts[str(path.relative_to(b.folder))] = path.read_text()
    tasks: list[Task] = []
    for split in ("train", "test"):
        for seed in list(b.spec.splits.seeds(split))[: ctx.syn.leak_sample]:
            try:
                tasks.append(env.make_task(seed))
            except UserError:
                continue
    return leakmod.check(ctx.index, texts, tasks, task_ids=b.evidence.task_ids)


def _write_sample(b: _Builder, env: CapabilityEnvironment) -> None:
    """Readable extras: the system prompt (with its hint block) and a sample of tasks (author envs keep their pool)."""
    atomic_write_text(b.files.system_prompt, env.system_prompt(hinted=True) + "\n")
    if b.mode == "llm":
        return
    lines = []
    for seed in list(env.spec.splits.seeds("train"))[: b.ctx.syn.leak_sample]:
        try:
            lines.append(env.make_task(seed).model_dump_json())
        except UserError:
            continue
    atomic_write_text(b.files.tasks_sample, "\n".join(lines) + "\n")


def _store_rollouts(folder: Path, attempt: int, result: CalibrationResult) -> None:
    store = JsonlStore(EnvLayout(folder).calibration_trajectories)
    records = []
    for r in result.rollouts:
        r.trajectory.metadata.update({"attempt": attempt, "shaped_reward": r.reward, "success": r.success})
        records.append(r.trajectory.model_copy(update={"id": f"{r.trajectory.id}@{attempt}"}))
    store.append(records)


__all__ = ["Context", "synthesize_one", "to_task_like"]
