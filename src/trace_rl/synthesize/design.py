"""What a capability's environment checks and hints: from the capability to a capability type, then to the
capability-exercised checks of its reward and the soft guidance of its hint.

Capabilities are named by the diagnose stage's analyst, so names vary. The type is taken, in order, from the
evidence tasks' own `capability_type` metadata (library tasks carry one), from keywords in the capability's name and
definition, and otherwise defaults to tool-calling precision. The four types are the ones TRACE trained on
τ²-bench (paper §4.1): precondition verification, tool-calling precision, multi-step completion and structured data
reasoning.

| type | checks (weight) | ablation that must lower the reward |
|---|---|---|
| precondition_verification | verify_before_act (1.0) | drop the gold reads |
| tool_calling_precision | exact_arguments (0.7), grounded_arguments (0.3) | corrupt one argument of the key call |
| multi_step_completion | write_coverage (1.0) | drop the last gold write |
| structured_data_reasoning | exact_arguments (0.5), communicate (0.5) | corrupt one argument of the key call |
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from trace_rl.artifacts.environments import CheckSpec, HintSpec, RewardSpec
from trace_rl.types import Capability

TYPES = ("precondition_verification", "tool_calling_precision", "multi_step_completion", "structured_data_reasoning")

CHECKS: dict[str, list[tuple[str, float]]] = {
    "precondition_verification": [("verify_before_act", 1.0)],
    "tool_calling_precision": [("exact_arguments", 0.7), ("grounded_arguments", 0.3)],
    "multi_step_completion": [("write_coverage", 1.0)],
    "structured_data_reasoning": [("exact_arguments", 0.5), ("communicate", 0.5)],
}

KEYWORDS: dict[str, tuple[str, ...]] = {
    "precondition_verification": (
        "precondition", "verif", "eligib", "policy", "rule", "permission", "allowed", "refus", "constraint", "check",
    ),
    "tool_calling_precision": ("precision", "argument", "parameter", "tool call", "calling", "exact", "identifier"),
    "multi_step_completion": ("multi", "step", "complet", "follow", "every request", "all request", "sub-task"),
    "structured_data_reasoning": (
        "structured", "data", "record", "parse", "cross-ref", "reason", "select", "compar", "field", "numer",
    ),
}  # fmt: skip  # data: packed, not one key per line

HINTS: dict[str, str] = {
    "precondition_verification": (
        "Before you change anything, look up the records the request depends on and check each rule of the policy "
        "against what they say. If a rule stops the request, make no change: explain which rule applies and quote "
        "the value from the record that stops it."
    ),
    "tool_calling_precision": (
        "Copy every value you pass exactly as it appears in the latest record or in the user's words: identifiers, "
        "amounts and names character for character. Never guess an identifier; look it up first."
    ),
    "multi_step_completion": (
        "Keep a list of everything the user asked for. Handle the requests one at a time, confirm each result, and "
        "do not end the conversation until every request has been handled and its result told."
    ),
    "structured_data_reasoning": (
        "Read the records field by field. Compare every candidate record against all of the user's conditions and "
        "its status or availability before choosing, and state the exact value you relied on."
    ),
}


def capability_type(capability: Capability, evidence_types: Iterable[str] = ()) -> tuple[str, str]:
    """(type, how it was decided)."""
    counted = Counter(t for t in evidence_types if t in TYPES)
    if capability.name in TYPES:
        return capability.name, "name"
    if counted:
        best, n = counted.most_common(1)[0]
        return best, f"evidence tasks' capability_type ({n}/{sum(counted.values())})"
    text = f"{capability.name.replace('_', ' ')} {capability.definition}".lower()
    scores = {t: sum(text.count(k) for k in kws) for t, kws in KEYWORDS.items()}
    best = max(TYPES, key=lambda t: (scores[t], -TYPES.index(t)))
    if scores[best] == 0:
        return "tool_calling_precision", "default (no keyword matched)"
    return best, f"keywords ({scores[best]} matches)"


def reward_spec(kind: str, *, alpha: float, weights: dict[str, float], unscored_scale: float = 0.0) -> RewardSpec:
    return RewardSpec(
        alpha=alpha,
        unscored_scale=unscored_scale,
        weights={k: float(v) for k, v in weights.items()},  # type: ignore[misc]
        checks=[CheckSpec(kind=k, weight=w) for k, w in CHECKS[kind]],  # type: ignore[arg-type]
    )


def decision_reward_spec() -> RewardSpec:
    """The reward of a decision environment (`library_decisions`): the `decision` check alone, success when it is 1.
    Unscored endings are not scaled down: the move is made before the episode can run out of turns."""
    return RewardSpec(
        alpha=0.0,
        product=["capability"],
        weights={"capability": 1.0},
        checks=[CheckSpec(kind="decision", weight=1.0)],
        unscored_scale=1.0,
        success="decision",
    )


def hint_spec(kind: str, fraction: float) -> HintSpec:
    return HintSpec(text=HINTS[kind], fraction=fraction)


def primary_check(spec: RewardSpec) -> str:
    return max(spec.checks, key=lambda c: c.weight).kind if spec.checks else "write_coverage"


__all__ = [
    "CHECKS",
    "HINTS",
    "TYPES",
    "capability_type",
    "decision_reward_spec",
    "hint_spec",
    "primary_check",
    "reward_spec",
]
