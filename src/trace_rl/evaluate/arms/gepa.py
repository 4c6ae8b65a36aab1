"""The `gepa` arm: the base model with GEPA-optimised capability descriptions appended to its system prompt. GEPA
starts from the capabilities TRACE identified and spends at most TRACE's rollout budget in metric calls on the
target's train split (train and validation sets disjoint, seeded); the best candidate is evaluated on the test split.
With the curve on, the best candidate found within each budget fraction gives a score-vs-budget point."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from trace_rl.artifacts.capabilities import read_capabilities
from trace_rl.artifacts.evaluation import ArmEntry, CurveEntry
from trace_rl.artifacts.layout import GEPA_EPISODES, GEPA_LOG, GEPA_RESULT, EvaluateLayout
from trace_rl.artifacts.router import BASE, read_router
from trace_rl.artifacts.store import atomic_write_json, read_json
from trace_rl.engine.plan import Job
from trace_rl.evaluate.arms.common import claim, need_budget
from trace_rl.evaluate.episodes import ArmSkipped, EvalContext
from trace_rl.evaluate.gepa_adapter import TraceGEPAAdapter, candidate_key, reflection_callable, render_capabilities
from trace_rl.models.specs import add_model_spec
from trace_rl.types import Task, Trajectory

NAME = "gepa"


def seed_candidate(ctx: EvalContext) -> dict[str, str]:
    """The capabilities TRACE identified, name -> description: diagnose/capabilities.json, else the router's."""
    out: dict[str, str] = {}
    if ctx.run.capabilities.exists():
        out = {c.name: c.definition for c in read_capabilities(ctx.run).selected if c.definition}
    if not out and ctx.run.router.exists():
        out = {o.name: o.description for o in read_router(ctx.run).options if o.name != BASE and o.description}
    return out


def gepa_sets(ctx: EvalContext) -> tuple[list[Task], list[Task]]:
    """(trainset, valset) from the target's train split, disjoint, in a seeded order."""
    g = ctx.ecfg.gepa
    tasks = list(ctx.train_tasks())
    random.Random(g.seed).shuffle(tasks)
    val = tasks[: g.val_tasks]
    rest = tasks[g.val_tasks :]
    train = rest[: g.train_tasks] if g.train_tasks else rest
    if not val or not train:
        raise ArmSkipped(f"{ctx.env_name}/train has {len(tasks)} tasks: too few for GEPA's train and val sets")
    return train, val


def reflection_lm(ctx: EvalContext) -> Any:
    """GEPA's reflection model: the injected one (tests), else `gepa.reflection_model`, else the policy."""
    if ctx.reflection_lm is not None:
        return ctx.reflection_lm
    g = ctx.ecfg.gepa
    client = ctx.client
    if g.reflection_model:
        client = ctx.clients[add_model_spec(ctx.cfg, g.reflection_model)]  # built on first use
    return reflection_callable(client, max_tokens=g.reflection_max_tokens, temperature=g.reflection_temperature)


