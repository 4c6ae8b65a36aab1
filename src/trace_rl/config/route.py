"""`RouteConfig`: the `route` section (stage 4 of TRACE), and `PromptConfig`, how the routing prompt is rendered.

`PromptConfig` lives here rather than beside the prompt builder (`routing/prompt.py`) so that the config layer
imports nothing above it; `routing/` imports it from here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from trace_rl.config.base import Section

INSTRUCTION = "You are a routing classifier. Select which skill best matches the user's request."


class PromptConfig(Section):
    """How the routing prompt is rendered (recorded in router.json so a router is rebuilt exactly)."""

    instruction: str = Field(INSTRUCTION, description="First line of the system message.")
    include_system: bool = Field(
        False,
        description="Show an excerpt of the agent's own system prompt before the user's message (TRACE routes from "
        "the first user message only; the system prompt is usually the same for every task of a domain).",
    )
    system_chars: int = Field(1200, ge=0, description="Characters of the agent's system prompt shown, at most.")
    user_chars: int = Field(4000, ge=1, description="Characters of the first user message shown, at most.")
    question: str = Field("Which skill?", description="The second user message, before the list of labels.")


class RouteConfig(Section):
    """Stage 4: the router over the trained adapters, and how well it routes held-out capability tasks."""

    model: str | None = Field(
        None, description="Classifier = the frozen base model (name or spec); None: the run's policy / adapters' base."
    )
    capabilities: list[str] | None = Field(None, description="Route among these adapters only (default: all).")
    split: str = Field("test", description="Held-out split of each capability environment.")
    tasks_per_env: int | None = Field(20, ge=1, description="Held-out tasks per capability environment (None: all).")
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    calibration: Literal["none", "content_free", "fitted"] = Field(
        "none",
        description="Per-label offsets for the label scores (routing/bias.py): none (the paper's router), "
        "content_free (contextual calibration on an 'N/A' message) or fitted (on the capability environments' train "
        "tasks and the target tasks the base model solved in the rollout, never the held-out ones).",
    )
    fit_tasks: int = Field(20, ge=1, description="With calibration: fitted, openings per option to fit on, at most.")
    example_chars: int = Field(600, ge=0, description="Characters of the example trajectory per option.")
    user: str | None = Field(None, description="User simulator for the first message ('scripted' default, or a model).")
    oracle_trials: int = Field(
        0, ge=0, description="Episodes per (task, option) for the oracle figures (0: off; each option × task × trial)."
    )
    concurrency: int = Field(4, ge=1, description="Oracle episodes in flight.")
    seed: int = Field(300, description="Oracle trial seeds derive from it.")
    samples: int = Field(1000, ge=1, description="Bootstrap resamples.")
    level: float = Field(0.95, gt=0.0, lt=1.0)


__all__ = ["INSTRUCTION", "PromptConfig", "RouteConfig"]
