"""A synthetic run directory with every artefact the report reads, in each producer's format, so every section
renders: rollout trajectories, diagnose/capabilities.json, envs/<cap>/{spec,status,calibration}.json,
adapters/<cap>/{metrics.jsonl,eval_before.json,eval_after.json,eval.png}, route/{router,accuracy}.json and
evaluate/comparison.json (with the paper's Fig. 4 τ²-bench numbers as the budget curve)."""

from __future__ import annotations

import math
from pathlib import Path

from trace_rl.artifacts.capabilities import CapabilitiesFile, SelectionParams
from trace_rl.artifacts.environments import EnvSpec, GeneratorSpec, HintSpec, RewardSpec, write_env_spec
from trace_rl.artifacts.evaluation import (
    ArmResult,
    BudgetPoint,
    Comparison,
    Estimate,
    PassKRow,
    RoutedTask,
    RoutingAccuracy,
)
from trace_rl.artifacts.layout import EnvLayout
from trace_rl.artifacts.router import RouterSpec
from trace_rl.artifacts.store import JsonlStore, RunDir, atomic_write_json
from trace_rl.report import plots
from trace_rl.routing.spec import make_options
from trace_rl.types import (
    Capability,
    ErrorRecord,
    Message,
    RewardInfo,
    TerminationReason,
    ToolCall,
    Trajectory,
)

CAPS = ("verify_before_act", "exact_arguments")
TASKS = 6
TRIALS = 3
FIG4 = {  # TRACE Fig. 4, τ²-bench overall (docs/method-notes.md §8)
    "grpo_target": [32.9, 34.8, 37.8, 35.4, 37.8],
    "gepa": [32.9, 36.6, 38.4, 38.4, 39.6],
    "trace": [32.9, 40.9, 43.9, 45.1, 47.0],
}
BUDGETS = [0, 1280, 2560, 3840, 5120]


def trajectory(task: int, trial: int) -> Trajectory:
    success = (task + trial) % 3 == 0
    infra = task == 5 and trial == 2
    tid = f"library/train/t{task}/{trial}"
    messages = [
        Message(role="system", content="You are a library agent."),
        Message(role="user", content=f"Please renew book #{task} <b>now</b>", turn=0),
        Message(
            role="assistant",
            tool_calls=[ToolCall(id="c1", name="find_book", arguments={"id": f"#{task}"})],
            thought="Let me look it up.",
            turn=1,
        ),
        Message(
            role="tool",
            content="Error: no such book" if not success else '{"id": 1}',
            tool_call_id="c1",
            name="find_book",
            error=not success,
            turn=1,
        ),
        Message(role="assistant", content="Done, renewed." if success else "<script>alert(1)</script>", turn=2),
    ]
    return Trajectory(
        id=tid,
        env="library",
        split="train",
        task_id=f"t{task}",
        trial=trial,
        seed=100 + trial,
        messages=messages,
        reward=None if infra else float(success),
        success=None if infra else success,
        reward_info=None
        if infra
        else RewardInfo(reward=float(success), breakdown={"DB": float(success), "COMMUNICATE": 1.0}),
        termination=None if infra else (TerminationReason.AGENT_STOP if task % 2 else TerminationReason.MAX_STEPS),
        errors=[] if success else [ErrorRecord(kind="tool", message="no such book", turn=1)],
        infra_error="timeout: request timed out" if infra else None,
        model="tiny",
    )


def write_rollout(run: RunDir) -> None:
    with run.stage("rollout"):
        JsonlStore(run.root / "rollout" / "trajectories.jsonl").append(
            trajectory(t, k) for k in range(TRIALS) for t in range(TASKS)
        )


