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
import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import Field

from trace_rl.config import ModelConfig, Section, TraceConfig, format_validation_error, model_from_spec
from trace_rl.errors import UserError
from trace_rl.models.base import ModelClient, SamplingParams
from trace_rl.artifacts.evaluation import ACCURACY_FILE, RoutingAccuracy
from trace_rl.route.accuracy import (
    HeldOutSet,
    accuracy_report,
    example_task_ids,
    held_out_sets,
    route_held_out,
    task_key,
)
from trace_rl.routing.prompt import PromptConfig
from trace_rl.routing.router import LabelLogitRouter, Router
from trace_rl.routing.spec import BASE, RouterSpec, router_path, run_adapters, spec_from_run
from trace_rl.artifacts.store import RunDir

ORACLE_DIR = "route/oracle"


class RouteConfig(Section):
    """Stage 4: the router over the trained adapters, and how well it routes held-out capability tasks."""

    model: str | None = Field(
        None, description="Classifier = the frozen base model (name or spec); None: the run's policy / adapters' base."
    )
    capabilities: list[str] | None = Field(None, description="Route among these adapters only (default: all).")
    split: str = Field("test", description="Held-out split of each capability environment.")
    tasks_per_env: int | None = Field(20, ge=1, description="Held-out tasks per capability environment (None: all).")
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    example_chars: int = Field(600, ge=0, description="Characters of the example trajectory per option.")
    user: str | None = Field(None, description="User simulator for the first message ('scripted' default, or a model).")
    oracle_trials: int = Field(
        0, ge=0, description="Episodes per (task, option) for the oracle figures (0: off; each option × task × trial)."
    )
    concurrency: int = Field(4, ge=1, description="Oracle episodes in flight.")
    seed: int = Field(300, description="Oracle trial seeds derive from it.")
    samples: int = Field(1000, ge=1, description="Bootstrap resamples.")
    level: float = Field(0.95, gt=0.0, lt=1.0)


def route_config(cfg: TraceConfig | None, overrides: dict[str, Any] | None = None) -> RouteConfig:
    data = dict((cfg.stages.get("route") if cfg is not None else None) or {})
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return RouteConfig.model_validate(data)
    except Exception as err:
        if hasattr(err, "errors"):
            raise UserError(format_validation_error(err, "stages.route")) from None  # type: ignore[arg-type]
        raise


# -- the base model --------------------------------------------------------------------------------------------------


def adapters_base_model(run: RunDir) -> str | None:
    """The base model the run's adapters were trained on (their `train_config.json`), if recorded."""
    for folder in sorted((run.root / "adapters").glob("*/train_config.json")):
        try:
            model = json.loads(folder.read_text()).get("config", {}).get("model")
        except (OSError, json.JSONDecodeError):
            continue
        if model:
            return str(model)
    return None


def policy_model(cfg: TraceConfig, run: RunDir, spec: str | None) -> tuple[str, ModelConfig, list[str]]:
    """(name, config, warnings) of the base policy: `spec` when given, else the run's rollout policy, else the
    adapters' base model. The name is added to `cfg.models`."""
    from trace_rl.rollout.command import add_model_spec

    warnings: list[str] = []
    trained_on = adapters_base_model(run)
    if spec is not None:
        name = add_model_spec(cfg, spec)
    elif cfg.rollout.policy in cfg.models:
        name = cfg.rollout.policy
    elif trained_on is not None:
        name, model_cfg = model_from_spec(trained_on, cfg)
        cfg.models.setdefault(name, model_cfg)
    else:
        raise UserError("no base model: pass --model (the model the adapters were trained on)")
    model_cfg = cfg.models[name]
    if trained_on is not None and model_cfg.kind in ("local", "tiny") and model_cfg.model not in ("", trained_on):
        warnings.append(f"the adapters were trained on '{trained_on}', the policy is '{model_cfg.model}'")
    return name, model_cfg, warnings


def model_label(name: str, model_cfg: ModelConfig | None) -> str:
    return (model_cfg.model if model_cfg is not None else "") or name


def policy_sampling(
    cfg: TraceConfig, model_cfg: ModelConfig | None, *, temperature: float | None = None, max_tokens: int | None = None
) -> SamplingParams:
    """The policy's decoding: explicit values, else the run's rollout settings, else the model's (as rollout does)."""
    r, base = cfg.rollout, model_cfg or ModelConfig()
    if temperature is None:
        temperature = r.temperature if r.temperature is not None else base.temperature
    if max_tokens is None:
        max_tokens = r.max_tokens if r.max_tokens is not None else base.max_tokens
    return SamplingParams(temperature=temperature, top_p=base.top_p, max_tokens=max_tokens)


def make_router(spec: RouterSpec, client: Any, model_cfg: ModelConfig | None) -> Router:
    """The paper's label-logit router over the base model: in process when the client has logits, else against the
    model's OpenAI-compatible server."""
    if hasattr(client, "next_token_logits") and hasattr(client, "tokenizer"):
        return LabelLogitRouter.local(spec, client)
    if model_cfg is not None and model_cfg.kind == "openai":
        import os

        base_url = next(iter(model_cfg.endpoints()), None)  # one routing call per task: the first server
        if not base_url:
            raise UserError("routing against a server needs the model's base_url")
        api_key = model_cfg.api_key or os.environ.get(model_cfg.api_key_env)
        return LabelLogitRouter.server(spec, base_url, model=model_cfg.model or None, api_key=api_key)
    raise UserError(
        "routing needs the base model's logits: a local model (transformers) or an OpenAI-compatible server"
    )


