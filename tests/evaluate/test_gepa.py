"""The GEPA baseline's adapter: GEPA really changes the candidate (scripted reflection LM), per-example failures are
data, the reflective dataset is built from trajectories, and the rollout budget is a hard cap."""

from __future__ import annotations

import gepa

from trace_rl.evaluate.gepa_adapter import (
    BUDGET_EXHAUSTED,
    SKILLS_HEADER,
    TraceGEPAAdapter,
    candidate_key,
    render_capabilities,
)
from trace_rl.types import Message, Task, ToolCall, Trajectory

SEED = {"exact_counting": "Add what the user asks."}


def _tasks(n: int) -> dict[str, Task]:
    return {f"t{i}": Task(id=f"t{i}", metadata={"family": "count"}) for i in range(n)}


class FakeEpisodes:
    """run_batch: an episode succeeds iff the system-prompt suffix asks for careful counting; task t1 crashes."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, list[str]]] = []

    @property
    def episodes(self) -> int:
        return sum(len(ids) for _, ids in self.batches)

    def __call__(self, tasks: list[Task], suffix: str, key: str) -> list[Trajectory]:
        self.batches.append((key, [t.id for t in tasks]))
        out = []
        for t in tasks:
            ok = "careful" in suffix and t.id != "t1"
            messages = [
                Message(role="user", content=f"please add 2 ({t.id})"),
                Message(role="assistant", tool_calls=[ToolCall(id="c", name="increment", arguments={"by": 3})]),
            ]
            out.append(
                Trajectory(
                    id=f"{key}/{t.id}",
                    env="toy",
                    split="train",
                    task_id=t.id,
                    trial=0,
                    seed=17,
                    messages=messages,
                    reward=float(ok),
                    success=ok,
                    termination="user_stop",
                    infra_error="internal: boom" if t.id == "t1" else None,
                )
            )
        return out


def reflection(prompt: object) -> str:
    assert "Feedback" in str(prompt) or "feedback" in str(prompt).lower()
    return "Here is the improved text:\n```\nCount careful: add exactly the amount the user names, once.\n```"


def test_render_and_key() -> None:
    text = render_capabilities({"exact_counting": "Add  what\nthe user asks.", "empty": " "})
    assert text == f"\n\n{SKILLS_HEADER}\n- exact counting: Add what the user asks."
    assert render_capabilities({}) == ""
    assert candidate_key({"a": "1", "b": "2"}) == candidate_key({"b": "2", "a": "1"})


def test_gepa_optimisation_changes_the_candidate_within_budget() -> None:
    tasks = _tasks(10)
    episodes = FakeEpisodes()
    adapter = TraceGEPAAdapter(tasks, episodes, budget=30)
    assert TraceGEPAAdapter.propose_new_texts is None
    result = gepa.optimize(
        seed_candidate=SEED,
        trainset=[f"t{i}" for i in range(6)],
        valset=[f"t{i}" for i in range(6, 10)],
        adapter=adapter,
        reflection_lm=reflection,
        max_metric_calls=30,
        stop_callbacks=[adapter.stopper],
        reflection_minibatch_size=3,
        seed=0,
        display_progress_bar=False,
    )
    best = result.best_candidate
    assert best != SEED and "careful" in best["exact_counting"]
    assert result.val_aggregate_scores[result.best_idx] == 1.0 > result.val_aggregate_scores[0]
    assert episodes.episodes == adapter.used <= 30
    assert result.total_metric_calls >= adapter.used  # GEPA checks its budget between iterations; the cap holds


def test_budget_is_a_hard_cap() -> None:
    tasks = _tasks(10)
    episodes = FakeEpisodes()
    adapter = TraceGEPAAdapter(tasks, episodes, budget=7)
    result = gepa.optimize(
        seed_candidate=SEED,
        trainset=[f"t{i}" for i in range(6)],
        valset=[f"t{i}" for i in range(6, 10)],
        adapter=adapter,
        reflection_lm=reflection,
        max_metric_calls=7,
        stop_callbacks=[adapter.stopper],
        reflection_minibatch_size=3,
        seed=0,
        display_progress_bar=False,
    )
    # 4 validation episodes of the seed + 3 minibatch episodes of the parent = 7; the child's 3 are refused
    assert episodes.episodes == adapter.used == 7 and adapter.refused == 3 and adapter.exhausted
    assert result.best_candidate == SEED


def test_per_example_failures_are_data_and_reflective_dataset() -> None:
    tasks = _tasks(3)
    adapter = TraceGEPAAdapter(tasks, FakeEpisodes(), budget=4)
    batch = adapter.evaluate(["t0", "t1", "t2"], {"exact_counting": "Be careful."}, capture_traces=True)
    assert batch.scores == [1.0, 0.0, 1.0]  # t1 crashed inside trace-rl: score 0, no exception
    assert batch.num_metric_calls == 3
    data = adapter.make_reflective_dataset({"exact_counting": "Be careful."}, batch, ["exact_counting"])
    rows = data["exact_counting"]
    assert len(rows) == 3 and rows[0]["Inputs"]["first_user_message"] == "please add 2 (t0)"
    assert "[Agent calls increment(by=3)]" in rows[0]["Generated Outputs"]
    assert "succeeded" in rows[0]["Feedback"] and "infrastructure" in rows[1]["Feedback"]
    over = adapter.evaluate(["t0", "t2"], {"exact_counting": "x"}, capture_traces=True)
    assert over.scores == [0.0, 0.0] or over.scores[1] == 0.0
    assert over.outputs[1]["error"] == BUDGET_EXHAUSTED and adapter.used == 4

    def broken(tasks: list[Task], suffix: str, key: str) -> list[Trajectory]:
        raise RuntimeError("server exploded")

    failing = TraceGEPAAdapter(tasks, broken, budget=5)
    result = failing.evaluate(["t0"], {"exact_counting": "x"}, capture_traces=True)
    assert result.scores == [0.0] and "server exploded" in result.outputs[0]["error"]