def write_diagnose(run: RunDir) -> None:
    def cap(name: str, status: str, delta: float, ids: list[str]) -> Capability:
        stats = {
            "delta_mean": delta,
            "delta_std": 0.05,
            "cov_mean": 0.4,
            "cov_std": 0.1,
            "runs_passed": 9,
            "n_runs": 10,
            "k": 8,
            "example_failed_trajectory_ids": ids,
        }
        return Capability(
            name=name, definition=f"The agent must {name.replace('_', ' ')} every time.", stats=stats, status=status
        )

    selected = [
        cap(CAPS[0], "pending", 0.42, ["library/train/t1/0", "library/train/t4/0"]),
        cap(CAPS[1], "pending", 0.31, ["library/train/t2/0"]),
    ]
    rejected = cap("polite_closing", "rejected", 0.02, [])
    data = CapabilitiesFile(
        selected=selected,
        candidates=[*selected, rejected],
        params=SelectionParams(rho=0.1, delta=0.2, n_runs=10, k=8),
        splits=["train"],
        n_trajectories={"diagnosed": 17, "failed": 11, "succeeded": 6},
        analyst="scripted",
        warnings=["one labeling run was retried"],
    )
    atomic_write_json(run.root / "diagnose" / "capabilities.json", data)


def write_envs(run: RunDir) -> None:
    for i, cap in enumerate(CAPS):
        folder = run.root / "envs" / cap
        spec = EnvSpec(
            name=cap,
            definition=f"Definition of {cap}.",
            target={"name": "library"},
            tools=[],
            generator=GeneratorSpec(kind="library_variants", difficulty=1 + i),
            reward=RewardSpec(),
            hint=HintSpec(text="Check the records first."),
            intro="",
        )
        write_env_spec(EnvLayout(folder), spec)
        ok = i == 0
        figs = {
            "mean_reward": 0.41 if ok else 0.82,
            "reward_std": 0.2,
            "success_rate": 0.35 if ok else 0.9,
            "informative_groups": 0.75,
            "constant_groups": 0.25,
            "all_success_groups": 0.1,
            "all_zero_groups": 0.1,
        }
        checks = {
            "mean_reward": {"value": figs["mean_reward"], "range": [0.2, 0.6], "ok": ok},
            "success_rate": {"value": figs["success_rate"], "range": [0.2, 0.6], "ok": ok},
            "reward_std": {"value": 0.2, "min": 0.05, "ok": True},
            "constant_groups": {"value": 0.25, "max": 0.5, "ok": True},
            "max_turns_hit": {"value": 0.1, "range": [None, 0.3], "ok": True},
        }
        attempts = [
            {
                "attempt": a + 1,
                "difficulty": 1 + a,
                "generator": "library_variants",
                "accepted": ok and a == 1,
                "direction": None if ok and a == 1 else "too_easy",
                "figures": figs,
                "checks": checks,
            }
            for a in range(2)
        ]
        atomic_write_json(
            folder / "calibration.json",
            {
                "accepted": ok,
                "acceptance": {},
                "policy": "policy",
                "groups": 16,
                "samples": 8,
                "temperature": 0.7,
                "attempts": attempts,
                "final": attempts[-1],
            },
        )
        atomic_write_json(
            folder / "status.json",
            {
                "status": "ready" if ok else "needs_attention",
                "reason": "" if ok else "calibration out of range after 2 attempts",
                "attempts": 2,
                "figures": figs,
                "updated_at": 0.0,
            },
        )


def write_adapters(run: RunDir) -> None:
    for i, cap in enumerate(CAPS):
        folder = run.root / "adapters" / cap
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "adapter_config.json").write_text("{}")
        store = JsonlStore(folder / "metrics.jsonl", key=lambda r: str(r["step"]))
        store.append(
            {
                "step": s,
                "capability": cap,
                "reward": 0.2 + 0.05 * s + 0.02 * math.sin(s + i),
                "reward_std": 0.1,
                "env/success_rate": 0.1 + 0.06 * s,
                "groups/frac_dropped": 0.25,
            }
            for s in range(1, 11)
        )
        store.append([{"step": "final@10", "train_runtime": 12.0}])
        atomic_write_json(
            folder / "eval_before.json",
            {"episodes": 32, "mean_reward": 0.31, "reward_stderr": 0.04, "success_rate": 0.25, "success_stderr": 0.07},
        )
        atomic_write_json(
            folder / "eval_after.json",
            {"episodes": 32, "mean_reward": 0.55, "reward_stderr": 0.04, "success_rate": 0.5, "success_stderr": 0.09},
        )
    (run.root / "adapters" / CAPS[0] / "eval.png").write_bytes(plots.pass_k_curve({"x": [(1, 0.5, 0.4, 0.6)]}))


