"""`route/router.json`: everything needed to rebuild a run's router — labels, capability names, descriptions, one
condensed successful example per capability, the base model and the adapter folders.

`spec_from_run` assembles it from the run directory: adapters from `adapters/<capability>/` (PEFT folders; the
multi-capability baseline `multi` is not a routing option), descriptions from `diagnose/capabilities.json` (else the
environment's `envs/<capability>/spec.json`), examples from the first successful held-out episode the train stage
recorded (`train/<capability>/eval_after.jsonl`, then `eval_before.jsonl`, then `trajectories.jsonl`). Labels are
A, B, C, … in capability order, and the base label comes last.
"""

from __future__ import annotations

import json
import string
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trace_rl.errors import UserError
from trace_rl.routing.prompt import PromptConfig, condense_trajectory
from trace_rl.artifacts.store import JsonlStore, RunDir, atomic_write_json, read_json
from trace_rl.types import Trajectory

BASE = "base"
ROUTER_FILE = "route/router.json"
ROUTER_FORMAT = "trace-rl/router@1"
EXCLUDED_ADAPTERS = frozenset({"multi"})
LABELS = string.ascii_uppercase


class RouteOption(BaseModel):
    """One label of the routing prompt: a capability (with its adapter) or the base model."""

    model_config = ConfigDict(extra="forbid")

    label: str = Field(description="Single-token label shown to the classifier (A, B, C, …).")
    name: str = Field(description="Capability name (= the adapter's served name), or 'base'.")
    description: str = Field("", description="The capability's definition; empty for base means the default text.")
    example: str | None = Field(None, description="One condensed successful trajectory from its environment.")
    example_id: str | None = Field(None, description="Id of the trajectory the example was condensed from.")
    adapter_path: str | None = Field(None, description="PEFT adapter folder; None for base.")

    @property
    def is_base(self) -> bool:
        return self.name == BASE


class RouterSpec(BaseModel):
    """`runs/<name>/route/router.json`."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["trace-rl/router@1"] = ROUTER_FORMAT
    base_model: str = Field(description="The frozen base model the classifier runs on (folder, alias or served name).")
    options: list[RouteOption] = Field(description="Capabilities first, the base label last.")
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    created_at: float = 0.0
    provenance: dict[str, object] = Field(
        default_factory=dict, description="Where descriptions and examples came from."
    )

    @model_validator(mode="after")
    def _check(self) -> RouterSpec:
        labels = [o.label for o in self.options]
        names = [o.name for o in self.options]
        if not self.options:
            raise ValueError("a router needs at least one option")
        if len(set(labels)) != len(labels) or len(set(names)) != len(names):
            raise ValueError("labels and option names must be unique")
        if any(not o.label.strip() or len(o.label) > 3 for o in self.options):
            raise ValueError("labels must be short single tokens such as A, B, C")
        return self

    @property
    def labels(self) -> list[str]:
        return [o.label for o in self.options]

    @property
    def names(self) -> list[str]:
        return [o.name for o in self.options]

    @property
    def adapters(self) -> dict[str, Path]:
        """Capability name -> adapter folder (base excluded)."""
        return {o.name: Path(o.adapter_path) for o in self.options if o.adapter_path and not o.is_base}

    def name_of(self, label: str) -> str:
        for o in self.options:
            if o.label == label:
                return o.name
        raise KeyError(label)

    def save(self, path: Path) -> Path:
        atomic_write_json(path, self)
        return path

    @classmethod
    def load(cls, path: Path) -> RouterSpec:
        try:
            return cls.model_validate(read_json(path))
        except ValidationError as exc:
            raise UserError(f"{path} is not a valid router file: {str(exc).splitlines()[0]}") from None


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


def router_path(run: RunDir) -> Path:
    return run.root / ROUTER_FILE


def load_router_spec(run: RunDir) -> RouterSpec:
    path = router_path(run)
    if not path.exists():
        raise UserError(f"no {path}: run `trace-rl route --run {run.root}` first")
    return RouterSpec.load(path)


# -- assembling a spec from a run ------------------------------------------------------------------------------------


def run_adapters(run: RunDir) -> dict[str, Path]:
    """Capability name -> adapter folder for every trained adapter of the run (the `multi` baseline excluded)."""
    root = run.root / "adapters"
    if not root.is_dir():
        return {}
    return {
        p.name: p
        for p in sorted(root.iterdir())
        if p.is_dir() and (p / "adapter_config.json").is_file() and p.name not in EXCLUDED_ADAPTERS
    }


def _definitions(run: RunDir) -> dict[str, str]:
    out: dict[str, str] = {}
    envs = run.root / "envs"
    if envs.is_dir():
        for spec in sorted(envs.glob("*/spec.json")):
            try:
                out[spec.parent.name] = str(json.loads(spec.read_text()).get("definition") or "")
            except (OSError, json.JSONDecodeError):
                continue
    caps = run.root / "diagnose" / "capabilities.json"
    if caps.exists():
        try:
            data = json.loads(caps.read_text())
        except (OSError, json.JSONDecodeError):
            data = {}
        for cap in [*data.get("candidates", []), *data.get("selected", [])]:
            if isinstance(cap, dict) and cap.get("name") and cap.get("definition"):
                out[str(cap["name"])] = str(cap["definition"])
    return out


def first_success(path: Path) -> Trajectory | None:
    """The first successful trajectory in a JSONL file (unreadable lines skipped)."""
    if not path.exists():
        return None
    for record in JsonlStore(path).records():
        if not record.get("success"):
            continue
        try:
            return Trajectory.model_validate(record)
        except ValidationError:
            continue
    return None


def find_example(run: RunDir, capability: str, *, max_chars: int = 600) -> tuple[str, str] | None:
    """(trajectory id, condensed text) of a successful episode of the capability's environment, if one was recorded."""
    folder = run.root / "train" / capability
    for name in ("eval_after.jsonl", "eval_before.jsonl", "trajectories.jsonl"):
        traj = first_success(folder / name)
        if traj is not None:
            return traj.id, condense_trajectory(traj.messages, max_chars=max_chars)
    return None


def spec_from_run(
    run: RunDir,
    *,
    base_model: str,
    capabilities: list[str] | None = None,
    prompt: PromptConfig | None = None,
    example_chars: int = 600,
) -> RouterSpec:
    """A router over the run's trained adapters (or the named subset), with descriptions and examples."""
    adapters = run_adapters(run)
    names = capabilities if capabilities is not None else list(adapters)
    missing = [n for n in names if n not in adapters]
    if missing:
        known = ", ".join(adapters) or "none"
        raise UserError(f"no trained adapter for {', '.join(missing)} under {run.root / 'adapters'} (found: {known})")
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


__all__ = [
    "BASE",
    "ROUTER_FILE",
    "ROUTER_FORMAT",
    "RouteOption",
    "RouterSpec",
    "find_example",
    "load_router_spec",
    "make_options",
    "router_path",
    "run_adapters",
    "spec_from_run",
]
