"""The LLM analyst fitted to its context: policy and goal in the prompts, whole tool results, chunked labelling, the
refusal before any call, failures that are data or one line, and `--show-prompts`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from trace_rl.artifacts.capabilities import CandidateSpec, Label
from trace_rl.config.diagnose import DiagnoseConfig
from trace_rl.diagnose.chunks import combine, events_of, goal_text, shorten_record, split_units
from trace_rl.diagnose.items import AnalystError, DiagnosisItem
from trace_rl.diagnose.stage import run_diagnose
from trace_rl.errors import InfraError, UserError
from trace_rl.models.base import SamplingParams
from trace_rl.types import Message, Task

from .diagnose_helpers import TASKS, WRITE_KINDS, CannedClient, cleans, planted, play, register_desk, write_run

DEF = "The agent does the thing this capability names, every time the task requires it; lacking when it does not."
DISCOVERY = {
    "candidates": [
        {"name": "solid_cap", "definition": DEF, "example_task_ids": ["multi"]},
        {"name": "other_cap", "definition": DEF, "example_task_ids": ["renew"]},
    ]
}
NAMES = ["solid_cap", "other_cap"]
REF = re.compile(r"### (T\d+) trajectory (\S+) \(task \S+\)[^\n]*?(?: — part (\d+) of (\d+))?(?: \(|\n)")
POLICY = "Desk policy: never lend to a member whose fines exceed 10.00. Confirm every payment first."
GOAL = {"instructions": {"reason_for_call": "You want to renew loan C11.", "known_info": "Your email is ann@x.io."}}


def labels_for(prompt: str, lacking: set[str] | None = None) -> dict[str, dict[str, str]]:
    return {
        ref: {"solid_cap": "LACKING" if tid in (lacking or set()) else "PRESENT", "other_cap": "NA"}
        for ref, tid, _, _ in REF.findall(prompt)
    }


def good(prompt: str, sampling: SamplingParams | None, messages: list[Message]) -> str:
    if "Contrast the successful" in prompt:
        return json.dumps(DISCOVERY)
    return json.dumps({"labels": labels_for(prompt)})


def _tasks() -> dict[str, Task]:
    return {k: t.model_copy(update={"user_scenario": GOAL}) for k, t in TASKS.items()}


def _run(tmp_path: Path, extra=()):
    return write_run(tmp_path / "runs" / "b", [*cleans(), *(t for t, _, _ in planted().values()), *extra])


def _diagnose(run, client, **cfg):
    cfg = DiagnoseConfig(analyst="canned", **{"n_runs": 1, "k": 1, **cfg})
    return run_diagnose(run, cfg, {"canned": client}, tasks=_tasks(), write_kinds=WRITE_KINDS)


def _long_trajectory() -> object:
    """A failed 'multi' trajectory of 40+ events: many lookups, then a wrong payment at the very end."""
    steps = [("call", "get_member_details", {"member_id": "M2"}), ("say", "Still checking your account.")] * 12
    steps += [("call", "pay_fine", {"member_id": "M2", "amount": 4.75}), ("say", "Paid everything. LAST-EVENT")]
    return play("long_one", "multi", steps, success=False)


# -- prompts: policy, goal, whole tool results ---------------------------------------------------------------------
def _with_policy(trajectories, policy: str):
    return [
        t.model_copy(update={"messages": [Message(role="system", content=policy), *t.messages[1:]]})
        for t in trajectories
    ]


def test_prompts_show_policy_and_goal(tmp_path: Path):
    every = [*cleans(), *(t for t, _, _ in planted().values())]
    run = write_run(tmp_path / "runs" / "policy", _with_policy(every, POLICY))
    client = CannedClient(good)
    _diagnose(run, client)
    discovery = client.calls[0][0][1].text
    labeling = [m[1].text for m, _ in client.calls[1:]]
    for text in [discovery, *labeling]:
        assert "<policy>\n" + POLICY in text  # the agent's policy (its system prompt), once
        assert text.count("<policy>") == 1
        assert "user's goal: reason_for_call: You want to renew loan C11. | known_info: Your email is ann@x.io." in text
    assert goal_text(None) == "(not recorded)"
    assert goal_text(Task(id="x", user_scenario="Just a plain goal.")) == "Just a plain goal."


def test_tool_results_are_whole_and_cut_only_at_record_boundaries():
    records = [
        {"reservation_id": f"R{i}", "flights": [{"no": f"HAT{i:03d}", "date": "2024-05-20"}] * 3} for i in range(30)
    ]
    result = json.dumps(records)
    item = DiagnosisItem(play("big", "renew", [("say", "x")], success=False))
    item.trajectory.messages.append(Message(role="tool", tool_call_id="c9", name="search", content=result))
    shown = [e for e in events_of(item, 100) if e.startswith("[result search]")]
    assert shown == [f"[result search] {result}"]  # whole, although far beyond max_content_chars
    cut = shorten_record(shown[0], 1500)
    assert len(cut) <= 1600 and cut.startswith("[result search] [")
    kept = json.loads(cut[len("[result search] ") :])
    assert kept[-1].startswith("…[") and "more records omitted" in kept[-1]
    assert kept[:-1] == records[: len(kept) - 1] and len(kept) > 2  # every kept record is whole
    nested = shorten_record("[result get] " + json.dumps({"user": "u1", "reservations": records}), 1200)
    value = json.loads(nested[len("[result get] ") :])
    assert value["user"] == "u1" and all(r in records for r in value["reservations"] if isinstance(r, dict))
    lines = shorten_record("[result log] " + "\n".join(f"line {i} " + "x" * 50 for i in range(100)), 500)
    assert "more lines omitted" in lines and all(ln.endswith("x" * 50) for ln in lines.splitlines()[:-1])


# -- chunking ------------------------------------------------------------------------------------------------------
def test_long_trajectory_is_labelled_in_parts_covering_every_event(tmp_path: Path):
    long = _long_trajectory()
    run = _run(tmp_path, [long])
    parts_seen: dict[int, str] = {}

    def reply(prompt, sampling, messages):
        if "Contrast the successful" in prompt:
            return json.dumps(DISCOVERY)
        out = {}
        for ref, tid, part, _ in REF.findall(prompt):
            block = prompt.split(f"### {ref} trajectory ", 1)[1].split("\n### ", 1)[0]
            if tid == long.id:
                parts_seen[int(part or 1)] = block
            lack = tid == long.id and "LAST-EVENT" in block  # the lack shows only in the last part
            out[ref] = {"solid_cap": "LACKING" if lack else "PRESENT", "other_cap": "NA"}
        return json.dumps({"labels": out})

    client = CannedClient(reply)
    result = _diagnose(run, client, context_tokens=1_400, max_tokens=128)
    assert len(parts_seen) >= 2
    item = DiagnosisItem(long, _tasks()["multi"])
    events = events_of(item, DiagnoseConfig().max_content_chars)
    shown = [ln for k in sorted(parts_seen) for ln in parts_seen[k].splitlines()[2:] if not ln.startswith("reference")]
    assert shown == events  # every event, once, in order, none cut
    for _, sampling in client.calls:
        assert sampling.max_tokens <= 128
    row = next(t for t in result.file.trajectories if t["id"] == long.id)
    assert row["lacking"] == ["solid_cap"]  # LACKING in one part -> LACKING for the trajectory
    assert combine([Label.PRESENT, Label.NA]) == Label.PRESENT and combine([Label.NA]) == Label.NA


def test_split_units_fit_their_room():
    item = DiagnosisItem(_long_trajectory(), _tasks()["multi"])
    units = split_units(item, 300, lambda s: len(s) // 3 + 1, max_content_chars=500)
    assert len(units) >= 3 and all(len(u.text("T1")) // 3 + 1 <= 300 for u in units)
    assert sum(len(u.events) for u in units) == len(events_of(item, 500))


# -- refusal before any call ---------------------------------------------------------------------------------------
def test_prompt_that_cannot_fit_is_refused_before_any_call(tmp_path: Path):
    run = _run(tmp_path)
    client = CannedClient(good)
    with pytest.raises(UserError, match="cannot fit its discovery prompt") as info:
        _diagnose(run, client, context_tokens=1_000, max_tokens=256)
    assert client.calls == [] and "\n" not in str(info.value)
    assert "takes" in str(info.value) and "1,000 tokens" in str(info.value)
    huge = POLICY * 400  # the policy alone overflows the context
    every = [*cleans(), *(t for t, _, _ in planted().values())]
    run2 = write_run(tmp_path / "runs" / "huge", _with_policy(every, huge))
    client2 = CannedClient(good)
    with pytest.raises(UserError, match="cannot fit its discovery prompt"):
        _diagnose(run2, client2, context_tokens=8_000, max_tokens=256)
    assert client2.calls == []


def test_labeling_prompt_that_cannot_fit_is_refused_before_its_first_call():
    import asyncio

    from trace_rl.diagnose.llm import LLMAnalyst

    client = CannedClient(good)
    analyst = LLMAnalyst(client, DiagnoseConfig(analyst="canned", context_tokens=4_000, max_tokens=256))
    items = [DiagnosisItem(t, _tasks()[t.task_id]) for t in cleans()]
    wordy = [CandidateSpec(name=f"cap_{i}", definition=DEF * 8) for i in range(10)]  # ~9k chars of dictionary
    with pytest.raises(
        UserError, match=r"cannot fit its labeling prompt: the fixed part \(instructions, policy, dictionary\)"
    ):
        asyncio.run(analyst.label(items, wordy))
    assert client.calls == []


# -- analyst failures ----------------------------------------------------------------------------------------------
def test_garbage_for_one_batch_is_a_recorded_per_item_failure(tmp_path: Path):
    run = _run(tmp_path)
    victim = "desk/train/stop_early_1"

    def reply(prompt, sampling, messages):
        if "Contrast the successful" in prompt:
            return json.dumps(DISCOVERY)
        if victim in prompt:
            return "I refuse to answer in JSON."
        return json.dumps({"labels": labels_for(prompt)})

    result = _diagnose(run, CannedClient(reply), batch_size=3, retries=1)
    record = json.loads((run.root / "diagnose" / "labels" / "run_0.json").read_text())
    assert victim not in record["labels"] and len(record["labels"]) >= 20 - 3
    assert any("left unlabelled" in w and victim in w for w in result.file.warnings)
    again = _diagnose(run, CannedClient(good), batch_size=3, retries=1)  # a partial run is redone on a rerun
    assert again.reused == {"discovery": True, "label_runs": []}
    assert victim in json.loads((run.root / "diagnose" / "labels" / "run_0.json").read_text())["labels"]


def test_repair_turns_keep_the_newest_exchange_within_the_context():
    import asyncio

    from trace_rl.diagnose.llm import LLMAnalyst

    analyst = LLMAnalyst(CannedClient(good), DiagnoseConfig(analyst="canned", context_tokens=1_000, max_tokens=100))
    budget = asyncio.run(analyst.budget())
    base = [Message(role="system", content="s"), Message(role="user", content="x" * 1_500)]
    exchanges = [("old reply " * 200, "fix one"), ("new reply " * 200, "fix two")]
    convo = analyst._follow_up(base, exchanges, budget)
    assert [m.text for m in convo[-1:]] == ["fix two"] and "fix one" not in [m.text for m in convo]
    assert convo[-2].text.startswith("new reply") and convo[-2].text.endswith("…[reply cut]")
    assert budget.messages_tokens(convo) <= budget.prompt_room


def test_infra_error_connection_is_one_line_and_context_overflow_is_per_item(tmp_path: Path):
    run = _run(tmp_path)
    calls = {"n": 0}

    def down(prompt, sampling, messages):
        if "Contrast the successful" in prompt:
            return json.dumps(DISCOVERY)
        calls["n"] += 1
        raise InfraError("connection", "server down")

    with pytest.raises(AnalystError, match="failed during labeling run 0: connection: server down"):
        _diagnose(run, CannedClient(down), batch_size=3)
    assert calls["n"] == 1  # systemic: no further batches

    def overflow(prompt, sampling, messages):
        if "Contrast the successful" in prompt:
            return json.dumps(DISCOVERY)
        if "stop_early_2" in prompt:
            raise InfraError("context_length", "prompt too long")
        return json.dumps({"labels": labels_for(prompt)})

    result = _diagnose(run, CannedClient(overflow), batch_size=3)
    assert any("left unlabelled" in w and "context_length" in w for w in result.file.warnings)


# -- the command: one line, --show-prompts, the real tiny model ------------------------------------------------------
def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    from trace_rl.cli.app import main

    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_scripted_analyst_out_of_script_is_one_line(tmp_path: Path, capsys):
    register_desk()
    run = _run(tmp_path)
    code, out, err = _cli(["diagnose", "--run", str(run.root), "--analyst", "scripted"], capsys)
    assert code == 2 and "Traceback" not in err + out
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "ran out of responses" in lines[0] and "script:" in lines[0]


def test_show_prompts_writes_the_prompts_without_calling_the_model(tmp_path: Path, capsys):
    register_desk()
    run = _run(tmp_path)
    code, out, err = _cli(["diagnose", "--run", str(run.root), "--analyst", "scripted", "--show-prompts"], capsys)
    assert code == 0, err  # the empty script would fail on the first call: none was made
    folder = run.root / "diagnose" / "prompts"
    index = json.loads((folder / "index.json").read_text())
    assert index["prompts"][0]["name"] == "discovery" and "no model called" in out
    labeled = [t for p in index["prompts"][1:] for t in p["trajectories"]]
    assert len(labeled) == 23 and "structural" in index["dictionary"]
    assert "Contrast the successful" in (folder / "discovery.txt").read_text()
    assert not (run.root / "diagnose" / "capabilities.json").exists()
    for analyzer in ("structural", "behavioral"):  # the no-LLM analyzers send no prompts: one line, no model built
        code, _, err = _cli(["diagnose", "--run", str(run.root), "--analyst", analyzer, "--show-prompts"], capsys)
        assert code == 2 and f"the {analyzer} analyzer sends no prompts" in err and "Traceback" not in err


def test_tiny_model_through_the_diagnose_command(tmp_path: Path, capsys):
    """The real tiny model (2,048-token context, its own tokenizer): the prompts fit as its tokenizer counts them;
    its random output fails discovery with one line, never a traceback."""
    pytest.importorskip("transformers")
    register_desk()
    run = _run(tmp_path)
    from trace_rl.artifacts.capabilities import DiscoveryRecord
    from trace_rl.artifacts.store import atomic_write_json

    short = [CandidateSpec(name=n, definition=DEF) for n in NAMES]
    atomic_write_json(run.discovery, DiscoveryRecord(analyst="tiny", fingerprint="x", candidates=short))
    config = tmp_path / "tiny.yaml"  # the evidence table alone would fill the tiny context; one quick attempt
    config.write_text("diagnose:\n  structural_evidence: false\n  retries: 0\n  n_runs: 1\n")
    base = ["diagnose", "--run", str(run.root), "--analyst", "tiny", "--max-tokens", "64", "--config", str(config)]
    code, _, err = _cli([*base, "--show-prompts"], capsys)
    assert code == 0, err
    index = json.loads((run.root / "diagnose" / "prompts" / "index.json").read_text())
    assert index["context_tokens"] == 2048 and "tokenizer" in index["counted"]
    assert all(p["tokens"] <= 2048 - 64 for p in index["prompts"])
    assert sum(len(p["trajectories"]) for p in index["prompts"][1:]) >= 23
    code, _, err = _cli(base, capsys)
    assert code == 2 and "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("Loading weights")]
    assert len(lines) == 1 and "invalid discovery output" in lines[0], err


REAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "real_runs"
GROK = REAL / "tau2_airline_grok-4-fast-reasoning.json.gz"


@pytest.mark.skipif(not GROK.exists(), reason=f"real runs not present ({GROK})")
def test_tiny_model_on_a_real_run_is_refused_before_any_call(tmp_path: Path, capsys):
    """The issue's case: `--analyst tiny` on a real airline run (policy alone ≈ 5k of the tiny model's tokens)."""
    pytest.importorskip("transformers")
    code, _, err = _cli(["import", str(GROK), "--run", str(tmp_path / "grok")], capsys)
    assert code == 0, err
    code, _, err = _cli(["diagnose", "--run", str(tmp_path / "grok"), "--analyst", "tiny"], capsys)
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("Loading weights")]
    assert len(lines) == 1 and "cannot fit its discovery prompt" in lines[0] and "2,048 tokens" in lines[0]
