"""`trace-rl diagnose --show-prompts`: the prompts an LLM analyst would send, written under the run, no model called.

The same trajectories, items, budget and prompt builders as the stage (`stage.py`, `llm.py`), so what is written is
what would be sent: the discovery prompt, and labeling run 0's batches with the dictionary of the stored
`diagnose/discovery.json` (else the structural analyzer's dictionary as a stand-in, said in the index). Files go to
`diagnose/prompts/` (one `.txt` per prompt, `index.json` with tokens and budget), written atomically; the manifest's
stage records are not touched. A prompt that cannot fit is refused with the stage's one-line error.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trace_rl.artifacts.capabilities import CandidateSpec, DiscoveryRecord
from trace_rl.artifacts.store import RunDir, atomic_write_json, atomic_write_text
from trace_rl.config.diagnose import DiagnoseConfig
from trace_rl.diagnose.analyst import make_analyst
from trace_rl.diagnose.llm import LLMAnalyst, PlannedPrompt
from trace_rl.diagnose.stage import _items, load_trajectories, select_trajectories
from trace_rl.diagnose.structural import StructuralAnalyst
from trace_rl.errors import UserError
from trace_rl.models.base import ModelClient
from trace_rl.types import Task


@dataclass
class Preview:
    folder: Path
    prompts: list[dict[str, Any]] = field(default_factory=list)
    dictionary_source: str = ""
    lines: list[str] = field(default_factory=list)


def _stored_dictionary(run: RunDir) -> list[CandidateSpec] | None:
    try:
        return DiscoveryRecord.model_validate(json.loads(run.discovery.read_text())).candidates
    except (OSError, ValueError, ValidationError):
        return None


def render_prompt(planned: PlannedPrompt) -> str:
    return "\n\n".join(f"=== {m.role} ===\n{m.text}" for m in planned.messages) + "\n"


async def preview_async(
    run: RunDir,
    cfg: DiagnoseConfig,
    client: ModelClient,
    *,
    tasks: Mapping[str, Task] | Sequence[Task] | None = None,
    write_kinds: Mapping[str, bool] | None = None,
) -> Preview:
    if not cfg.needs_analyst_model:
        raise UserError(
            f"diagnose --show-prompts: the {cfg.analyst} analyzer sends no prompts; name an LLM with --analyst"
        )
    trajectories, _ = load_trajectories(run)
    kept, counts = select_trajectories(trajectories, cfg)
    warnings: list[str] = []
    items, is_write, _ = _items(run, cfg, kept, counts, warnings, tasks, write_kinds)
    analyst = make_analyst(cfg, client, items, is_write, counts["with_reference"], warnings)
    assert isinstance(analyst, LLMAnalyst)
    await analyst.check_fits(items)
    budget = await analyst.budget()
    discovery, notes = await analyst.discovery_prompt(items, seed=cfg.seed)
    stored = _stored_dictionary(run)
    source = "the stored discovery dictionary" if stored else "structural analyzer's dictionary (stand-in)"
    labeling = await analyst.label_prompts(items, stored or StructuralAnalyst.dictionary(), seed=cfg.seed)
    folder = run.analyst_prompts
    out = Preview(folder=folder, dictionary_source=source)
    for planned in [discovery, *labeling]:
        name = planned.name if planned.name == "discovery" else f"run0_{planned.name}"
        atomic_write_text(folder / f"{name}.txt", render_prompt(planned))
        out.prompts.append(
            {
                "name": name,
                "file": f"{name}.txt",
                "tokens": planned.tokens,
                "trajectories": [
                    u.item.id + (f" (part {u.part + 1} of {u.parts})" if u.parts > 1 else "") for u in planned.units
                ],
            }
        )
    atomic_write_json(
        folder / "index.json",
        {
            "analyst": cfg.analyst,
            "context_tokens": budget.context,
            "reply_tokens": budget.completion,
            "prompt_room_tokens": budget.prompt_room,
            "labeling_reply_tokens": labeling[0].budget.completion if labeling else None,
            "counted": budget.how,
            "dictionary": source,
            "warnings": [*warnings, *notes],
            "prompts": out.prompts,
        },
    )
    parts = sum(1 for p in out.prompts for t in p["trajectories"] if "(part " in t)
    reply = labeling[0].budget.completion if labeling else 0
    largest = max((p.tokens for p in labeling), default=0)
    out.lines = [
        f"wrote {len(out.prompts)} prompts the analyst '{cfg.analyst}' would send to {folder} (no model called)",
        f"budget: {budget.describe()}",
        f"discovery: {discovery.tokens:,} tokens; labeling run 0: {len(labeling)} batches (reply budget "
        f"{reply:,}), largest {largest:,} tokens, {parts} trajectory parts; dictionary: {source}",
    ]
    return out


def preview(run: RunDir, cfg: DiagnoseConfig, client: ModelClient, **kwargs: Any) -> Preview:
    return asyncio.run(preview_async(run, cfg, client, **kwargs))


__all__ = ["Preview", "preview", "preview_async", "render_prompt"]