def write_route(run: RunDir) -> None:
    options = make_options(
        [(c, f"Definition of {c}.", run.root / "adapters" / c) for c in CAPS],
        {CAPS[0]: ("env/x/0", 'Customer: renew #1 [Agent calls find_book(id="#1")] Agent: done')},
    )
    RouterSpec(base_model="tiny", options=options).save(run.router)
    labels = [*CAPS, "base"]
    confusion = [[7, 2, 1], [1, 6, 3], [0, 1, 9]]
    RoutingAccuracy(
        env="library",
        split="test",
        truth="capability environment the task was drawn from",
        labels=labels,
        confusion=confusion,
        accuracy=Estimate(value=22 / 30, low=0.57, high=0.87),
        n_tasks=30,
        base_rate=13 / 30,
        potential_rate=0.8,
        routed_pass1=Estimate(value=0.45, low=0.3, high=0.6),
        oracle_pass1=Estimate(value=0.6),
        per_task=[RoutedTask(task_id="t0", truth=CAPS[0], predicted=CAPS[0], scores={"A": 1.2, "B": 0.1, "C": 0.3})],
    ).save(run.root / "route" / "accuracy.json")


def write_evaluate(run: RunDir) -> None:
    def rows(p1: float, spread: float = 0.08) -> list[PassKRow]:
        return [
            PassKRow(k=k, value=p1**k, low=max(0, p1**k - spread), high=min(1, p1**k + spread), tasks=50)
            for k in (1, 2, 3)
        ]

    base = 0.329
    arms = []
    for name, p1, budget in (
        ("base", base, 0),
        ("trace", 0.47, 5120),
        ("grpo_target", 0.378, 5120),
        ("gepa", 0.396, 5120),
        ("single_best", 0.41, 1280),
        ("multi_capability", 0.39, 5120),
    ):
        diff = (
            []
            if name == "base"
            else [PassKRow(k=1, value=p1 - base, low=p1 - base - 0.05, high=p1 - base + 0.05, tasks=50)]
        )
        arms.append(
            ArmResult(
                name=name, pass_k=rows(p1), diff_to_base=diff, rollout_budget=budget, episodes=150, mean_reward=p1
            )
        )
    curve = [
        BudgetPoint(arm=arm, budget=b, value=v / 100, low=v / 100 - 0.04, high=v / 100 + 0.04)
        for arm, values in FIG4.items()
        for b, v in zip(BUDGETS, values, strict=True)
    ]
    Comparison(
        env="tau2:retail",
        split="test",
        tasks=50,
        trials=3,
        arms=arms,
        budget_curve=curve,
        notes=["Synthetic numbers for the report test."],
    ).save(run.root / "evaluate" / "comparison.json")


def build_synthetic_run(
    root: Path, *, stages: tuple[str, ...] = ("rollout", "diagnose", "envs", "adapters", "route", "evaluate")
) -> RunDir:
    run = RunDir(root)
    run.ensure(config={"run": {"name": root.name}}, command="trace-rl rollout --run " + str(root))
    writers = {
        "rollout": write_rollout,
        "diagnose": write_diagnose,
        "envs": write_envs,
        "adapters": write_adapters,
        "route": write_route,
        "evaluate": write_evaluate,
    }
    for stage in stages:
        writers[stage](run)
    return run


if __name__ == "__main__":  # python -m tests.report.synthetic runs/synthetic  → a run to look at
    import sys

    from trace_rl.report.html import write_html_report

    print(write_html_report(build_synthetic_run(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/synthetic"))))