class FileLog:
    """GEPA's logger protocol, appending to a file (GEPA logs every iteration; the console stays readable)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def log(self, message: str, *args: Any, **kwargs: Any) -> None:
        with self.path.open("a") as fh:
            fh.write(f"{message}\n")


def run_gepa(ctx: EvalContext, seed: dict[str, str], budget: int) -> dict[str, Any]:
    """Optimise with GEPA (or load the finished result); `evaluate/gepa/result.json`."""
    import gepa

    g = ctx.ecfg.gepa
    result_path = ctx.path(GEPA_RESULT)
    identity = ctx.identity(arm=NAME, seed_candidate=seed, budget=budget, gepa=g.model_dump(mode="json"))
    if result_path.exists():
        saved = read_json(result_path)
        if saved.get("identity") == identity:
            return saved
    train, val = gepa_sets(ctx)
    tasks = {t.id: t for t in [*train, *val]}
    store = ctx.store(GEPA_EPISODES)

    def run_batch(batch: list[Task], suffix: str, key: str) -> list[Trajectory]:
        jobs = [Job(task=t, trial=0, seed=g.episode_seed, id=f"{key}/{t.id}") for t in batch]
        factory = ctx.factory("train", system_suffix=suffix, metadata={"arm": NAME, "candidate": key})
        ctx.run_jobs(jobs, factory, store, f"gepa {key[:8]}")
        latest = store.latest()
        return [Trajectory.model_validate(latest[j.id]) for j in jobs]

    adapter = TraceGEPAAdapter(tasks, run_batch, budget=budget, score=g.score)
    ctx.echo(
        f"GEPA: {len(seed)} capability descriptions, budget {budget} rollouts, "
        f"{len(train)} train / {len(val)} val tasks"
    )
    result = gepa.optimize(
        seed_candidate=seed,
        trainset=[t.id for t in train],
        valset=[t.id for t in val],
        adapter=adapter,
        reflection_lm=reflection_lm(ctx),
        candidate_selection_strategy=g.candidate_selection,
        reflection_minibatch_size=g.minibatch_size,
        max_metric_calls=budget,
        stop_callbacks=[adapter.stopper],
        seed=g.seed,
        display_progress_bar=False,
        raise_on_exception=False,
        logger=FileLog(ctx.path(GEPA_LOG)),
    )
    saved = {
        "identity": identity,
        "best_idx": result.best_idx,
        "best_candidate": result.candidates[result.best_idx],
        "candidates": result.candidates,
        "val_aggregate_scores": result.val_aggregate_scores,
        "discovery_eval_counts": result.discovery_eval_counts,
        "parents": result.parents,
        "gepa_metric_calls": result.total_metric_calls,
        "rollouts_charged": adapter.used,
        "refused_over_budget": adapter.refused,
        "budget": budget,
        "train_tasks": [t.id for t in train],
        "val_tasks": [t.id for t in val],
    }
    atomic_write_json(result_path, saved)
    return saved


def best_within(saved: dict[str, Any], limit: int) -> int:
    """Index of the best candidate (by validation score) among those discovered within `limit` metric calls."""
    found = [i for i, n in enumerate(saved["discovery_eval_counts"]) if n <= limit] or [0]
    return max(found, key=lambda i: (saved["val_aggregate_scores"][i], -i))


def run(ctx: EvalContext) -> ArmEntry:
    seed = seed_candidate(ctx)
    if not seed:
        where = ctx.run.capabilities.relative_to(ctx.run.root)
        raise ArmSkipped(f"no capability descriptions to optimise ({where} has none selected)")
    budget = ctx.ecfg.gepa.budget or need_budget(ctx)
    saved = run_gepa(ctx, seed, budget)
    best = saved["best_candidate"]
    relpath = EvaluateLayout.arm(NAME)
    claim(ctx, relpath, ctx.identity(arm=NAME, candidate=candidate_key(best)))
    ctx.evaluate(
        NAME, relpath, system_suffix=render_capabilities(best), metadata={"arm": NAME, "candidate": candidate_key(best)}
    )
    out = ArmEntry(
        name=NAME,
        relpath=relpath,
        budget=int(saved["rollouts_charged"]),
        description="The base model with GEPA-optimised capability descriptions appended to its system prompt.",
        details={
            "gepa": {
                k: saved[k]
                for k in (
                    "best_idx",
                    "val_aggregate_scores",
                    "discovery_eval_counts",
                    "gepa_metric_calls",
                    "rollouts_charged",
                    "refused_over_budget",
                    "budget",
                )
            },
            "best_candidate": best,
            "seed_candidate": seed,
            "candidates": len(saved["candidates"]),
        },
    )
    if ctx.ecfg.curve.enabled:
        out.curve.extend(candidate_curve(ctx, saved, budget, relpath))
    return out


def candidate_curve(ctx: EvalContext, saved: dict[str, Any], budget: int, relpath: str) -> list[CurveEntry]:
    """One point per budget fraction: the best candidate GEPA had found within that many metric calls."""
    best = saved["best_candidate"]
    points = []
    for f in ctx.ecfg.curve.fractions:
        limit = round(f * budget)
        idx = best_within(saved, limit)
        cand = saved["candidates"][idx]
        if candidate_key(cand) == candidate_key(best) and ctx.ecfg.curve.trials <= ctx.ecfg.trials:
            point = relpath  # the final candidate: its first trials are already evaluated, same seeds
        else:
            point = EvaluateLayout.curve(NAME, candidate_key(cand))
            claim(ctx, point, ctx.identity(arm=NAME, candidate=candidate_key(cand)))
            ctx.evaluate(
                f"gepa@{limit}",
                point,
                trials=ctx.ecfg.curve.trials,
                system_suffix=render_capabilities(cand),
                metadata={"arm": NAME, "candidate": candidate_key(cand)},
            )
        points.append(
            CurveEntry(arm=NAME, budget=limit, relpath=point, trials=ctx.ecfg.curve.trials, label=f"candidate {idx}")
        )
    return points
