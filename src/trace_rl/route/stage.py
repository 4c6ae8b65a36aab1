"""Stage 4 over a run directory: build `route/router.json` from the trained adapters and measure the router.

    route/router.json     the router (labels, descriptions, one example per capability, adapter folders)
    route/accuracy.json   confusion matrix, accuracy with a 95% interval, base rate (+ oracle figures when asked)
    route/oracle/*.jsonl  with `oracle_trials > 0`: every option (each adapter and base) on every held-out task

Routing uses the frozen base model as the classifier (TRACE §3.5): in process over the label tokens' next-token logits
(`LocalClient`), or a server's constrained one-token choice (OpenAI-compatible, vLLM). The oracle rollouts are
resumable (rerun the command); routing itself is cheap (one forward pass per task) and always redone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from trace_rl.artifacts.adapters import capability_adapters
from trace_rl.artifacts.evaluation import RoutingAccuracy
from trace_rl.artifacts.router import BASE, RouterSpec, write_router
from trace_rl.artifacts.store import JsonlStore, RunDir
from trace_rl.config import RouteConfig, TraceConfig
from trace_rl.errors import UserError
from trace_rl.models.base import ModelClient, SamplingParams
from trace_rl.models.registry import ModelClients
from trace_rl.route.accuracy import (
    HeldOutSet,
    accuracy_report,
    example_task_ids,
    family_ceiling,
    format_confusion,
    held_out_sets,
    route_held_out,
    task_key,
)
from trace_rl.route.fit import calibrate_router
from trace_rl.routing.policy import model_label, policy_model, policy_sampling
from trace_rl.routing.router import Router, make_router, router_factory
from trace_rl.routing.spec import spec_from_run
from trace_rl.stage import StageContext

STAGE = "route"


# -- the stage -------------------------------------------------------------------------------------------------------


def build_spec(run: RunDir, rcfg: RouteConfig, base_model: str) -> RouterSpec:
    spec = spec_from_run(
        run, base_model=base_model, capabilities=rcfg.capabilities, prompt=rcfg.prompt, example_chars=rcfg.example_chars
    )
    write_router(run, spec)
    return spec


def _oracle(
    run: RunDir,
    rcfg: RouteConfig,
    spec: RouterSpec,
    sets: list[HeldOutSet],
    client: ModelClient,
    label: str,
    user_client: ModelClient | None,
    echo: Callable[[str], None],
    sampling: SamplingParams,
    cfg: TraceConfig,
) -> dict[tuple[str, str], tuple[int, int]]:
    """Every option on every held-out task, `oracle_trials` times; (task key, option) -> (successes, scored)."""
    from trace_rl.engine.episode import EpisodeLimits
    from trace_rl.engine.plan import plan_jobs
    from trace_rl.engine.runner import EpisodeFactory, run_rollout

    load = getattr(client, "load_adapter", None)
    for name, path in spec.adapters.items():
        if load is not None and name not in getattr(client, "adapters", {}):
            load(name, path)
    outcomes: dict[tuple[str, str], tuple[int, int]] = {}
    for option in spec.names:
        store = JsonlStore(run.oracle_episodes(option))
        for held in sets:
            factory = EpisodeFactory(
                domain=held.domain,
                env_name=held.env_name,
                split=rcfg.split,
                client=client,
                model_name=label,
                adapter=None if option == BASE else option,
                sampling=sampling,
                limits=EpisodeLimits(max_steps=cfg.env.max_steps, max_errors=cfg.env.max_errors),
                user_client=user_client,
                user_sampling=SamplingParams(temperature=0.0),
                token_ids="none",
                metadata={"run": run.name, "oracle_option": option},
            )
            jobs = plan_jobs(held.env_name, rcfg.split, held.tasks, rcfg.oracle_trials, rcfg.seed)
            result = asyncio.run(
                run_rollout(
                    jobs, factory, store, concurrency=rcfg.concurrency, label=f"oracle {option} on {held.env_name}"
                )
            )
            echo(f"oracle {option} on {held.env_name}: {result.ran} run, {result.resumed} resumed")
        for record in store.latest().values():
            if record.get("infra_error") is not None or int(record.get("trial", 0)) >= rcfg.oracle_trials:
                continue
            key = (task_key(record["env"], record["task_id"]), option)
            s, n = outcomes.get(key, (0, 0))
            outcomes[key] = (s + bool(record.get("success")), n + 1)
    return outcomes


def run_route(
    run: RunDir | Path,
    cfg: TraceConfig,
    rcfg: RouteConfig,
    *,
    router: Router | Callable[[RouterSpec], Router] | None = None,
    clients: dict[str, ModelClient] | None = None,
    command: str | None = None,
    echo: Callable[[str], None] = lambda _: None,
) -> RoutingAccuracy:
    """Build the router, route every held-out capability task once, write `route/accuracy.json`.

    `router` (or a factory of one from the spec) and `clients` (name -> client) replace the built ones (tests)."""
    run = run if isinstance(run, RunDir) else RunDir(Path(run))
    run.require()
    if not capability_adapters(run):
        raise UserError(f"{run.root}: no trained adapters under {run.adapters_dir.name}/ (run `trace-rl train` first)")
    clients = ModelClients(cfg, clients)  # the given ones (tests) kept; the others built on first use
    name, model_cfg, warnings = policy_model(cfg, run, rcfg.model)
    label = model_label(name, model_cfg)
    spec = build_spec(run, rcfg, label)
    echo(f"router: {len(spec.options) - 1} capabilities + base -> {run.router}")
    sets, skipped = held_out_sets(
        run,
        [o.name for o in spec.options if o.name != BASE],
        rcfg.split,
        rcfg.tasks_per_env,
        exclude=example_task_ids(spec),
    )
    if not sets:
        raise UserError(f"no capability environment with held-out tasks to measure routing on ({skipped})")
    run.ensure(command=command)

    user_name = None if rcfg.user in (None, "scripted") else rcfg.user
    if user_name is not None and user_name not in cfg.models:
        from trace_rl.models.specs import add_model_spec

        user_name = add_model_spec(cfg, user_name)
    try:
        active = make_router(spec, clients[name], model_cfg) if router is None else router_factory(router)(spec)
        user_client = clients[user_name] if user_name else None
        stage_cfg = {**rcfg.model_dump(mode="json"), "policy": label}
        with run.stage(STAGE, stage_cfg, command=command) as record:
            calibration: dict[str, object] = {"calibration": "none"}
            if rcfg.calibration != "none":
                fit = calibrate_router(
                    run,
                    active,
                    rcfg.calibration,
                    fit_tasks=rcfg.fit_tasks,
                    system=sets[0].system_prompt(),
                    user_client=user_client,
                )
                spec = fit.spec
                write_router(run, spec)
                warnings = [*warnings, *fit.warnings]
                calibration = fit.details
                echo(f"router offsets ({spec.calibration}): {_offsets(spec)}")
            per_task = route_held_out(active, sets, spec=spec, user_client=user_client)
            outcomes = None
            if rcfg.oracle_trials > 0:
                outcomes = _oracle(
                    run, rcfg, spec, sets, clients[name], label, user_client, echo, policy_sampling(cfg, model_cfg), cfg
                )
            result = accuracy_report(
                per_task,
                spec.names,
                env=",".join(s.env_name for s in sets),
                split=rcfg.split,
                router={
                    "base_model": spec.base_model,
                    "labels": dict(zip(spec.labels, spec.names, strict=True)),
                    "prompt": spec.prompt.model_dump(mode="json"),
                    "file": str(run.router),
                },
                outcomes=outcomes,
                samples=rcfg.samples,
                seed=rcfg.seed,
                level=rcfg.level,
                details={
                    "held_out": {s.name: {"tasks": len(s.tasks), "source": s.source} for s in sets},
                    "skipped": skipped,
                    "warnings": warnings,
                    "user": user_name or "scripted",
                    "first_message_only": True,
                    "calibration": calibration,
                    "family_ceiling": family_ceiling(sets),
                },
            )
            result.save(run.accuracy)
            record.summary = {
                "accuracy": result.accuracy.value,
                "base_rate": result.base_rate,
                "tasks": result.n_tasks,
                "skipped": skipped,
            }
    finally:
        asyncio.run(clients.aclose())
    return result


def _offsets(spec: RouterSpec) -> str:
    return ", ".join(f"{spec.name_of(label)} {value:+.3f}" for label, value in spec.bias.items())


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def summary_lines(result: RoutingAccuracy) -> list[str]:
    """The confusion matrix, the accuracy with its interval and the base rate, and the oracle figures when measured."""
    acc = result.accuracy
    interval = f" [{_pct(acc.low)}, {_pct(acc.high)}]" if acc.low is not None else ""
    lines = [
        format_confusion(result),
        f"routing accuracy {_pct(acc.value)}{interval} on {result.n_tasks} held-out tasks · "
        f"base label won {_pct(result.base_rate)}",
    ]
    ceiling = result.details.get("family_ceiling")
    if ceiling and ceiling["ceiling"] < 1:
        shared = sorted(f for f, row in ceiling["by_family"].items() if len(row) > 1)
        lines.append(
            f"the environments share task families ({', '.join(shared)}): a router that knew each task's family would "
            f"reach at most {_pct(ceiling['ceiling'])}"
        )
    if result.routed_pass1 is not None and result.oracle_pass1 is not None:
        lines.append(
            f"potential rate {_pct(result.potential_rate)} · pass^1 routed {_pct(result.routed_pass1.value)} "
            f"vs oracle {_pct(result.oracle_pass1.value)}"
        )
    return lines


class RouteStage:
    """The route stage: the router over the run's trained adapters and its accuracy on held-out tasks."""

    name = STAGE

    def section(self, config: TraceConfig) -> RouteConfig:
        return config.route

    def run(self, ctx: StageContext, section: RouteConfig) -> RoutingAccuracy:
        result = run_route(ctx.run, ctx.config, section, command=ctx.command, echo=ctx.echo)
        for line in summary_lines(result):
            ctx.echo(line)
        for name, reason in (result.details.get("skipped") or {}).items():
            ctx.echo(f"skipped {name}: {reason}", err=True)
        ctx.echo(f"accuracy: {ctx.run.accuracy}")
        return result


ROUTE = RouteStage()


__all__ = [
    "ROUTE",
    "STAGE",
    "RouteStage",
    "build_spec",
    "run_route",
]
