"""One function per arm of the comparison. Each runs its agent variant on the same held-out (task, trial) episodes
into its own JSONL (`evaluate/arms/<arm>.jsonl`, resumable), and returns what it consumed to be built (its rollout
budget) and its score-vs-budget points. An arm that cannot run raises `ArmSkipped` with the reason.

| arm              | agent                                                          | training rollouts           |
|------------------|----------------------------------------------------------------|-----------------------------|
| base             | the base model                                                 | 0                           |
| trace            | routed once per task from the first user message → 1 adapter   | Σ capability adapters       |
| grpo_target      | one adapter, GRPO on the target's train split                  | = TRACE (matched steps)     |
| gepa             | base + GEPA-optimised capability descriptions in the prompt    | GEPA metric calls ≤ TRACE   |
| single_best      | the one capability adapter that scores best without the test   | that adapter's              |
| multi_capability | one adapter on a uniform mix of all capability environments    | = TRACE (matched steps)     |
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trace_rl.errors import UserError
from trace_rl.evaluate.budget import AdapterBudget, adapter_budget, run_adapter_budget
from trace_rl.evaluate.episodes import ArmSkipped, EvalContext, RoutedClient
from trace_rl.evaluate.gepa_adapter import TraceGEPAAdapter, candidate_key, reflection_callable, render_capabilities
from trace_rl.evaluate.grpo_target import (
    GRPO_DIR,
    MIX_NAME,
    curve_steps,
    kept_checkpoints,
    matched_config,
    mix_env,
    target_train_env,
    train_baseline,
)
from trace_rl.engine.plan import Job
from trace_rl.routing.spec import BASE, RouterSpec, load_router_spec, make_options, router_path, run_adapters
from trace_rl.artifacts.store import atomic_write_json, read_json
from trace_rl.types import Task, Trajectory

PLANS = "plans.json"


@dataclass
class CurvePoint:
    """One score-vs-budget point: the agent of `arm` after `budget` rollouts, evaluated into `relpath`."""

    arm: str
    budget: int
    relpath: str
    trials: int
    label: str = ""


@dataclass
class ArmOutput:
    name: str
    relpath: str
    budget: int = 0
    adapters: list[str] = field(default_factory=list)
    description: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    curve: list[CurvePoint] = field(default_factory=list)


def arm_path(name: str) -> str:
    return f"arms/{name}.jsonl"


def claim(ctx: EvalContext, relpath: str, identity: dict[str, Any]) -> None:
    """Record who plays into `relpath`; refuse to mix two agents in one file (rerun with the same settings to resume,
    or delete the file to redo the arm)."""
    path = ctx.path(PLANS)
    plans = read_json(path) if path.exists() else {}
    old = plans.get(relpath)
    if old is not None and old != identity:
        changed = sorted(k for k in set(old) | set(identity) if old.get(k) != identity.get(k))
        details = "; ".join(f"{k}: {old.get(k)!r} -> {identity.get(k)!r}" for k in changed[:4])
        raise UserError(
            f"{ctx.path(relpath)} holds episodes of a different setup ({details}); rerun with the same settings to "
            "resume, or delete that file to evaluate the new one"
        )
    plans[relpath] = identity
    atomic_write_json(path, plans)


def _stamp(path: Path) -> str | None:
    """A folder's identity: its done.json's finish time, else the weights' mtime."""
    try:
        return str(json.loads((path / "done.json").read_text()).get("finished_at"))
    except (OSError, json.JSONDecodeError):
        weights = path / "adapter_model.safetensors"
        return str(weights.stat().st_mtime_ns) if weights.exists() else None


# -- base ------------------------------------------------------------------------------------------------------------


def arm_base(ctx: EvalContext) -> ArmOutput:
    relpath = arm_path("base")
    claim(ctx, relpath, ctx.identity(arm="base", adapter=None))
    ctx.evaluate("base", relpath, metadata={"arm": "base"})
    return ArmOutput("base", relpath, description="The base model, no adapter.")


# -- TRACE -----------------------------------------------------------------------------------------------------------


def why_no_adapters(root: Path) -> str:
    """Why a run has no adapters: its environments all failed calibration, or `train` has not run."""
    statuses = [json.loads(p.read_text()).get("status") for p in sorted((root / "envs").glob("*/status.json"))]
    if statuses and "ready" not in statuses:
        return f"none of the {len(statuses)} capability environments passed calibration (envs/*/status.json)"
    return "run `trace-rl train`"


