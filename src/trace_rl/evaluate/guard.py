"""The held-in regression guard of the `trace_guarded` arm (ours; TRACE has no such step).

Given the routed agent's and the base model's episodes on the same target *train* tasks and trial seeds, each
adapter is judged on the tasks the router sent to it: the paired difference adapter − base (success, or reward), per
task averaged over its trials, with a paired bootstrap interval over those tasks. An adapter is kept when that
difference is at least `min_delta`; one the router sent no train task to is kept or dropped by `keep_unrouted`.

Why: a capability adapter trained for a few GRPO steps can serve the tasks routed to it worse than the base model —
its side effect on the families it was not trained on can outweigh the decision it learned — and which adapter does
so changes between training draws (README, #18). The train split is where that can be seen without the test split.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from trace_rl.artifacts.router import BASE
from trace_rl.config.evaluate import GuardConfig
from trace_rl.evaluate.compare import PairedDiff, paired_bootstrap


@dataclass
class AdapterVerdict:
    """What the guard found for one adapter, and whether it is kept."""

    adapter: str
    tasks: int  # train tasks routed to it with a scored pair
    episodes: int  # scored (adapter, base) pairs
    adapter_score: float | None
    base_score: float | None
    delta: float | None
    low: float | None
    high: float | None
    kept: bool
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def route_of(record: dict[str, Any]) -> str:
    """The option that served an episode: the routing decision stamped on it, else its adapter (None: base)."""
    route = (record.get("metadata") or {}).get("route") or {}
    return route.get("name") or record.get("adapter") or BASE


def _score(record: dict[str, Any], score: str) -> float:
    if score == "success":
        return 1.0 if record.get("success") else 0.0
    return float(record.get("reward") or 0.0)


def _scored(record: dict[str, Any] | None) -> bool:
    return record is not None and record.get("infra_error") is None


def judge(
    routed: dict[str, dict[str, Any]],
    base: dict[str, dict[str, Any]],
    adapters: list[str],
    guard: GuardConfig,
    *,
    samples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> list[AdapterVerdict]:
    """One verdict per adapter, from episode records keyed by episode id (the same ids in both: task and trial)."""
    pairs: dict[str, dict[str, list[tuple[float, float]]]] = {a: {} for a in adapters}
    for key, routed_record in routed.items():
        base_record = base.get(key)
        name = route_of(routed_record)
        if name not in pairs or not (_scored(routed_record) and _scored(base_record)):
            continue
        task = str(routed_record.get("task_id"))
        scores = (_score(routed_record, guard.score), _score(base_record, guard.score))  # type: ignore[arg-type]
        pairs[name].setdefault(task, []).append(scores)
    verdicts = []
    for name in adapters:
        per_task = pairs[name]
        if not per_task:
            kept = guard.keep_unrouted
            what = "kept (keep_unrouted)" if kept else "dropped (keep_unrouted off)"
            reason = f"no train task routed to it; {what}"
            verdicts.append(AdapterVerdict(name, 0, 0, None, None, None, None, None, kept, reason))
            continue
        adapter_means = [sum(a for a, _ in v) / len(v) for v in per_task.values()]
        base_means = [sum(b for _, b in v) / len(v) for v in per_task.values()]
        diff: PairedDiff = paired_bootstrap(adapter_means, base_means, samples=samples, seed=seed, level=level)
        kept = diff.value >= guard.min_delta
        sign = "≥" if kept else "<"
        reason = f"{guard.score} {diff.value:+.3f} vs base on {len(per_task)} routed train tasks"
        reason += f" {sign} {guard.min_delta:+.3f}"
        verdicts.append(
            AdapterVerdict(
                adapter=name,
                tasks=len(per_task),
                episodes=sum(len(v) for v in per_task.values()),
                adapter_score=sum(adapter_means) / len(adapter_means),
                base_score=sum(base_means) / len(base_means),
                delta=diff.value,
                low=diff.low,
                high=diff.high,
                kept=kept,
                reason=reason,
            )
        )
    return verdicts


__all__ = ["AdapterVerdict", "judge", "route_of"]
