"""The gold-free behavioral analyzer: labels capabilities from observable behavior, for targets without gold actions.

No LLM, no reference. Imported targets (OpenEnv `openenv:<folder>`, verifiers `verifiers:<module>`) have tasks
without gold actions, where the structural analyzer (`structural.py`) labels everything NA. This analyzer labels what
can be seen in the trajectory itself (its tool calls, their results, how the episode ended, the reward details) and,
for completion, contrasts it with the successful trajectories of the same environment in the diagnosed batch. This
departs from TRACE (§3.2), whose analyst is an LLM; the stage still computes Δ = ER− − ER+ and coverage over its labels
(§3.3). Labels depend only on the items given, so its labeling runs all agree (N = 1 by default).

Capabilities and detection rules. A "call" is an assistant tool call; it "succeeded" when it has a tool result that
is not an error and it is not malformed; "ended by the agent" means the termination is agent stop, user stop or
unrecorded (not a limit: max steps, too many errors, timeout, errors).

- `tool_call_formatting` — applicable when the agent made a call. LACKING: a call whose arguments did not parse
  (`ToolCall.parse_error`), or whose result is an error saying the tool does not exist ("Tool 'x' not found") or the
  arguments were malformed, invalid or missing ("invalid action", "validation error", "missing 1 required ...",
  "unexpected keyword argument", "could not parse ...").
- `acting_through_tools` — applicable when the environment offers tools: the stage found tool schemas in it, or the
  agent or any trajectory of the same environment in the batch made a call. LACKING: the agent made no call at all
  (it answered in prose).
- `multi_step_task_completion` — applicable when the agent made a call. LACKING, only when the episode was ended by
  the agent: it made fewer successful calls than the fewest made by a successful trajectory of the same task in the
  batch (of the same environment when no trajectory of the task succeeded); or its reward details record
  `done: false` while some successful trajectory of the same environment records `done: true` (OpenEnv's score puts
  the environment's done flag there).
- `error_recovery` — applicable when some call returned an error other than "the episode is over" (which no call can
  recover from). LACKING: after an errored call the agent made the identical call again (same name and arguments),
  or made no further successful call before the episode ended.

Limits: the contrast needs successful trajectories in the batch (with none, completion is LACKING only by the done
flag); an unknown tool is recognised only by the environment's "not found" error; a task that needs fewer steps than
its environment's other tasks, or an error the agent was right to accept (a missing record, reported to the user),
still count; whether the final answer is right is not judged (the reward says so).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from trace_rl.artifacts.capabilities import Label
from trace_rl.diagnose.calls import MALFORMED, CallEvent, agent_calls
from trace_rl.diagnose.items import DiagnosisItem
from trace_rl.diagnose.rule_analyst import RuleAnalyst
from trace_rl.diagnose.structural import Finding, StructuralReport
from trace_rl.types import SCORED_TERMINATIONS, Trajectory

FORMATTING = "tool_call_formatting"
ACTING = "acting_through_tools"
COMPLETION = "multi_step_task_completion"
RECOVERY = "error_recovery"

DEFINITIONS: dict[str, str] = {
    FORMATTING: (
        "Every tool call is executable as written: the arguments are valid JSON, the tool exists, and the arguments "
        "have the names, types and values the tool accepts. Lacking when a call fails to parse, names an unknown "
        "tool, or is rejected because an argument is invalid, missing or unexpected."
    ),
    ACTING: (
        "When the environment offers tools, the agent carries out the task step by step through them, rather than "
        "answering from its own knowledge, so that the task is completed in the environment. Lacking when the agent "
        "makes no tool call at all and only replies in prose."
    ),
    COMPLETION: (
        "The agent keeps taking the steps the task needs until it is complete before it ends the episode. Lacking "
        "when the agent stops after fewer successful steps than any successful attempt needed, or stops while the "
        "environment reports that the episode is not done."
    ),
    RECOVERY: (
        "After a tool call fails, the agent reads the error and adapts: it corrects the arguments or takes another "
        "step, and goes on to complete the task. Lacking when the agent repeats the identical failed call, or gives "
        "up after the error and makes no further successful tool call."
    ),
}
CAPABILITIES: tuple[str, ...] = (FORMATTING, ACTING, COMPLETION, RECOVERY)

_REJECTED = re.compile(
    MALFORMED.pattern + r"|could not parse|invalid (action|argument|parameter|input|value)|validation error|"
    r"missing (required )?(argument|parameter|field)|field required",
    re.IGNORECASE,
)
_OVER = re.compile(r"episode is over", re.IGNORECASE)


@dataclass
class BehavioralReport(StructuralReport):
    """Which behavioral capabilities apply and which deficits the trajectory shows (the notes are structural's)."""

    has_reference: bool = False

    def labels(self) -> dict[str, Label]:
        lacking = {f.capability for f in self.findings}
        return {
            c: Label.LACKING if c in lacking else Label.PRESENT if c in self.applicable else Label.NA
            for c in CAPABILITIES
        }


@dataclass
class Contrast:
    """What the batch's successful trajectories show, per environment (and per task)."""

    tool_envs: set[str] = field(default_factory=set)  # environments where some trajectory made a call
    fewest: dict[tuple[str, str | None], int] = field(default_factory=dict)  # (env, task | None) -> fewest ok calls
    done_envs: set[str] = field(default_factory=set)  # environments where a success records done: true


def _ok(event: CallEvent) -> bool:
    return event.result is not None and not event.result.error and not _rejection(event)


def _rejection(event: CallEvent) -> str | None:
    """Why the call is not executable as written (structural's reasons, and the wider rejection messages)."""
    if event.malformed:
        return event.malformed
    if event.errored and event.result is not None and _REJECTED.search(event.result.text):
        return "rejected: " + " ".join(event.result.text.split())[:160]
    return None


def _done(trajectory: Trajectory) -> bool | None:
    info = trajectory.reward_info
    value = info.details.get("done") if info is not None else None
    return value if isinstance(value, bool) else None


def contrast(trajectories: Iterable[Trajectory]) -> Contrast:
    out = Contrast()
    for t in trajectories:
        events = agent_calls(t)
        if events:
            out.tool_envs.add(t.env)
        if not t.success:
            continue
        n = sum(_ok(e) for e in events)
        for key in ((t.env, t.task_id), (t.env, None)):
            out.fewest[key] = min(n, out.fewest.get(key, n))
        if _done(t) is True:
            out.done_envs.add(t.env)
    return out


def _same_call(a: CallEvent, b: CallEvent) -> bool:
    def key(e: CallEvent) -> tuple[str, str, str | None]:
        args = json.dumps(e.call.arguments, sort_keys=True, default=str)
        return e.name, args, e.call.raw if e.call.parse_error is not None else None

    return key(a) == key(b)


def analyze(trajectory: Trajectory, batch: Contrast) -> BehavioralReport:
    """Label one trajectory by the rules above, against the batch's contrast."""
    report = BehavioralReport()
    find = report.findings
    events = agent_calls(trajectory)
    if events or trajectory.env in batch.tool_envs:
        report.applicable.add(ACTING)
    if not events:
        if ACTING in report.applicable:
            find.append(Finding(ACTING, "no_tool_call", "made no tool call: answered in prose"))
        return report
    report.applicable |= {FORMATTING, COMPLETION}

    for e in events:
        why = _rejection(e)
        if why:
            find.append(Finding(FORMATTING, "malformed_call", f"{e.name or '<unnamed call>'}: {why}", e.index))

    ended = trajectory.termination is None or trajectory.termination in SCORED_TERMINATIONS
    n_ok = sum(_ok(e) for e in events)
    fewest = batch.fewest.get((trajectory.env, trajectory.task_id), batch.fewest.get((trajectory.env, None)))
    end = trajectory.termination or "end"
    if ended and fewest is not None and n_ok < fewest:
        detail = f"ended ({end}) after {n_ok} successful tool calls; every success made at least {fewest}"
        find.append(Finding(COMPLETION, "stopped_early", detail))
    elif ended and _done(trajectory) is False and trajectory.env in batch.done_envs:
        detail = f"ended ({end}) while the environment was not done; successful episodes reached done"
        find.append(Finding(COMPLETION, "not_done", detail))

    errored = [e for e in events if e.errored and e.result is not None and not _OVER.search(e.result.text)]
    if errored:
        report.applicable.add(RECOVERY)
    for e in errored:
        later = events[e.index + 1 :]
        again = next((x for x in later if _same_call(e, x)), None)
        if again is not None:
            find.append(Finding(RECOVERY, "repeated_failed_call", f"repeated the failed call {e.name}", again.index))
        elif not any(_ok(x) for x in later):
            why = " ".join(e.result.text.split())[:120] if e.result is not None else ""
            find.append(Finding(RECOVERY, "gave_up", f"no successful tool call after {e.name} failed ({why})", e.index))
    return report


def analyze_batch(trajectories: Sequence[Trajectory], tool_envs: Iterable[str] = ()) -> dict[str, BehavioralReport]:
    """Every trajectory's report, contrasted with this batch: trajectory id -> report. `tool_envs`: environments
    known to offer tools (even where no trajectory of the batch called one)."""
    batch = contrast(trajectories)
    batch.tool_envs |= set(tool_envs)
    return {t.id: analyze(t, batch) for t in trajectories}


class BehavioralAnalyst(RuleAnalyst):
    """The Analyst protocol over `analyze_batch`: a fixed dictionary, labels from the items given."""

    name = "behavioral"
    capabilities = CAPABILITIES
    definitions = DEFINITIONS

    def __init__(self) -> None:
        self._reports: dict[str, BehavioralReport] = {}
        self._batch: tuple[str, ...] | None = None

    def prepare(self, items: Sequence[DiagnosisItem]) -> None:
        key = tuple(i.id for i in items)
        if key != self._batch:
            tool_envs = {i.trajectory.env for i in items if i.offers_tools}
            self._reports.update(analyze_batch([i.trajectory for i in items], tool_envs))
            self._batch = key

    def report(self, item: DiagnosisItem) -> BehavioralReport:
        if item.id not in self._reports:
            self.prepare([item])
        return self._reports[item.id]

    def batch_warnings(self, items: Sequence[DiagnosisItem]) -> list[str]:
        envs = sorted({i.trajectory.env for i in items} - {i.trajectory.env for i in items if i.success})
        if not envs:
            return []
        return [
            f"no successful trajectory of {', '.join(envs)}: the behavioral analyzer's completion contrast "
            "(fewest successful tool calls) is off there"
        ]


__all__ = [
    "CAPABILITIES",
    "DEFINITIONS",
    "BehavioralAnalyst",
    "BehavioralReport",
    "Contrast",
    "analyze",
    "analyze_batch",
    "contrast",
]
