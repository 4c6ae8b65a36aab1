"""The GEPA baseline (TRACE §4.1–4.2): reflective prompt optimisation of the capability descriptions TRACE identified,
appended to the agent's system prompt, optimising pass rate on the target's train split with this same agent loop.

`TraceGEPAAdapter` is a GEPA 0.1.4 adapter (docs/integration-notes.md §3):
- a candidate is `{capability name: description}`; `render_capabilities` turns it into the system-prompt suffix;
- `evaluate` runs one episode per example (a task id of the target's train split) through `run_batch`, never raises
  for one example (a crashed or infra-failed episode scores 0 with its error in the trace), and charges one rollout per
  example against a hard cap: examples beyond the budget are not run, score 0, and stop the optimisation (GEPA's own
  `max_metric_calls` is checked only between iterations and may overshoot);
- `make_reflective_dataset` shows, per component, each example's first user message, the condensed trajectory and
  feedback (success, reward components, termination, tool errors);
- `propose_new_texts = None`: GEPA's reflective proposer (without the attribute GEPA silently returns the seed).

Episodes are stored under their candidate's hash and task id (`evaluate/gepa/episodes.jsonl`), so a killed run
replays what it had (GEPA's choices are seeded) and only runs what is missing; cached episodes still count as metric
calls (GEPA's budget is about optimisation signal, not wall time).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from trace_rl.messages import first_user_text
from trace_rl.routing.prompt import condense_trajectory
from trace_rl.types import Message, Task, Trajectory

SKILLS_HEADER = "Skills to apply in this conversation:"
BUDGET_EXHAUSTED = "not run: the GEPA rollout budget is exhausted"


def render_capabilities(candidate: dict[str, str]) -> str:
    """The system-prompt suffix for a candidate (empty for an empty candidate)."""
    lines = [
        f"- {name.replace('_', ' ')}: {' '.join(text.split())}" for name, text in candidate.items() if text.strip()
    ]
    return ("\n\n" + SKILLS_HEADER + "\n" + "\n".join(lines)) if lines else ""


def candidate_key(candidate: dict[str, str]) -> str:
    return hashlib.sha1(json.dumps(candidate, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def feedback(traj: Trajectory | None, error: str | None = None) -> str:
    """What the reflection LM is told about one episode."""
    if traj is None:
        return f"The episode did not run ({error or 'unknown error'}); score 0."
    if traj.infra_error:
        return f"The episode failed for infrastructure reasons ({traj.infra_error}); score 0, not the agent's fault."
    verdict = "succeeded" if traj.success else "failed"
    parts = [f"The agent {verdict} (reward {traj.reward or 0.0:.2f}, ended by {traj.termination or 'unknown'})."]
    if traj.reward_info and traj.reward_info.breakdown:
        comps = ", ".join(f"{k} {v:.2f}" for k, v in traj.reward_info.breakdown.items())
        parts.append(f"Reward components: {comps}.")
    tool_errors = [e.message for e in traj.errors if e.kind in ("tool", "parse", "protocol")]
    if tool_errors:
        parts.append("Errors: " + "; ".join(m[:160] for m in tool_errors[:4]) + ".")
    return " ".join(parts)


class TraceGEPAAdapter:
    """GEPA adapter over trace-rl's agent loop. `run_batch(tasks, system_suffix, key)` runs (or replays) one episode
    per task and returns the trajectories in order."""

    propose_new_texts = None  # GEPA's reflective proposer; a missing attribute silently disables reflection

    def __init__(
        self,
        tasks: dict[str, Task],
        run_batch: Callable[[list[Task], str, str], list[Trajectory]],
        *,
        budget: int,
        score: str = "success",
    ) -> None:
        if budget < 1:
            raise ValueError("the GEPA budget must be at least one rollout")
        self.tasks = tasks
        self.run_batch = run_batch
        self.budget = budget
        self.score_kind = score
        self.used = 0
        self.refused = 0
        self.evaluations = 0

    @property
    def exhausted(self) -> bool:
        return self.used >= self.budget

    def stopper(self, state: Any = None) -> bool:
        """A GEPA stop callback: stop once the hard budget is spent."""
        return self.exhausted

    def _score(self, traj: Trajectory) -> float:
        if traj.infra_error is not None:
            return 0.0
        if self.score_kind == "reward":
            return float(traj.reward or 0.0)
        return 1.0 if traj.success else 0.0

    def evaluate(self, batch: list[str], candidate: dict[str, str], capture_traces: bool = False) -> Any:
        from gepa import EvaluationBatch

        self.evaluations += 1
        allowed = max(0, self.budget - self.used)
        run_ids, refused_ids = batch[:allowed], batch[allowed:]
        suffix, key = render_capabilities(candidate), candidate_key(candidate)
        trajectories: list[Trajectory | None] = []
        errors: list[str | None] = []
        if run_ids:
            try:
                got = self.run_batch([self.tasks[i] for i in run_ids], suffix, key)
                trajectories.extend(got)
                errors.extend(None for _ in got)
            except Exception as exc:  # a systemic failure would raise again next time; per-batch data here
                trajectories.extend(None for _ in run_ids)
                errors.extend(f"{type(exc).__name__}: {exc}" for _ in run_ids)
        self.used += len(run_ids)
        self.refused += len(refused_ids)
        trajectories.extend(None for _ in refused_ids)
        errors.extend(BUDGET_EXHAUSTED for _ in refused_ids)
        scores = [self._score(t) if t is not None else 0.0 for t in trajectories]
        outputs = [
            {
                "task_id": tid,
                "success": bool(t.success) if t else False,
                "reward": (t.reward or 0.0) if t else 0.0,
                "error": err,
            }
            for tid, t, err in zip(batch, trajectories, errors, strict=True)
        ]
        traces = None
        if capture_traces:
            traces = [
                {"task_id": tid, "trajectory": t, "error": err}
                for tid, t, err in zip(batch, trajectories, errors, strict=True)
            ]
        return EvaluationBatch(outputs=outputs, scores=scores, trajectories=traces, num_metric_calls=len(run_ids))

    def make_reflective_dataset(
        self, candidate: dict[str, str], eval_batch: Any, components_to_update: list[str]
    ) -> dict[str, list[dict[str, Any]]]:
        records = []
        for trace, score in zip(eval_batch.trajectories or [], eval_batch.scores, strict=False):
            traj: Trajectory | None = trace.get("trajectory")
            task = self.tasks.get(trace.get("task_id"))
            first = (first_user_text(traj.messages) if traj is not None else None) or ""
            records.append(
                {
                    "Inputs": {
                        "task_id": trace.get("task_id"),
                        "first_user_message": first,
                        "family": (task.metadata.get("family") if task else None),
                    },
                    "Generated Outputs": condense_trajectory(traj.messages, max_chars=1500) if traj else "(not run)",
                    "Feedback": f"Score {score:.2f}. " + feedback(traj, trace.get("error")),
                }
            )
        return {component: list(records) for component in components_to_update}


def reflection_callable(client: Any, *, max_tokens: int = 1024, temperature: float = 0.7) -> Callable[[Any], str]:
    """A GEPA `reflection_lm`: `(prompt | messages) -> text`, over any trace-rl model client (the base model by
    default, the paper's model played every role)."""
    import asyncio

    from trace_rl.models.base import SamplingParams

    sampling = SamplingParams(temperature=temperature, max_tokens=max_tokens)

    def call(prompt: Any) -> str:
        if isinstance(prompt, str):
            messages = [Message(role="user", content=prompt)]
        else:
            messages = [Message(role=m.get("role", "user"), content=str(m.get("content", ""))) for m in prompt]
        response = asyncio.run(client.chat(messages, None, sampling=sampling))
        return response.message.content or response.message.thought or response.raw_text or ""

    return call


__all__ = [
    "BUDGET_EXHAUSTED",
    "SKILLS_HEADER",
    "TraceGEPAAdapter",
    "candidate_key",
    "feedback",
    "reflection_callable",
    "render_capabilities",
]