# -- the stage -------------------------------------------------------------------------------------------------------


def build_spec(run: RunDir, rcfg: RouteConfig, base_model: str) -> RouterSpec:
    spec = spec_from_run(run, base_model=base_model, capabilities=rcfg.capabilities, prompt=rcfg.prompt,
                         example_chars=rcfg.example_chars)  # fmt: skip
    spec.save(router_path(run))
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
    from trace_rl.engine.conversation import EpisodeLimits
    from trace_rl.engine.plan import plan_jobs
    from trace_rl.engine.runner import EpisodeFactory, run_rollout

    load = getattr(client, "load_adapter", None)
    for name, path in spec.adapters.items():
        if load is not None and name not in getattr(client, "adapters", {}):
            load(name, path)
    outcomes: dict[tuple[str, str], tuple[int, int]] = {}
    for option in spec.names:
        store = run.jsonl(f"{ORACLE_DIR}/{option}.jsonl")
        for held in sets:
            factory = EpisodeFactory(
                domain=held.domain, env_name=held.env_name, split=rcfg.split, client=client, model_name=label,
                adapter=None if option == BASE else option, sampling=sampling,
                limits=EpisodeLimits(max_steps=cfg.env.max_steps, max_errors=cfg.env.max_errors),
                user_client=user_client, user_sampling=SamplingParams(temperature=0.0), token_ids="none",
                metadata={"run": run.name, "oracle_option": option},
            )  # fmt: skip
            jobs = plan_jobs(held.env_name, rcfg.split, held.tasks, rcfg.oracle_trials, rcfg.seed)
            result = asyncio.run(run_rollout(jobs, factory, store, concurrency=rcfg.concurrency,
                                             label=f"oracle {option} on {held.env_name}"))  # fmt: skip
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
    if not run.exists():
        raise UserError(f"{run.root} is not a trace-rl run (no manifest.json)")
    if not run_adapters(run):
        raise UserError(f"{run.root}: no trained adapters under adapters/ (run `trace-rl train` first)")
    clients = dict(clients or {})
    name, model_cfg, warnings = policy_model(cfg, run, rcfg.model)
    label = model_label(name, model_cfg)
    spec = build_spec(run, rcfg, label)
    echo(f"router: {len(spec.options) - 1} capabilities + base -> {router_path(run)}")
    sets, skipped = held_out_sets(run, [o.name for o in spec.options if o.name != BASE], rcfg.split,
                                  rcfg.tasks_per_env, exclude=example_task_ids(spec))  # fmt: skip
    if not sets:
        raise UserError(f"no capability environment with held-out tasks to measure routing on ({skipped})")
    run.ensure(command=command)

    built: list[ModelClient] = []

    def client(model_name: str) -> ModelClient:
        if model_name not in clients:
            from trace_rl.models.resolve import build_client

            clients[model_name] = build_client(cfg.model(model_name), name=model_name)
            built.append(clients[model_name])
        return clients[model_name]

    user_name = None if rcfg.user in (None, "scripted") else rcfg.user
    if user_name is not None and user_name not in cfg.models:
        from trace_rl.rollout.command import add_model_spec

        user_name = add_model_spec(cfg, user_name)
    try:
        if router is None:
            active: Router = make_router(spec, client(name), model_cfg)
        elif callable(router) and not hasattr(router, "route"):
            active = router(spec)
        else:
            active = router  # type: ignore[assignment]
        user_client = client(user_name) if user_name else None
        stage_cfg = {**rcfg.model_dump(mode="json"), "policy": label}
        with run.stage("route", stage_cfg) as record:
            per_task = route_held_out(active, sets, spec=spec, user_client=user_client)
            outcomes = None
            if rcfg.oracle_trials > 0:
                outcomes = _oracle(
                    run, rcfg, spec, sets, client(name), label, user_client, echo, policy_sampling(cfg, model_cfg), cfg
                )
            result = accuracy_report(
                per_task, spec.names, env=",".join(s.env_name for s in sets), split=rcfg.split,
                router={"base_model": spec.base_model, "labels": dict(zip(spec.labels, spec.names, strict=True)),
                        "prompt": spec.prompt.model_dump(mode="json"), "file": str(router_path(run))},
                outcomes=outcomes, samples=rcfg.samples, seed=rcfg.seed, level=rcfg.level,
                details={"held_out": {s.name: {"tasks": len(s.tasks), "source": s.source} for s in sets},
                         "skipped": skipped, "warnings": warnings, "user": user_name or "scripted",
                         "first_message_only": True},
            )  # fmt: skip
            result.save(run.root / ACCURACY_FILE)
            record.summary = {"accuracy": result.accuracy.value, "base_rate": result.base_rate,
                              "tasks": result.n_tasks, "skipped": skipped}  # fmt: skip
    finally:
        for c in built:
            with contextlib.suppress(Exception):
                asyncio.run(c.aclose())
    return result


__all__ = [
    "ORACLE_DIR",
    "RouteConfig",
    "adapters_base_model",
    "build_spec",
    "make_router",
    "model_label",
    "policy_model",
    "policy_sampling",
    "route_config",
    "run_route",
]
