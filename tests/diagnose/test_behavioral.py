"""The behavioral analyzer (no LLM, no gold actions): each rule's LACKING / PRESENT / NA cases, the contrastive
completion threshold, determinism, the capability types synthesis gives its names, and the diagnose stage on a run
whose tasks have no gold actions (the structural default gives way to it, with a warning)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from trace_rl.artifacts.capabilities import Label
from trace_rl.config import load_config
from trace_rl.config.diagnose import DiagnoseConfig
from trace_rl.diagnose.analyst import make_analyst
from trace_rl.diagnose.behavioral import (
    ACTING,
    CAPABILITIES,
    COMPLETION,
    DEFINITIONS,
    FORMATTING,
    RECOVERY,
    BehavioralAnalyst,
    analyze_batch,
)
from trace_rl.diagnose.calls import heuristic_is_write
from trace_rl.diagnose.items import DiagnosisItem
from trace_rl.diagnose.stage import DiagnoseStage, run_diagnose
from trace_rl.diagnose.structural import StructuralAnalyst
from trace_rl.stage import StageContext
from trace_rl.synthesize.design import capability_type
from trace_rl.types import Capability, Message, RewardInfo, TerminationReason, ToolCall, Trajectory

from .diagnose_helpers import write_run

STOP = TerminationReason.AGENT_STOP


def traj(
    tid: str,
    steps: list[tuple[Any, ...]],
    *,
    success: bool,
    env: str = "game",
    task: str = "t1",
    termination: TerminationReason = STOP,
    done: bool | None = None,
) -> Trajectory:
    """Steps: ("ok", name, args) | ("err", name, args, text) | ("bad", name, raw) | ("say", text)."""
    messages = [Message(role="user", content="Play the game.")]
    for i, step in enumerate(steps):
        if step[0] == "say":
            messages.append(Message(role="assistant", content=step[1]))
            continue
        cid = f"c{i}"
        if step[0] == "bad":
            call = ToolCall(id=cid, name=step[1], parse_error="not valid JSON", raw=step[2])
            text, error = f"Error: could not parse the arguments of '{step[1]}': not valid JSON", True
        else:
            call = ToolCall(id=cid, name=step[1], arguments=step[2])
            text, error = (step[3], True) if step[0] == "err" else ("ok", False)
        messages.append(Message(role="assistant", tool_calls=[call]))
        messages.append(Message(role="tool", tool_call_id=cid, name=call.name, content=text, error=error))
    details = {} if done is None else {"done": done}
    return Trajectory(
        id=f"{env}/train/{tid}",
        env=env,
        split="train",
        task_id=task,
        trial=0,
        seed=0,
        messages=messages,
        reward=1.0 if success else 0.0,
        success=success,
        reward_info=RewardInfo(reward=1.0 if success else 0.0, details=details),
        termination=termination,
    )


def ok(n: int, name: str = "act") -> list[tuple[Any, ...]]:
    return [("ok", name, {"step": i}) for i in range(n)]


WIN = traj("win", [*ok(2), ("say", "done")], success=True, done=True)


def labels(*trajectories: Trajectory) -> dict[str, dict[str, Label]]:
    return {tid.split("/")[-1]: r.labels() for tid, r in analyze_batch(trajectories).items()}


def test_tool_call_formatting():
    bad = traj("bad", [("bad", "act", "{guess: 4"), *ok(2), ("say", "x")], success=False)
    unknown = traj("unknown", [("err", "jump", {}, "Error: Tool 'jump' not found."), *ok(2)], success=False)
    invalid = traj(
        "invalid",
        [("err", "act", {"guess": 42}, "Error: invalid action: act: guess: Input should be less than 10"), *ok(2)],
        success=False,
    )
    missing = traj(
        "missing", [("err", "f", {}, "Error: TypeError: f() missing 1 required positional argument")], success=False
    )
    refused = traj("refused", [("err", "act", {"step": 9}, "Error: the door is locked"), *ok(2)], success=False)
    prose = traj("prose", [("say", "I think it is 4.")], success=False, env="chat")
    got = labels(WIN, bad, unknown, invalid, missing, refused, prose)
    assert {k: got[k][FORMATTING] for k in got} == {
        "win": Label.PRESENT,
        "bad": Label.LACKING,
        "unknown": Label.LACKING,
        "invalid": Label.LACKING,
        "missing": Label.LACKING,
        "refused": Label.PRESENT,  # an error about the world, not about the call
        "prose": Label.NA,
    }


def test_acting_through_tools():
    prose = traj("prose", [("say", "It is 4.")], success=False)
    chat = traj("chat", [("say", "Hello.")], success=True, env="chat")  # nobody in `chat` calls a tool
    got = labels(WIN, prose, chat)
    assert (got["win"][ACTING], got["prose"][ACTING], got["chat"][ACTING]) == (Label.PRESENT, Label.LACKING, Label.NA)
    assert {got["prose"][c] for c in (FORMATTING, COMPLETION, RECOVERY)} == {Label.NA}
    notes = analyze_batch([WIN, prose])[prose.id].notes()
    assert notes == [f"{ACTING}: made no tool call: answered in prose"]


def test_completion_contrasts_with_the_fewest_calls_of_a_success():
    short = traj("short", [*ok(1), ("say", "done")], success=False)
    enough = traj("enough", [*ok(2), ("say", "done")], success=False)
    cut = traj("cut", ok(1), success=False, termination=TerminationReason.MAX_STEPS)  # a limit, not a stop
    errors_only = traj("errs", [("err", "act", {"step": 0}, "Error: nope"), ("ok", "act", {"step": 1})], success=False)
    got = labels(WIN, short, enough, cut, errors_only)
    assert got["short"][COMPLETION] == Label.LACKING
    assert got["enough"][COMPLETION] == Label.PRESENT
    assert got["cut"][COMPLETION] == Label.PRESENT
    assert got["errs"][COMPLETION] == Label.LACKING  # errored calls do not count: 1 successful of the 2 needed
    assert got["win"][COMPLETION] == Label.PRESENT
    # the threshold is the fewest over the successes, and the task's own successes come first
    slow_win = traj("slow", [*ok(4), ("say", "done")], success=True)
    other_win = traj("other_win", [*ok(1), ("say", "done")], success=True, task="t2")
    other = traj("other", [*ok(1), ("say", "done")], success=False, task="t2")
    fresh = traj("fresh", [("say", "no")], success=False, task="t3")  # no calls: NA, acting is the lack
    lone = traj("lone", [*ok(1), ("say", "x")], success=False, task="t3")  # no success of t3: the env's fewest (1)
    got = labels(WIN, slow_win, short, enough, other_win, other, fresh, lone)
    assert got["short"][COMPLETION] == Label.LACKING and got["enough"][COMPLETION] == Label.PRESENT
    assert got["other"][COMPLETION] == Label.PRESENT and got["lone"][COMPLETION] == Label.PRESENT
    assert got["fresh"][COMPLETION] == Label.NA
    # with no success in the batch the call-count contrast is off
    assert labels(short)["short"][COMPLETION] == Label.PRESENT


def test_completion_by_the_done_flag():
    undone = traj("undone", [*ok(3), ("say", "I give up")], success=False, done=False)
    assert labels(WIN, undone)["undone"][COMPLETION] == Label.LACKING
    no_done_win = traj("win2", [*ok(2), ("say", "done")], success=True)  # no done flag recorded
    assert labels(no_done_win, undone)["undone"][COMPLETION] == Label.PRESENT
    limit = traj("limit", ok(3), success=False, done=False, termination=TerminationReason.TOO_MANY_ERRORS)
    assert labels(WIN, limit)["limit"][COMPLETION] == Label.PRESENT
    note = analyze_batch([WIN, undone])[undone.id].notes()
    assert note == [
        f"{COMPLETION}: ended (agent_stop) while the environment was not done; successful episodes reached done"
    ]


def test_error_recovery():
    fixed = traj("fixed", [("err", "act", {"g": 42}, "Error: invalid action"), ("ok", "act", {"g": 4})], success=True)
    repeat = traj(
        "repeat",
        [
            ("err", "act", {"g": 42}, "Error: invalid action"),
            ("err", "act", {"g": 42}, "Error: invalid action"),
            *ok(2),
        ],
        success=False,
    )
    gave_up = traj(
        "gave_up", [*ok(2), ("err", "act", {"g": 1}, "Error: locked"), ("say", "It is locked.")], success=False
    )
    over = traj("over", [*ok(2), ("err", "act", {}, "Error: the episode is over (done); reply.")], success=True)
    bad_twice = traj("bad_twice", [("bad", "act", "{g: 4"), ("bad", "act", "{g: 4"), *ok(2)], success=False)
    bad_fixed = traj("bad_fixed", [("bad", "act", "{g: 4"), ("bad", "act", "{g: 5"), *ok(2)], success=False)
    got = labels(WIN, fixed, repeat, gave_up, over, bad_twice, bad_fixed)
    assert {k: got[k][RECOVERY] for k in got} == {
        "win": Label.NA,
        "fixed": Label.PRESENT,
        "repeat": Label.LACKING,
        "gave_up": Label.LACKING,
        "over": Label.NA,  # no call recovers from the end of the episode
        "bad_twice": Label.LACKING,  # the same raw text again
        "bad_fixed": Label.PRESENT,
    }
    kinds = {f.kind for f in analyze_batch([WIN, repeat, gave_up])[repeat.id].findings}
    assert kinds == {"repeated_failed_call", "malformed_call"}


def test_deterministic_and_order_free():
    batch = [
        WIN,
        traj("a", [("say", "x")], success=False),
        traj("b", [*ok(1), ("err", "act", {}, "Error: x")], success=False),
        traj("c", [("bad", "act", "{"), *ok(2)], success=True),
    ]
    first = {k: r.labels() for k, r in analyze_batch(batch).items()}
    assert first == {k: r.labels() for k, r in analyze_batch(list(reversed(batch))).items()}
    analyst = BehavioralAnalyst()
    items = [DiagnosisItem(t) for t in batch]
    specs = asyncio.run(analyst.discover(items)).candidates
    assert [s.name for s in specs] == list(CAPABILITIES)
    assert specs[[s.name for s in specs].index(ACTING)].example_task_ids == ["t1"]
    runs = [asyncio.run(analyst.label(items, specs, run=r, seed=r)).labels for r in range(3)]
    assert runs[0] == runs[1] == runs[2] == {t.id: first[t.id] for t in batch}
    assert analyst.report(items[1]).user_fault is None and analyst.report(items[1]).notes()


def test_capability_types_for_synthesis():
    types = {n: capability_type(Capability(name=n, definition=DEFINITIONS[n]))[0] for n in CAPABILITIES}
    assert types == {
        FORMATTING: "tool_calling_precision",
        ACTING: "multi_step_completion",
        COMPLETION: "multi_step_completion",
        RECOVERY: "tool_calling_precision",
    }


def test_make_analyst_and_config():
    cfg = DiagnoseConfig(analyst="behavioral")
    assert cfg.is_deterministic and not cfg.is_structural and (cfg.runs, cfg.min_passes) == (1, 1)
    assert DiagnoseConfig().is_deterministic and not DiagnoseConfig(analyst="openai:x").is_deterministic
    warnings: list[str] = []
    assert isinstance(make_analyst(cfg, None, [], heuristic_is_write, 5, warnings), BehavioralAnalyst)
    assert warnings == []
    assert isinstance(make_analyst(DiagnoseConfig(), None, [], heuristic_is_write, 5, warnings), StructuralAnalyst)
    assert isinstance(make_analyst(DiagnoseConfig(), None, [], heuristic_is_write, 0, warnings), BehavioralAnalyst)
    assert warnings and "behavioral analyzer" in warnings[0]


def _no_gold_run(tmp_path: Path, name: str):
    """An imported-looking run: its environment cannot be loaded, so no task has gold actions."""
    wins = [traj(f"win{i}", [*ok(2), ("say", "done")], success=True, env="nowhere", done=True) for i in range(4)]
    prose = [traj(f"prose{i}", [("say", "It is 4.")], success=False, env="nowhere") for i in range(3)]
    short = [traj(f"short{i}", [*ok(1), ("say", "done")], success=False, env="nowhere", done=False) for i in range(2)]
    return write_run(tmp_path / "runs" / name, [*wins, *prose, *short], env={"name": "nowhere"})


def test_stage_without_gold_actions_uses_the_behavioral_analyzer(tmp_path: Path):
    run = _no_gold_run(tmp_path, "imported")
    data = run_diagnose(run, DiagnoseConfig()).file
    assert data.analyst == "behavioral" and data.n_trajectories["with_reference"] == 0
    assert any("no diagnosed task has gold actions: the behavioral analyzer" in w for w in data.warnings)
    selected = {c.name: c.stats for c in data.selected}
    assert set(selected) == {ACTING, COMPLETION}
    for stats in selected.values():
        assert stats["delta_mean"] >= 0.2 and stats["cov_mean"] >= 0.1
    rejected = {c.name for c in data.candidates if c.status == "rejected"}
    assert rejected == {FORMATTING, RECOVERY}
    by_id = {t["id"]: t for t in data.trajectories}
    assert by_id["nowhere/train/prose0"]["lacking"] == [ACTING]
    assert by_id["nowhere/train/short0"]["lacking"] == [COMPLETION] and by_id["nowhere/train/short0"]["reasons"]
    assert (run.root / "diagnose" / "capabilities.json").exists()


def test_stage_named_behavioral_builds_no_model(tmp_path: Path):
    run = _no_gold_run(tmp_path, "named")
    config = load_config(None, {"diagnose.analyst": "behavioral"})
    result = DiagnoseStage().run(StageContext(config, run, echo=lambda *_: None), config.diagnose)
    assert result.file.analyst == "behavioral" and set(result.selected) == {ACTING, COMPLETION}
    assert not any("behavioral analyzer labels" in w for w in result.file.warnings)  # chosen, not a fallback


def test_openenv_guess_env_trajectories():
    pytest.importorskip("openenv")
    from trace_rl.config import EnvConfig
    from trace_rl.engine.text_driver import EpisodeSpec, domain_agent, run_episode
    from trace_rl.envs.registry import load_domain
    from trace_rl.models.scripted import ScriptedClient

    guess = Path(__file__).parents[1] / "envs" / "openenv" / "guess_env"
    domain = load_domain(f"openenv:{guess}", EnvConfig(name="openenv", options={"n_train": 2}))

    def act(**arguments: Any) -> dict[str, Any]:
        return {"tool_calls": [{"name": "act", "arguments": arguments}]}

    def play(domain: Any, task: Any, script: list[Any]) -> Trajectory:
        env = domain.make_env()
        agent = domain_agent(domain, ScriptedClient(script), tools=env.tool_schemas())
        spec = EpisodeSpec(env=domain.name, split="train", seed=int(task.metadata["seed"]))
        return asyncio.run(run_episode(env=env, task=task, agent=agent, user=domain.scripted_user(task), spec=spec))

    task = domain.tasks("train")[1]
    target = (7 * 1 + 3) % 10
    wrong = (target + 1) % 10
    wins = [play(domain, task, [act(guess=target), "It is the digit."]) for _ in range(2)]
    stop = play(domain, task, [act(guess=wrong), "I give up."])
    prose = play(domain, task, ["It is 4."])
    invalid = play(domain, task, [act(guess=42), "Done."])
    batch = [
        t.model_copy(update={"id": f"{t.id}/{n}"})
        for n, t in zip(["w0", "w1", "stop", "prose", "invalid"], [*wins, stop, prose, invalid], strict=True)
    ]
    assert [t.success for t in batch] == [True, True, False, False, False]
    got = {t.id.split("/")[-1]: r.labels() for t, r in zip(batch, analyze_batch(batch).values(), strict=True)}
    assert got["w0"] == {
        FORMATTING: Label.PRESENT,
        ACTING: Label.PRESENT,
        COMPLETION: Label.PRESENT,
        RECOVERY: Label.NA,
    }
    assert got["stop"][COMPLETION] == Label.LACKING  # not done, while the wins were
    assert got["prose"][ACTING] == Label.LACKING
    assert got["invalid"][FORMATTING] == Label.LACKING and got["invalid"][RECOVERY] == Label.LACKING


def test_acting_applies_where_the_environment_offers_tools_though_nobody_called_one(tmp_path: Path):
    prose = [traj(f"p{i}", [("say", "It is 4.")], success=False) for i in range(2)]
    assert {r.labels()[ACTING] for r in analyze_batch(prose).values()} == {Label.NA}
    assert {r.labels()[ACTING] for r in analyze_batch(prose, ["game"]).values()} == {Label.LACKING}
    analyst = BehavioralAnalyst()
    items = [DiagnosisItem(t, offers_tools=True) for t in prose]
    result = asyncio.run(analyst.label(items, asyncio.run(analyst.discover(items)).candidates))
    assert {row[ACTING] for row in result.labels.values()} == {Label.LACKING}

    pytest.importorskip("openenv")
    from trace_rl.diagnose.stage import load_tasks

    guess = Path(__file__).parents[1] / "envs" / "openenv" / "guess_env"
    name = f"openenv:{guess}"
    run = write_run(tmp_path / "runs" / "guess", [], env={"name": name, "options": {"n_train": 2}})
    info = load_tasks(run, {name: ["train"]})
    assert info.tool_envs == {name} and not info.warnings
