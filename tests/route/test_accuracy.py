"""Routing accuracy: confusion matrix and oracle figures by hand, then `run_route` over a run whose adapters come
from a synthesized capability environment and a library-family stand-in (scripted router; the tiny model's real
label logits; oracle rollouts with a scripted policy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trace_rl.artifacts.evaluation import RoutedTask, RoutingAccuracy
from trace_rl.artifacts.router import BASE, read_router
from trace_rl.artifacts.store import RunDir
from trace_rl.config import ModelConfig, RouteConfig, TraceConfig
from trace_rl.errors import UserError
from trace_rl.route.accuracy import (
    HeldOutSet,
    accuracy_report,
    confusion_matrix,
    family_ceiling,
    format_confusion,
    oracle_figures,
)
from trace_rl.route.stage import run_route, summary_lines
from trace_rl.routing.router import ScriptedRouter
from trace_rl.types import Task


def test_confusion_and_accuracy_by_hand() -> None:
    labels = ["a", "b", BASE]
    truth = ["a", "a", "a", "b", "b"]
    predicted = ["a", "b", BASE, "b", "b"]
    assert confusion_matrix(truth, predicted, labels) == [[1, 1, 1], [0, 2, 0], [0, 0, 0]]
    pairs = enumerate(zip(truth, predicted, strict=True))
    tasks = [RoutedTask(task_id=f"e/{i}", truth=t, predicted=p) for i, (t, p) in pairs]
    result = accuracy_report(tasks, labels, samples=300)
    assert result.accuracy.value == pytest.approx(3 / 5) and result.base_rate == pytest.approx(1 / 5)
    assert 0.0 <= result.accuracy.low <= 0.6 <= result.accuracy.high <= 1.0
    assert result.details["per_capability"]["a"] == {"tasks": 3, "correct": 1, "accuracy": 1 / 3, "to_base": 1}
    text = format_confusion(result)
    assert text.splitlines()[1].split() == ["a", "1", "1", "1"] and len(text.splitlines()) == 3  # empty base row
    # a prediction outside the labels gets its own column rather than vanishing
    odd = accuracy_report([RoutedTask(task_id="x", truth="a", predicted="zzz")], labels)
    assert odd.labels[-1] == "zzz" and odd.confusion[0][-1] == 1


def test_oracle_figures_by_hand() -> None:
    tasks = [RoutedTask(task_id="t1", truth="a", predicted="a"), RoutedTask(task_id="t2", truth="b", predicted=BASE)]
    outcomes = {("t1", "a"): (2, 2), ("t1", BASE): (0, 2), ("t2", "b"): (1, 2), ("t2", BASE): (0, 2),
                ("t1", "b"): (1, 2), ("t2", "a"): (0, 2)}  # fmt: skip  # data: packed, not one key per line
    means, routed, oracle, potential = oracle_figures(tasks, outcomes)
    assert routed == [1.0, 0.0] and oracle == [1.0, 0.5] and potential == [1.0, 0.0]
    assert tasks[0].solved_by == ["a", "b"] and tasks[1].solved_by == ["b"]
    assert means == {"a": 0.5, BASE: 0.0, "b": 0.5}
    result = accuracy_report(tasks, ["a", "b", BASE], outcomes=outcomes, samples=100)
    assert result.potential_rate == 0.5
    assert result.routed_pass1.value == 0.5 and result.oracle_pass1.value == 0.75


def _held(name: str, families: list[str | None]) -> HeldOutSet:
    tasks = [Task(id=f"{name}-{i}", metadata={} if f is None else {"family": f}) for i, f in enumerate(families)]
    return HeldOutSet(name, name, domain=None, tasks=tasks)


def test_family_ceiling_counts_what_a_first_message_router_cannot_tell_apart() -> None:
    # two decision environments cut from the same families: the best family-level router sends multi_step to
    # `confirm` (3 of 4) and lookups to `identify` (2 of 2), and loses the shared write task whichever way it goes
    confirm = _held("confirm", ["multi_step", "multi_step", "multi_step", "write"])
    identify = _held("identify", ["multi_step", "write", "lookup", "lookup"])
    ceiling = family_ceiling([confirm, identify])
    assert ceiling is not None and ceiling["ceiling"] == pytest.approx(6 / 8) and ceiling["tasks"] == 8
    assert ceiling["by_family"]["multi_step"] == {"confirm": 3, "identify": 1}
    assert family_ceiling([_held("a", ["x", "x"]), _held("b", ["y"])])["ceiling"] == 1.0  # separable
    assert family_ceiling([_held("a", ["x", None])]) is None  # a task without a family: no claim
    routed = [RoutedTask(task_id="t", truth="confirm", predicted="confirm")]
    result = accuracy_report(routed, ["confirm", "identify", BASE], details={"family_ceiling": ceiling})
    assert any("multi_step, write" in line and "75.0%" in line for line in summary_lines(result))


def _cfg(run: RunDir) -> TraceConfig:
    return TraceConfig.model_validate(run.manifest().config)


def test_run_route_with_a_scripted_router(library_run: RunDir) -> None:
    router = ScriptedRouter({"things today": "multi_step_completion"})  # lookup questions fall to base
    result = run_route(library_run, _cfg(library_run), RouteConfig(tasks_per_env=4, samples=200), router=router)
    assert RoutingAccuracy.load(library_run.accuracy) == result
    assert result.labels == ["lookup_answer", "multi_step_completion", BASE]
    assert result.confusion == [[0, 0, 4], [0, 4, 0], [0, 0, 0]]
    assert result.accuracy.value == 0.5 and result.base_rate == 0.5 and result.n_tasks == 8
    assert len(router.calls) == 8  # one routing decision per held-out task, from its first user message
    assert all(msg.startswith(("Hi!", "Who", "What", "How", "When", "Is", "Do", "Can")) for msg, _, _ in router.calls)
    spec = read_router(library_run)
    assert spec.names == ["lookup_answer", "multi_step_completion", BASE]
    held = result.details["held_out"]
    assert held["multi_step_completion"]["source"].endswith("envs/multi_step_completion")
    assert held["lookup_answer"]["source"].startswith("library family")
    assert library_run.manifest().stages["route"].status == "done"


def test_run_route_on_the_tiny_model_with_oracle(library_run: RunDir) -> None:
    """The paper's router (argmax over label logits of the frozen tiny model) and the oracle rollouts: every option
    (2 adapters + base) on every held-out task once, with the tiny model as the policy."""
    import shutil

    from trace_rl.models.registry import build_client
    from trace_rl.models.resolve import resolve_model_path
    from trace_rl.models.tiny import make_lora_adapter

    tiny_dir = resolve_model_path("tiny")
    for seed, name in enumerate(("lookup_answer", "multi_step_completion")):
        folder = library_run.root / "adapters" / name
        shutil.rmtree(folder)
        make_lora_adapter(tiny_dir, folder, seed=seed)
    cfg = _cfg(library_run)
    cfg.rollout.max_tokens, cfg.env.max_steps = 4, 4  # the random tiny model babbles; keep episodes short
    rcfg = RouteConfig(tasks_per_env=1, oracle_trials=1, samples=100, model="tiny")
    tiny = build_client(ModelConfig(kind="tiny", model="tiny"), name="tiny")
    result = run_route(library_run, cfg, rcfg, clients={"tiny": tiny})
    assert result.n_tasks == 2 and all(t.scores and set(t.scores) <= set(result.labels) for t in result.per_task)
    assert sum(map(sum, result.confusion)) == 2
    assert set(tiny.adapters) == {"lookup_answer", "multi_step_completion"}
    oracle = library_run.root / "route" / "oracle"
    assert sorted(p.name for p in oracle.glob("*.jsonl")) == [
        "base.jsonl",
        "lookup_answer.jsonl",
        "multi_step_completion.jsonl",
    ]
    records = [json.loads(line) for p in oracle.glob("*.jsonl") for line in p.read_text().splitlines()]
    assert len(records) == 6 and {r["adapter"] for r in records} == {None, "lookup_answer", "multi_step_completion"}
    assert result.oracle_pass1 is not None and result.routed_pass1 is not None and result.potential_rate is not None
    assert result.oracle_pass1.value >= result.routed_pass1.value
    assert json.loads((library_run.accuracy).read_text())["router"]["base_model"] == "tiny"


def test_route_needs_adapters(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    run.ensure(config={})
    with pytest.raises(UserError, match="no trained adapters"):
        run_route(run, TraceConfig(), RouteConfig(), router=ScriptedRouter({}))
