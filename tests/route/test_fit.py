"""The route stage's label offsets (`route.calibration`): fitted on the capability environments' train tasks and the
rollout's solved tasks (a scripted scorer whose raw argmax always picks one label), and contextual calibration on the
tiny model's real label logits when the rollout solved nothing."""

from __future__ import annotations

import pytest

from trace_rl.artifacts.router import BASE, read_router
from trace_rl.artifacts.store import JsonlStore, RunDir
from trace_rl.config import ModelConfig, RouteConfig, TraceConfig
from trace_rl.envs.registry import load_domain
from trace_rl.errors import UserError
from trace_rl.route.accuracy import held_out_sets
from trace_rl.route.fit import base_openings
from trace_rl.route.stage import run_route
from trace_rl.routing.bias import CONTENT_FREE
from trace_rl.routing.router import LabelLogitRouter, LocalLogitScorer, ScriptedRouter
from trace_rl.types import Message, Trajectory


class _ByOpening:
    """Scores as a biased classifier would: the first label (lookup_answer) is always highest; multi-step openings
    lift the second label, not enough to win."""

    def scores(self, messages: list[Message], labels: list[str]) -> dict[str, float]:
        multi = "things today" in messages[1].text
        return {"A": 2.0, "B": 1.2 if multi else 0.3, "C": 0.0}


def _cfg(run: RunDir) -> TraceConfig:
    return TraceConfig.model_validate(run.manifest().config)


def _solved_rollout(run: RunDir, n: int) -> list[str]:
    """`n` solved lookup episodes and one failed one in the rollout store; their openings."""
    domain = load_domain("library", _cfg(run).env)
    tasks = [t for t in domain.tasks("train") if t.metadata["family"] == "lookup_answer"][: n + 1]
    records, openings = [], []
    for i, task in enumerate(tasks):
        text = f"Who wrote book {i}?"
        messages = [Message(role="system", content="sys"), Message(role="user", content=text)]
        tid = task.id
        traj = Trajectory(id=f"library/train/{tid}/0", env="library", split="train", task_id=tid, trial=0, seed=0)
        records.append(traj.model_copy(update={"messages": messages, "reward": float(i < n), "success": i < n}))
        openings.append(text)
    JsonlStore(run.trajectories).append(records)
    return openings[:n]


def test_fitted_offsets_route_what_the_raw_argmax_cannot(library_run: RunDir) -> None:
    solved = _solved_rollout(library_run, 3)
    assert sorted(base_openings(library_run, 10)) == sorted(
        (t, "sys") for t in solved
    )  # the failed episode is no example
    factory = lambda spec: LabelLogitRouter(spec, _ByOpening())  # noqa: E731
    raw = run_route(library_run, _cfg(library_run), RouteConfig(tasks_per_env=4, samples=100), router=factory)
    assert raw.accuracy.value == 0.5 and raw.confusion[1] == [4, 0, 0]  # every multi-step task went to lookup_answer
    rcfg = RouteConfig(tasks_per_env=4, samples=100, calibration="fitted", fit_tasks=3)
    fitted = run_route(library_run, _cfg(library_run), rcfg, router=factory)
    assert fitted.accuracy.value == 1.0 and fitted.confusion[1] == [0, 4, 0]
    spec = read_router(library_run)
    assert spec.calibration == "fitted" and spec.bias["C"] == 0.0 and spec.bias["B"] - spec.bias["A"] > 0.9
    info = fitted.details["calibration"]
    assert info["examples"] == {"lookup_answer": 3, "multi_step_completion": 3, BASE: 3}
    assert info["balanced_accuracy_after"] > info["balanced_accuracy_before"]
    # the train tasks it was fitted on are not the held-out ones it was measured on
    names = ["lookup_answer", "multi_step_completion"]
    fitted_on = {t.id for held in held_out_sets(library_run, names, "train", 3)[0] for t in held.tasks}
    measured = {t.task_id.rsplit("/", 1)[-1] for t in fitted.per_task}
    assert fitted.n_tasks == 8 and len(fitted_on) == 6 and not fitted_on & measured


def test_content_free_offsets_on_the_tiny_model(library_run: RunDir) -> None:
    import shutil

    from trace_rl.models.registry import build_client
    from trace_rl.models.resolve import resolve_model_path
    from trace_rl.models.tiny import make_lora_adapter

    tiny_dir = resolve_model_path("tiny")
    for seed, name in enumerate(("lookup_answer", "multi_step_completion")):
        shutil.rmtree(library_run.root / "adapters" / name)
        make_lora_adapter(tiny_dir, library_run.root / "adapters" / name, seed=seed)
    tiny = build_client(ModelConfig(kind="tiny", model="tiny"), name="tiny")
    # fitted with no solved rollout task: the content-free offsets, with a warning
    rcfg = RouteConfig(tasks_per_env=1, samples=50, model="tiny", calibration="fitted", fit_tasks=1)
    result = run_route(library_run, _cfg(library_run), rcfg, clients={"tiny": tiny})
    spec = read_router(library_run)
    assert spec.calibration == "content_free" and set(spec.bias) == set(spec.labels)
    assert any("content_free used" in w for w in result.details["warnings"])
    raw = LabelLogitRouter(spec, LocalLogitScorer(tiny)).raw_scores(CONTENT_FREE)
    assert spec.bias == pytest.approx({label: -s for label, s in raw.items()}, abs=1e-4)
    assert result.details["calibration"]["calibration"] == "content_free"


def test_calibration_needs_the_label_logit_router(library_run: RunDir) -> None:
    rcfg = RouteConfig(tasks_per_env=1, calibration="content_free")
    with pytest.raises(UserError, match="needs the label-logit router"):
        run_route(library_run, _cfg(library_run), rcfg, router=ScriptedRouter({}))