def trace_spec(ctx: EvalContext) -> RouterSpec:
    """The run's router (`route/router.json`), else one built from the trained adapters (not saved)."""
    from trace_rl.routing.spec import spec_from_run

    adapters = run_adapters(ctx.run)
    if not adapters:
        raise ArmSkipped(f"no trained capability adapters ({why_no_adapters(ctx.run.root)})")
    if router_path(ctx.run).exists():
        spec = load_router_spec(ctx.run)
        missing = [n for n, p in spec.adapters.items() if not (p / "adapter_config.json").is_file()]
        if missing:
            raise ArmSkipped(f"route/router.json names adapters that are gone ({', '.join(missing)}); rerun route")
        return spec
    return spec_from_run(ctx.run, base_model=ctx.model_label)


def sub_spec(spec: RouterSpec, names: list[str]) -> RouterSpec:
    """The router restricted to the capabilities `names` (relabelled A, B, …; base last)."""
    opts = {o.name: o for o in spec.options}
    caps = [(n, opts[n].description, Path(opts[n].adapter_path) if opts[n].adapter_path else None) for n in names]
    examples = {n: (opts[n].example_id or "", opts[n].example) for n in names if opts[n].example}
    options = make_options(caps, examples)  # type: ignore[arg-type]
    return spec.model_copy(update={"options": options})


def _router(ctx: EvalContext, spec: RouterSpec) -> Any:
    if ctx.router_factory is not None:
        return ctx.router_factory(spec)
    from trace_rl.route.stage import make_router

    try:
        return make_router(spec, ctx.client, ctx.policy_cfg)
    except UserError as exc:
        raise ArmSkipped(str(exc)) from None


