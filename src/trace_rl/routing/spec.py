"""Building a router (`RouterSpec`, artifacts/router.py): the options' labels, descriptions and examples.

`spec_from_run` assembles one from the run directory: adapters from `adapters/<capability>/` (PEFT folders; the
multi-capability baseline `multi` is not a routing option), descriptions from `diagnose/capabilities.json` (else the
environment's `envs/<capability>/spec.json`), examples from the first successful held-out episode the train stage
recorded (`train/<capability>/eval_after.jsonl`, then `eval_before.jsonl`, then `trajectories.jsonl`). Labels are
A, B, C, … in capability order, and the base label comes last.
"""

from __future__ import annotations

import string
import time
from pathlib import Path

from trace_rl.artifacts.adapters import capability_adapters
from trace_rl.artifacts.capabilities import capability_definitions
from trace_rl.artifacts.environments import EnvSpec, read_env_spec
from trace_rl.artifacts.layout import EnvLayout
from trace_rl.artifacts.router import BASE, RouteOption, RouterSpec
from trace_rl.artifacts.store import RunDir
from trace_rl.artifacts.trajectories import first_success
from trace_rl.config.route import PromptConfig
from trace_rl.errors import UserError
from trace_rl.routing.prompt import condense_trajectory

LABELS = string.ascii_uppercase


def make_options(
    capabilities: list[tuple[str, str, Path | None]],
    examples: dict[str, tuple[str, str]] | None = None,
    *,
    include_base: bool = True,
) -> list[RouteOption]:
    """Options for (name, description, adapter folder) triples: labels A, B, … and the base label last."""
    examples = examples or {}
    if len(capabilities) + include_base > len(LABELS):
        raise UserError(f"at most {len(LABELS) - 1} capabilities can be routed (single-letter labels)")
    options = []
    for i, (name, description, path) in enumerate(capabilities):
        if name == BASE:
            raise UserError(f"'{BASE}' is reserved for the base label; rename the capability")
        example_id, example = examples.get(name, (None, None))
        options.append(
            RouteOption(
                label=LABELS[i],
                name=name,
                description=description,
                example=example,
                example_id=example_id,
                adapter_path=str(path) if path is not None else None,
            )
        )
    if include_base:
        options.append(RouteOption(label=LABELS[len(capabilities)], name=BASE))
    return options


def find_example(run: RunDir, capability: str, *, max_chars: int = 600) -> tuple[str, str] | None:
    """(trajectory id, condensed text) of a successful episode of the capability's environment, if one was recorded."""
    work = run.train_work(capability)
    for path in (work.eval_after, work.eval_before, work.trajectories):
        traj = first_success(path)
        if traj is not None:
            return traj.id, condense_trajectory(traj.messages, max_chars=max_chars)
    return None


def _definitions(run: RunDir) -> dict[str, str]:
    """Capability name -> description: the environment's spec, overridden by diagnose's definition."""
    out = {env.name: spec.definition for env in run.envs() if (spec := _spec(env)) is not None}
    out.update(capability_definitions(run))
    return out


def _spec(env: EnvLayout) -> EnvSpec | None:
    return read_env_spec(env) if env.spec.exists() else None


def spec_from_run(
    run: RunDir,
    *,
    base_model: str,
    capabilities: list[str] | None = None,
    prompt: PromptConfig | None = None,
    example_chars: int = 600,
) -> RouterSpec:
    """A router over the run's trained adapters (or the named subset), with descriptions and examples."""
    adapters = capability_adapters(run)
    names = capabilities if capabilities is not None else list(adapters)
    missing = [n for n in names if n not in adapters]
    if missing:
        known = ", ".join(adapters) or "none"
        raise UserError(f"no trained adapter for {', '.join(missing)} under {run.adapters_dir} (found: {known})")
    if not names:
        raise UserError(f"{run.root}: no trained adapters to route to (run `trace-rl train` first)")
    definitions = _definitions(run)
    examples = {}
    for name in names:
        found = find_example(run, name, max_chars=example_chars)
        if found is not None:
            examples[name] = found
    options = make_options([(n, definitions.get(n, ""), adapters[n].resolve()) for n in names], examples)
    return RouterSpec(
        base_model=base_model,
        options=options,
        prompt=prompt or PromptConfig(),
        created_at=time.time(),
        provenance={
            "run": str(run.root),
            "descriptions": {n: "diagnose/envs" if n in definitions else "none" for n in names},
            "examples": {n: examples[n][0] if n in examples else None for n in names},
        },
    )


__all__ = ["LABELS", "find_example", "make_options", "spec_from_run"]
