"""Label offsets for the label-logit router: the classifier's prior toward one label, taken out.

A small frozen base model reading the routing prompt (TRACE §3.5) can give one label the highest score whatever the
task. Measured on the library with SmolLM2-135M: every test task went to the one adapter; the base label never won.
Two corrections are offered. Each is an additive offset per label, stored in `route/router.json` (`RouterSpec.bias`),
so the evaluate stage and the server rebuild the same router:

- `content_free`: contextual calibration (Zhao et al. 2021, "Calibrate Before Use"). The router's scores for a
  content-free message ("N/A") are subtracted, so that such a message is a tie. Needs no data.
- `fitted`: offsets chosen on labelled openings that the held-out measurement never sees (`fit_bias`). Coordinate
  ascent on balanced accuracy (the mean recall per label). Among equally good values it takes the offset nearest 0;
  one label (the base) stays at 0.

Both depart from the paper, whose router has no calibration (`route.calibration: none`, the default).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

CONTENT_FREE = "N/A"
"""The content-free opening of contextual calibration."""

_EPS = 1e-6


def apply_bias(scores: Mapping[str, float], bias: Mapping[str, float]) -> dict[str, float]:
    """`scores` with each label's offset added (labels without one unchanged)."""
    return {label: float(s) + float(bias.get(label, 0.0)) for label, s in scores.items()}


def content_free_bias(scores: Mapping[str, float]) -> dict[str, float]:
    """Offsets that make the content-free message's scores a tie: minus each finite score (0 for the others)."""
    return {label: (-float(s) if math.isfinite(s) else 0.0) for label, s in scores.items()}


def _predict(scores: Mapping[str, float], bias: Mapping[str, float], labels: Sequence[str]) -> str:
    adjusted = apply_bias({lab: scores.get(lab, -math.inf) for lab in labels}, bias)
    return max(labels, key=lambda lab: adjusted[lab])  # ties: the earlier label, as the router decides


def balanced_accuracy(
    examples: Sequence[tuple[str, Mapping[str, float]]], bias: Mapping[str, float], labels: Sequence[str]
) -> float:
    """Mean over the true labels present of the share of their examples predicted right."""
    hits: dict[str, list[bool]] = {}
    for truth, scores in examples:
        hits.setdefault(truth, []).append(_predict(scores, bias, labels) == truth)
    return sum(sum(h) / len(h) for h in hits.values()) / len(hits) if hits else 0.0


def _best_shift(
    examples: Sequence[tuple[str, Mapping[str, float]]],
    labels: Sequence[str],
    bias: Mapping[str, float],
    free: Sequence[str],
    fixed: str,
) -> float:
    """The common shift of every free label's offset that maximises balanced accuracy (0 among equals)."""
    gaps = []
    for _truth, scores in examples:
        top = max((scores.get(k, -math.inf) + bias[k] for k in free), default=-math.inf)
        own = scores.get(fixed, -math.inf)
        if math.isfinite(top) and math.isfinite(own):
            gaps.append(own - top)  # a shift below this gives the example to the fixed label
    if not gaps:
        return 0.0
    candidates = sorted({0.0, max(gaps) + 1.0, *(g - _EPS for g in gaps)}, key=abs)
    return max(
        candidates,
        key=lambda d: balanced_accuracy(examples, {k: v + d if k in free else v for k, v in bias.items()}, labels),
    )


def fit_bias(
    examples: Sequence[tuple[str, Mapping[str, float]]],
    labels: Sequence[str],
    *,
    fixed: str | None = None,
    sweeps: int = 3,
) -> dict[str, float]:
    """Offsets per label maximising balanced accuracy on (true label, raw scores) examples; `fixed` stays at 0.

    Each sweep first shifts the free labels together against the fixed one, then moves one label at a time: the
    candidates are the offsets at which it just wins each example, one at which it wins none, and 0; the best is
    kept, ties broken toward 0. A few sweeps settle it."""
    bias = {label: 0.0 for label in labels}
    free = [label for label in labels if label != fixed]
    if not examples or not free:
        return bias
    for _ in range(sweeps):
        changed = False
        if fixed is not None and fixed in labels:  # first the free labels together, against the fixed one
            shift = _best_shift(examples, labels, bias, free, fixed)
            if shift != 0.0:
                bias = {k: v + shift if k in free else v for k, v in bias.items()}
                changed = True
        for label in free:
            margins = []
            for _truth, scores in examples:
                own = scores.get(label, -math.inf)
                others = max(
                    (scores.get(k, -math.inf) + bias[k] for k in labels if k != label),
                    default=-math.inf,
                )
                if math.isfinite(own) and math.isfinite(others):
                    margins.append(others - own)
            if not margins:
                continue
            candidates = {0.0, bias[label], min(margins) - 1.0, *(m + _EPS for m in margins)}
            best = max(
                sorted(candidates, key=abs),
                key=lambda b: balanced_accuracy(examples, {**bias, label: b}, labels),
            )  # max keeps the first of equals: the one nearest 0
            if best != bias[label]:
                bias[label], changed = best, True
        if not changed:
            break
    return bias


__all__ = ["CONTENT_FREE", "apply_bias", "balanced_accuracy", "content_free_bias", "fit_bias"]
