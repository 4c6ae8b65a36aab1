"""The LLM analyst with a scripted client: the whole stage end to end, resumption, repair of invalid output, and
bad output never corrupting capabilities.json."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from trace_rl.artifacts.capabilities import CandidateSpec, DiscoveryOutput, Label
from trace_rl.config.diagnose import DiagnoseConfig
from trace_rl.diagnose.items import AnalystError
from trace_rl.diagnose.llm import extract_json
from trace_rl.diagnose.stage import run_diagnose
from trace_rl.models.base import SamplingParams
from trace_rl.types import Message

from .diagnose_helpers import TASKS, WRITE_KINDS, CannedClient, cleans, planted, write_run

DEF = "The agent does the thing this capability names, every time the task requires it; lacking when it does not."
DISCOVERY = {
    "candidates": [
        {"name": "solid_cap", "definition": DEF, "example_task_ids": ["multi", "not_a_task"]},
        {"name": "noisy_cap", "definition": DEF, "example_task_ids": [{"task_id": "select", "note": "x"}]},
        {"name": "flat_cap", "definition": DEF, "example_task_ids": []},
    ]
}
NAMES = ["solid_cap", "noisy_cap", "flat_cap"]
PLANTED = planted()
SOLID = {t.id for t, cap, _ in PLANTED.values() if cap in ("multi_step_task_completion", "tool_calling_precision")}
NOISY = {t.id for t, cap, _ in PLANTED.values() if cap == "structured_data_reasoning"}
REF = re.compile(r"### (T\d+) trajectory (\S+) \(task")


def run_of(sampling: SamplingParams | None) -> int:
    return (sampling.seed or 0) % 1000 if sampling else 0


def labels_for(prompt: str, run: int) -> dict[str, dict[str, str]]:
    out = {}
    for ref, tid in REF.findall(prompt):
        out[ref] = {
            "solid_cap": "LACKING" if tid in SOLID else "PRESENT",
            "noisy_cap": "lacking" if (tid in NOISY and run < 7) else "present",  # passes in 7 of 10 runs
            "flat_cap": "LACKING",  # lacking everywhere: Δ = 0
        }
    return out


def good_reply(prompt: str, sampling: SamplingParams | None, messages: list[Message]) -> str:
    if "Contrast the successful" in prompt:
        return "Here is my analysis:\n```json\n" + json.dumps(DISCOVERY) + "\n```"
    return json.dumps({"labels": labels_for(prompt, run_of(sampling))})


def _run(tmp_path: Path):
    return write_run(tmp_path / "runs" / "llm", [*cleans(), *(t for t, _, _ in PLANTED.values())])


def _cfg(**kw) -> DiagnoseConfig:
    return DiagnoseConfig(analyst="canned", batch_size=10, **kw)


def _diagnose(run, client, **kw):
    return run_diagnose(run, _cfg(), {"canned": client}, tasks=TASKS, write_kinds=WRITE_KINDS, **kw)


def test_scripted_analyst_end_to_end(tmp_path: Path):
    run = _run(tmp_path)
    client = CannedClient(good_reply)
    result = _diagnose(run, client)
    data = result.file
    assert result.selected == ["solid_cap"]
    assert data.params.model_dump() == {"rho": 0.1, "delta": 0.2, "n_runs": 10, "k": 8}
    stats = {c.name: c.stats for c in data.candidates}
    assert stats["solid_cap"]["runs_passed"] == 10
    assert stats["solid_cap"]["delta_mean"] == pytest.approx(6 / 15)
    assert stats["solid_cap"]["delta_std"] == pytest.approx(0, abs=1e-12)
    assert set(stats["solid_cap"]["example_failed_trajectory_ids"]) == SOLID
    assert stats["noisy_cap"]["runs_passed"] == 7
    assert [r["passed"] for r in stats["noisy_cap"]["per_run"]] == [True] * 7 + [False] * 3
    assert stats["flat_cap"]["runs_passed"] == 0 and stats["flat_cap"]["delta_mean"] == 0
    assert {c.name: c.status for c in data.candidates} == {
        "solid_cap": "pending",
        "noisy_cap": "rejected",
        "flat_cap": "rejected",
    }
    assert stats["noisy_cap"]["discovery_example_task_ids"] == ["select"]
    assert any("not_a_task" in w for w in data.warnings)  # unknown example ids dropped, with a warning
    # files: discovery, ten label runs, capabilities
    out = run.root / "diagnose"
    assert json.loads((out / "discovery.json").read_text())["analyst"] == "canned"
    every = {t.id for t in [*cleans(), *(p[0] for p in PLANTED.values())]}
    for i in range(10):
        record = json.loads((out / "labels" / f"run_{i}.json").read_text())
        assert record["run"] == i and set(record["labels"]) == every
    # one discovery call + 10 runs x 3 batches (23 trajectories, 10 per batch), each batch a fresh conversation
    assert len(client.calls) == 1 + 30
    label_calls = [m for m, _ in client.calls if "You will label" in m[1].text]
    assert all(len(m) == 2 for m in label_calls)
    firsts = {REF.findall(m[1].text)[0][1] for m, s in client.calls[1:] if s and s.seed is not None and s.seed < 1000}
    assert len(firsts) > 1  # each run shuffles the order
    # the structural analyzer's findings are given to the analyst as evidence
    discovery_prompt = client.calls[0][0][1].text
    assert "reference check: multi_step_task_completion: never called" in discovery_prompt
    assert "- precondition_verification: deficit in 4 of 15 failed" in discovery_prompt
    manifest = json.loads(run.manifest_path.read_text())
    assert manifest["stages"]["diagnose"]["status"] == "done"
    assert manifest["stages"]["diagnose"]["summary"]["selected"] == ["solid_cap"]


def test_resume_redoes_only_missing_label_runs(tmp_path: Path):
    run = _run(tmp_path)
    _diagnose(run, CannedClient(good_reply))
    (run.root / "diagnose" / "labels" / "run_3.json").unlink()
    again = CannedClient(good_reply)
    result = _diagnose(run, again)
    assert len(again.calls) == 3  # one labeling run of three batches; discovery reused
    assert result.reused == {"discovery": True, "label_runs": [0, 1, 2, 4, 5, 6, 7, 8, 9]}
    assert result.selected == ["solid_cap"]
    fresh = CannedClient(good_reply)
    _diagnose(run, fresh, fresh=True)
    assert len(fresh.calls) == 31


def test_invalid_output_is_repaired(tmp_path: Path):
    run = _run(tmp_path)
    seen: list[str] = []

    def reply(prompt: str, sampling: SamplingParams | None, messages: list[Message]) -> str:
        last = messages[-1].text
        seen.append(last)
        if "Contrast the successful" in prompt:
            if len(messages) == 2:
                return "I think the agent lacks patience."  # not JSON
            if len(messages) == 4:
                return json.dumps({"candidates": [{"name": "Bad Name", "definition": DEF}]})  # not snake_case
            return json.dumps(DISCOVERY)
        labels = labels_for(prompt, run_of(sampling))
        if len(messages) == 2:  # first answer: one trajectory missing, one with a renamed capability
            first, second = sorted(labels)[:2]
            del labels[first]
            labels[second]["solid_capability"] = labels[second].pop("solid_cap")
            return json.dumps({"labels": labels})
        return json.dumps({"labels": labels})  # the follow-up: everything (extra rows are ignored)

    result = run_diagnose(
        run, _cfg(n_runs=2, k=2), {"canned": CannedClient(reply)}, tasks=TASKS, write_kinds=WRITE_KINDS
    )
    assert result.selected == ["solid_cap", "noisy_cap"]  # noisy_cap passes in runs 0-6
    assert any("reply contains no JSON object" in s for s in seen)
    assert any("not snake_case" in s for s in seen)
    missing = [s for s in seen if s.startswith("Some labels are missing")]
    assert missing and "lacks solid_cap" in missing[0] and "unknown names ['solid_capability']" in missing[0]
    assert "no labels for" in missing[0]


BAD_MODES = {
    "non_json": lambda prompt, labels: "Sorry, I cannot do that.",
    "unknown_names": lambda prompt, labels: json.dumps({"labels": {r: {"made_up": "LACKING"} for r in labels}}),
    "missing_trajectories": lambda prompt, labels: json.dumps({"labels": dict(list(labels.items())[:1])}),
    "bad_label_values": lambda prompt, labels: json.dumps(
        {"labels": {r: dict.fromkeys(NAMES, "MAYBE") for r in labels}}
    ),
}


@pytest.mark.parametrize("mode", sorted(BAD_MODES))
def test_bad_labeling_output_never_corrupts_capabilities(tmp_path: Path, mode: str):
    run = _run(tmp_path)
    _diagnose(run, CannedClient(good_reply))
    path = run.root / "diagnose" / "capabilities.json"
    before = path.read_bytes()

    def reply(prompt: str, sampling: SamplingParams | None, messages: list[Message]) -> str:
        if "Contrast the successful" in prompt:
            return json.dumps(DISCOVERY)
        return BAD_MODES[mode](prompt, labels_for(prompt, run_of(sampling)))

    client = CannedClient(reply)
    with pytest.raises(AnalystError, match="labeling run"):
        run_diagnose(run, _cfg(retries=2), {"canned": client}, tasks=TASKS, write_kinds=WRITE_KINDS, fresh=True)
    assert path.read_bytes() == before  # the previous file is intact
    json.loads(path.read_text())
    assert json.loads(run.manifest_path.read_text())["stages"]["diagnose"]["status"] == "failed"
    per_conversation: dict[str, int] = {}
    for messages, _ in client.calls:
        per_conversation[messages[1].text] = per_conversation.get(messages[1].text, 0) + 1
    assert max(per_conversation.values()) == 3  # bounded: 1 + retries calls per batch, then the stage fails


def test_bad_discovery_output_never_corrupts(tmp_path: Path):
    run = _run(tmp_path)
    _diagnose(run, CannedClient(good_reply))
    out = run.root / "diagnose"
    before = {p.name: p.read_bytes() for p in [out / "capabilities.json", out / "discovery.json"]}
    client = CannedClient(lambda prompt, sampling, messages: '{"candidates": []}')
    with pytest.raises(AnalystError, match="invalid discovery output 2 times"):
        run_diagnose(run, _cfg(retries=1), {"canned": client}, tasks=TASKS, write_kinds=WRITE_KINDS, fresh=True)
    assert len(client.calls) == 2
    assert {p.name: p.read_bytes() for p in [out / "capabilities.json", out / "discovery.json"]} == before


def test_infra_error_from_the_model_is_a_clear_stage_error(tmp_path: Path):
    from trace_rl.errors import InfraError

    def reply(prompt, sampling, messages):
        raise InfraError("connection", "server down")

    with pytest.raises(AnalystError, match="failed during discovery: connection: server down"):
        _diagnose(_run(tmp_path), CannedClient(reply))


def test_scripted_client_from_models_package_works_as_analyst(tmp_path: Path):
    scripted = pytest.importorskip("trace_rl.models.scripted")

    def fn(messages, tools):
        return good_reply(messages[1].text, None, messages)  # run 0 labels for every run

    client = scripted.ScriptedClient(fn, name="scripted-analyst")
    result = run_diagnose(_run(tmp_path), _cfg(n_runs=2, k=2), {"canned": client}, tasks=TASKS, write_kinds=WRITE_KINDS)
    assert set(result.selected) == {"solid_cap", "noisy_cap"}


def test_extract_json_and_schema():
    assert extract_json('{"a": 1}') == {"a": 1}
    assert extract_json('Sure!\n```json\n{"a": [1, 2]}\n```\nDone.') == {"a": [1, 2]}
    assert extract_json('The answer is {"a": {"b": 2}} as requested') == {"a": {"b": 2}}
    for bad in ("", "no json here", "[1, 2]"):
        with pytest.raises(ValueError):
            extract_json(bad)
    assert Label.parse("n/a") == Label.NA and Label.parse(" Lacking ") == Label.LACKING
    with pytest.raises(ValueError):
        Label.parse("MAYBE")
    with pytest.raises(ValueError, match="snake_case"):
        CandidateSpec(name="flightRebooking", definition=DEF)
    with pytest.raises(ValueError, match="duplicate"):
        DiscoveryOutput.model_validate({"candidates": [{"name": "a_b", "definition": DEF}] * 2})


def test_discovery_is_capped_at_max_candidates(tmp_path: Path):
    result = run_diagnose(
        _run(tmp_path),
        _cfg(n_runs=1, k=1, max_candidates=2),
        {"canned": CannedClient(good_reply)},
        tasks=TASKS,
        write_kinds=WRITE_KINDS,
    )
    assert [c.name for c in result.file.candidates] != [] and len(result.file.candidates) == 2
    assert any("kept 2, dropped flat_cap" in w for w in result.file.warnings)
