"""`route/router.json` (`RouterSpec`): everything needed to rebuild a run's router — its labels, capability names,
descriptions, one condensed successful example per capability, the base model, the adapter folders and how the
routing prompt is rendered (`config.route.PromptConfig`). Written by route; read by evaluate (the TRACE arm), serve
and the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trace_rl.artifacts.layout import RunLayout
from trace_rl.artifacts.store import atomic_write_json, read_model
from trace_rl.config.route import PromptConfig
from trace_rl.errors import UserError

BASE = "base"
"""The option name of the base model (no adapter)."""
ROUTER_FORMAT = "trace-rl/router@1"


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
    bias: dict[str, float] = Field(
        default_factory=dict,
        description="label -> offset added to its score before the argmax (routing/bias.py); empty: none.",
    )
    calibration: str = Field("none", description="How `bias` was set: none, content_free or fitted.")
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
        if unknown := sorted(set(self.bias) - set(labels)):
            raise ValueError(f"bias for unknown labels {unknown}")
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
        return read_model(path, cls, "router file")


def read_router(run: RunLayout) -> RouterSpec:
    """The run's `route/router.json`; UserError when route has not run or the file is malformed."""
    if not run.router.exists():
        raise UserError(f"no {run.router}: run `trace-rl route --run {run.root}` first")
    return RouterSpec.load(run.router)


def write_router(run: RunLayout, spec: RouterSpec) -> Path:
    return spec.save(run.router)


__all__ = [
    "BASE",
    "ROUTER_FORMAT",
    "RouteOption",
    "RouterSpec",
    "read_router",
    "write_router",
]