def route_counts(ctx: EvalContext, relpath: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in ctx.store(relpath).latest().values():
        route = (record.get("metadata") or {}).get("route") or {}
        name = route.get("name") or (record.get("adapter") or BASE)
        counts[name] = counts.get(name, 0) + 1
    return counts


def arm_trace(ctx: EvalContext) -> ArmOutput:
    spec = trace_spec(ctx)
    names = [n for n in spec.names if n != BASE]
    for name, path in spec.adapters.items():
        ctx.ensure_adapter(name, path)
    budgets = {n: run_adapter_budget(ctx.run, n) for n in names}
    relpath = arm_path("trace")
    identity = ctx.identity(arm="trace", router=spec.model_dump(mode="json", exclude={"created_at"}),
                            adapters={n: _stamp(p) for n, p in spec.adapters.items()})  # fmt: skip
    claim(ctx, relpath, identity)
    routed = RoutedClient(ctx.client, _router(ctx, spec), allowed=set(spec.names))
    ctx.evaluate("trace", relpath, router=routed, metadata={"arm": "trace"})
    out = ArmOutput(
        "trace", relpath, budget=sum(b.rollouts for b in budgets.values()), adapters=names,
        description="Routed adapters: the frozen base model picks one adapter (or base) per task from the first user "
        "message; that adapter serves the whole episode.",
        details={"routes": route_counts(ctx, relpath), "route_calls": routed.route_calls,
                 "adapter_budgets": {n: b.as_dict() for n, b in budgets.items()},
                 "router": {"labels": dict(zip(spec.labels, spec.names, strict=True)), "base_model": spec.base_model,
                            "file": str(router_path(ctx.run)) if router_path(ctx.run).exists() else None}},
    )  # fmt: skip
    if ctx.ecfg.curve.enabled:
        for m in range(1, len(names)):
            part = sub_spec(spec, names[:m])
            point = f"curve/trace@{m}.jsonl"
            claim(
                ctx, point, {**identity, "arm": "trace", "router": part.model_dump(mode="json", exclude={"created_at"})}
            )
            routed_m = RoutedClient(ctx.client, _router(ctx, part), allowed=set(part.names))
            ctx.evaluate(f"trace@{m} capabilities", point, trials=ctx.ecfg.curve.trials, router=routed_m,
                         metadata={"arm": "trace", "capabilities": names[:m]})  # fmt: skip
            budget = sum(budgets[n].rollouts for n in names[:m])
            out.curve.append(CurvePoint("trace", budget, point, ctx.ecfg.curve.trials, f"{m} capabilities"))
    return out


# -- trained baselines -----------------------------------------------------------------------------------------------


def _need_budget(ctx: EvalContext) -> int:
    if ctx.total_budget is None or ctx.total_budget <= 0:
        raise ArmSkipped("no rollout budget to match: no trained capability adapters and no --budget")
    return ctx.total_budget


def _adapter_arm(ctx: EvalContext, name: str, adapter: str, folder: Path, budget: AdapterBudget, desc: str,
                 details: dict[str, Any]) -> ArmOutput:  # fmt: skip
    ctx.ensure_adapter(adapter, folder)
    relpath = arm_path(name)
    claim(ctx, relpath, ctx.identity(arm=name, adapter=adapter, adapter_stamp=_stamp(folder)))
    ctx.evaluate(name, relpath, adapter=adapter, metadata={"arm": name})
    return ArmOutput(name, relpath, budget=budget.rollouts, adapters=[adapter], description=desc,
                     details={"budget": budget.as_dict(), **details})  # fmt: skip


def arm_grpo_target(ctx: EvalContext) -> ArmOutput:
    from trace_rl.training.trl_backend import is_done

    root = ctx.path(GRPO_DIR)
    adapter_dir, work_dir, keep_dir = root / "adapter", root / "train", root / "checkpoints"
    matched: dict[str, Any] = {}
    if not is_done(adapter_dir):
        if not ctx.ecfg.train_baselines:
            raise ArmSkipped(f"no GRPO-on-target adapter in {adapter_dir} and train_baselines is off")
        total = _need_budget(ctx)
        probe = matched_config(ctx, run_adapters(ctx.run), total)
        keep = curve_steps(probe.max_steps, ctx.ecfg.curve.fractions) if ctx.ecfg.curve.enabled else []
        tcfg = matched_config(ctx, run_adapters(ctx.run), total, keep)
        rebuild = {"kind": "target", "name": GRPO_DIR, "env": ctx.cfg.env.model_dump(mode="json")}
        train_baseline(ctx, target_train_env(ctx), tcfg, adapter_dir, work_dir, rebuild=rebuild, keep_dir=keep_dir,
                       keep=keep)  # fmt: skip
        matched = {"target_total": total, "steps": tcfg.max_steps}
    budget = adapter_budget(GRPO_DIR, adapter_dir, work_dir)
    out = _adapter_arm(ctx, "grpo_target", GRPO_DIR, adapter_dir, budget,
                       "One adapter trained with GRPO directly on the target's train split, same rollout budget.",
                       {"matched": matched or None, "train_split": "train"})  # fmt: skip
    if ctx.ecfg.curve.enabled and budget.steps:
        wanted = set(curve_steps(budget.steps, ctx.ecfg.curve.fractions))
        for step, folder in kept_checkpoints(keep_dir).items():
            if step not in wanted:
                continue
            name = f"{GRPO_DIR}_step{step}"
            ctx.ensure_adapter(name, folder)
            point = f"curve/grpo_target@{step}.jsonl"
            claim(ctx, point, ctx.identity(arm="grpo_target", adapter=name, adapter_stamp=_stamp(folder)))
            ctx.evaluate(f"grpo_target@step{step}", point, trials=ctx.ecfg.curve.trials, adapter=name,
                         metadata={"arm": "grpo_target", "step": step})  # fmt: skip
            out.curve.append(CurvePoint("grpo_target", budget.until(step), point, ctx.ecfg.curve.trials,
                                        f"step {step}"))  # fmt: skip
    return out


def arm_multi_capability(ctx: EvalContext) -> ArmOutput:
    from trace_rl.training.trl_backend import is_done

    adapter_dir, work_dir = ctx.run.root / "adapters" / MIX_NAME, ctx.run.root / "train" / MIX_NAME
    matched: dict[str, Any] = {}
    if not is_done(adapter_dir):
        if not ctx.ecfg.train_baselines:
            raise ArmSkipped(f"no multi-capability adapter in {adapter_dir} (trace-rl train --mix) and "
                             "train_baselines is off")  # fmt: skip
        total = _need_budget(ctx)
        env = mix_env(ctx)
        tcfg = matched_config(ctx, run_adapters(ctx.run), total)
        train_baseline(ctx, env, tcfg, adapter_dir, work_dir, rebuild={"kind": "mix", "run": str(ctx.run.root)})
        matched = {"target_total": total, "steps": tcfg.max_steps, "environments": len(env.envs)}
    budget = adapter_budget(MIX_NAME, adapter_dir, work_dir)
    return _adapter_arm(ctx, "multi_capability", MIX_NAME, adapter_dir, budget,
                        "One adapter trained with GRPO on a uniform mix of all capability environments.",
                        {"matched": matched or None})  # fmt: skip


# -- single best adapter ---------------------------------------------------------------------------------------------


def _rate(ctx: EvalContext, relpath: str) -> tuple[float, float]:
    records = [r for r in ctx.store(relpath).latest().values() if r.get("infra_error") is None]
    if not records:
        return 0.0, 0.0
    return (sum(bool(r.get("success")) for r in records) / len(records),
            sum(float(r.get("reward") or 0.0) for r in records) / len(records))  # fmt: skip


def arm_single_best(ctx: EvalContext) -> ArmOutput:
    adapters = run_adapters(ctx.run)
    if not adapters:
        raise ArmSkipped(f"no trained capability adapters ({why_no_adapters(ctx.run.root)})")
    how = ctx.ecfg.single_best
    scores: dict[str, Any] = {}
    spent = 0
    if how.select == "train_eval":
        for name, folder in adapters.items():
            try:
                before = json.loads((folder / "eval_before.json").read_text())
                after = json.loads((folder / "eval_after.json").read_text())
            except (OSError, json.JSONDecodeError):
                continue
            scores[name] = after.get("success_rate", 0.0) - before.get("success_rate", 0.0)
        if not scores:
            raise ArmSkipped("select=train_eval: no adapter has eval_before.json and eval_after.json")
    else:
        if how.select == "train":
            tasks, split, trials = ctx.train_tasks()[: how.tasks], "train", how.trials
        else:
            tasks, split, trials = ctx.tasks, ctx.split, ctx.ecfg.trials
        for name, folder in adapters.items():
            ctx.ensure_adapter(name, folder)
            relpath = f"single_best/{how.select}/{name}.jsonl"
            claim(ctx, relpath, ctx.identity(arm="single_best", adapter=name, adapter_stamp=_stamp(folder),
                                             split=split, trials=trials))  # fmt: skip
            ctx.evaluate(f"single_best select {name}", relpath, tasks=tasks, split=split, trials=trials, adapter=name,
                         metadata={"arm": "single_best", "selection": how.select})  # fmt: skip
            scores[name] = _rate(ctx, relpath)
            spent += len(tasks) * trials

    def rank(name: str) -> tuple[float, ...]:
        score = scores.get(name)
        if score is None:
            return (-1.0, -1.0)
        return tuple(score) if isinstance(score, tuple) else (float(score),)

    best = max(adapters, key=rank)  # ties: the first adapter in name order
    details = {"selection": {"rule": how.select, "scores": scores, "chosen": best, "selection_rollouts": spent,
                             "leaks_test": how.select == "test"}}  # fmt: skip
    return _adapter_arm(
        ctx,
        "single_best",
        best,
        adapters[best],
        run_adapter_budget(ctx.run, best),
        f"The single capability adapter '{best}' for every task (chosen by {how.select}).",
        details,
    )


# -- GEPA ------------------------------------------------------------------------------------------------------------


def seed_candidate(ctx: EvalContext) -> dict[str, str]:
    """The capabilities TRACE identified, name -> description: diagnose/capabilities.json, else the router's."""
    path = ctx.run.root / "diagnose" / "capabilities.json"
    out: dict[str, str] = {}
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            data = {}
        for cap in data.get("selected") or []:
            if isinstance(cap, dict) and cap.get("name") and cap.get("definition"):
                out[str(cap["name"])] = str(cap["definition"])
    if not out and router_path(ctx.run).exists():
        out = {o.name: o.description for o in load_router_spec(ctx.run).options if o.name != BASE and o.description}
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


def _reflection(ctx: EvalContext) -> Any:
    if ctx.reflection_lm is not None:
        return ctx.reflection_lm
    g = ctx.ecfg.gepa
    client = ctx.client
    if g.reflection_model:
        from trace_rl.models.resolve import build_client
        from trace_rl.rollout.command import add_model_spec

        name = add_model_spec(ctx.cfg, g.reflection_model)
        if name not in ctx.clients:
            ctx.clients[name] = build_client(ctx.cfg.model(name), name=name)
        client = ctx.clients[name]
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
    result_path = ctx.path("gepa/result.json")
    identity = ctx.identity(arm="gepa", seed_candidate=seed, budget=budget, gepa=g.model_dump(mode="json"))
    if result_path.exists():
        saved = read_json(result_path)
        if saved.get("identity") == identity:
            return saved
    train, val = gepa_sets(ctx)
    tasks = {t.id: t for t in [*train, *val]}
    store = ctx.store("gepa/episodes.jsonl")

    def run_batch(batch: list[Task], suffix: str, key: str) -> list[Trajectory]:
        jobs = [Job(task=t, trial=0, seed=g.episode_seed, id=f"{key}/{t.id}") for t in batch]
        factory = ctx.factory("train", system_suffix=suffix, metadata={"arm": "gepa", "candidate": key})
        ctx.run_jobs(jobs, factory, store, f"gepa {key[:8]}")
        latest = store.latest()
        return [Trajectory.model_validate(latest[j.id]) for j in jobs]

    adapter = TraceGEPAAdapter(tasks, run_batch, budget=budget, score=g.score)
    ctx.echo(f"GEPA: {len(seed)} capability descriptions, budget {budget} rollouts, "
             f"{len(train)} train / {len(val)} val tasks")  # fmt: skip
    result = gepa.optimize(
        seed_candidate=seed, trainset=[t.id for t in train], valset=[t.id for t in val], adapter=adapter,
        reflection_lm=_reflection(ctx), candidate_selection_strategy=g.candidate_selection,
        reflection_minibatch_size=g.minibatch_size, max_metric_calls=budget, stop_callbacks=[adapter.stopper],
        seed=g.seed, display_progress_bar=False, raise_on_exception=False, logger=FileLog(ctx.path("gepa/log.txt")),
    )  # fmt: skip
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


def arm_gepa(ctx: EvalContext) -> ArmOutput:
    seed = seed_candidate(ctx)
    if not seed:
        raise ArmSkipped("no capability descriptions to optimise (diagnose/capabilities.json has none selected)")
    budget = ctx.ecfg.gepa.budget or _need_budget(ctx)
    saved = run_gepa(ctx, seed, budget)
    best = saved["best_candidate"]
    relpath = arm_path("gepa")
    claim(ctx, relpath, ctx.identity(arm="gepa", candidate=candidate_key(best)))
    ctx.evaluate("gepa", relpath, system_suffix=render_capabilities(best),
                 metadata={"arm": "gepa", "candidate": candidate_key(best)})  # fmt: skip
    out = ArmOutput(
        "gepa", relpath, budget=int(saved["rollouts_charged"]),
        description="The base model with GEPA-optimised capability descriptions appended to its system prompt.",
        details={"gepa": {k: saved[k] for k in ("best_idx", "val_aggregate_scores", "discovery_eval_counts",
                                                 "gepa_metric_calls", "rollouts_charged", "refused_over_budget",
                                                 "budget")},
                 "best_candidate": best, "seed_candidate": seed, "candidates": len(saved["candidates"])},
    )  # fmt: skip
    if ctx.ecfg.curve.enabled:
        for f in ctx.ecfg.curve.fractions:
            limit = round(f * budget)
            idx = best_within(saved, limit)
            cand = saved["candidates"][idx]
            if candidate_key(cand) == candidate_key(best) and ctx.ecfg.curve.trials <= ctx.ecfg.trials:
                point = relpath  # the final candidate: its first trials are already evaluated, same seeds
            else:
                point = f"curve/gepa@{candidate_key(cand)}.jsonl"
                claim(ctx, point, ctx.identity(arm="gepa", candidate=candidate_key(cand)))
                ctx.evaluate(f"gepa@{limit}", point, trials=ctx.ecfg.curve.trials,
                             system_suffix=render_capabilities(cand),
                             metadata={"arm": "gepa", "candidate": candidate_key(cand)})  # fmt: skip
            out.curve.append(CurvePoint("gepa", limit, point, ctx.ecfg.curve.trials, f"candidate {idx}"))
    return out


ARM_FUNCTIONS = {
    "base": arm_base,
    "trace": arm_trace,
    "grpo_target": arm_grpo_target,
    "gepa": arm_gepa,
    "single_best": arm_single_best,
    "multi_capability": arm_multi_capability,
}

__all__ = ["ARM_FUNCTIONS", "ArmOutput", "CurvePoint", "arm_path", "claim", "seed_candidate", "sub_spec"]
