"""Setting the router's per-label offsets (`route.calibration`, routing/bias.py) from a run directory.

`fitted` fits on openings the held-out measurement never sees: up to `fit_tasks` tasks of each capability
environment's train split (truth: that capability) and up to `fit_tasks` target tasks the base model solved in the
rollout stage (truth: base, the tasks that need no adapter). With no solved rollout task there is nothing to tell the
base label apart, and the content-free offsets are used instead (a warning says so).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from trace_rl.artifacts.router import BASE, RouterSpec
from trace_rl.artifacts.store import RunDir
from trace_rl.artifacts.trajectories import read_trajectories
from trace_rl.errors import UserError
from trace_rl.messages import first_user_text
from trace_rl.models.base import ModelClient
from trace_rl.route.accuracy import held_out_sets, route_held_out
from trace_rl.routing.bias import CONTENT_FREE, balanced_accuracy, content_free_bias, fit_bias
from trace_rl.routing.router import LabelLogitRouter


@dataclass
class BiasFit:
    """The offsets set on a router and what they were set from."""

    spec: RouterSpec
    details: dict[str, object] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def base_openings(run: RunDir, limit: int) -> list[tuple[str, str | None]]:
    """(first user message, system prompt) of up to `limit` rollout tasks the base model solved, one per task."""
    if not run.trajectories.exists():
        return []
    trajectories, _ = read_trajectories(run.trajectories)
    out, seen = [], set()
    for traj in sorted(trajectories.values(), key=lambda t: t.id):
        text = first_user_text(traj.messages) if traj.success else None
        if text is None or traj.task_id in seen:
            continue
        seen.add(traj.task_id)
        system = next((m.text for m in traj.messages if m.role == "system"), None)
        out.append((text, system))
        if len(out) >= limit:
            break
    return out


def _fit_examples(
    run: RunDir, router: LabelLogitRouter, limit: int, user_client: ModelClient | None
) -> tuple[list[tuple[str, Mapping[str, float]]], dict[str, int]]:
    """(true label, raw scores) of the fitting openings, and how many each option has. `router` has no offsets."""
    spec = router.spec
    label_of = dict(zip(spec.names, spec.labels, strict=True))
    sets, _ = held_out_sets(run, [n for n in spec.names if n != BASE], "train", limit)
    routed = route_held_out(router, sets, spec=spec, user_client=user_client)
    examples: list[tuple[str, Mapping[str, float]]] = [
        (label_of[t.truth], {label_of[name]: v for name, v in t.scores.items()}) for t in routed if t.truth
    ]
    examples += [(label_of[BASE], router.raw_scores(text, system)) for text, system in base_openings(run, limit)]
    counts = dict(Counter(spec.name_of(truth) for truth, _ in examples))
    return examples, counts


def calibrate_router(
    run: RunDir,
    router: object,
    mode: str,
    *,
    fit_tasks: int,
    system: str | None,
    user_client: ModelClient | None = None,
) -> BiasFit:
    """The router's spec with offsets set by `mode` (content_free or fitted); the router uses them from now on."""
    if not isinstance(router, LabelLogitRouter):
        raise UserError(f"route.calibration: {mode} needs the label-logit router (this one is {type(router).__name__})")
    router.spec = router.spec.model_copy(update={"bias": {}, "calibration": "none"})  # raw scores while fitting
    labels, details, warnings = router.spec.labels, {}, []
    if mode == "fitted":
        examples, counts = _fit_examples(run, router, fit_tasks, user_client)
        if counts.get(BASE):
            bias = fit_bias(examples, labels, fixed=labels[router.spec.names.index(BASE)])
            details = {
                "examples": counts,
                "balanced_accuracy_before": balanced_accuracy(examples, {}, labels),
                "balanced_accuracy_after": balanced_accuracy(examples, bias, labels),
            }
        else:
            warnings.append("route.calibration fitted: no rollout task solved by the base model; content_free used")
            mode = "content_free"
    if mode == "content_free":
        bias = content_free_bias(router.raw_scores(CONTENT_FREE, system))
        details = {"content_free_message": CONTENT_FREE}
    router.spec = router.spec.model_copy(update={"bias": bias, "calibration": mode})
    return BiasFit(router.spec, {"calibration": mode, "bias": dict(bias), **details}, warnings)


__all__ = ["BiasFit", "base_openings", "calibrate_router"]
