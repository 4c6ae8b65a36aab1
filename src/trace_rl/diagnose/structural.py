"""The reference-guided structural analyzer: labels capabilities by comparing a trajectory with its task's gold actions.

No LLM. Where a task carries gold actions (τ² and the library domain do), every agent tool call is lined up against
the gold sequence and deficits are named; each deficit makes one capability LACKING. A capability is NA when the task
does not need it (rules below), PRESENT when it is needed and no deficit was found. Being deterministic, its labeling
runs all agree; the stage still runs the same aggregation (TRACE §3.3), with N = 1 by default.

Capabilities (general names mapping onto the paper's types, docs/method-notes.md §1) and detection rules. "Write" = a
state-changing tool (the domain's WRITE tools, else a name heuristic); gold writes are matched one-to-one to the agent's
writes by name and compared arguments (`compare_args`, else all arguments).

- `tool_call_formatting` — applicable when the task has gold actions or the agent called a tool. LACKING: a call whose
  arguments did not parse, an unknown tool, a call rejected for missing / unexpected arguments, or a write that differs
  from the gold write only in argument keys or value format (case, '#'-prefixes, spacing, "12" vs 12).
- `precondition_verification` — applicable when the gold solution makes no write (refusal / information tasks), when a
  gold write is preceded in gold by reads (identifying the account, reading the record, checking eligibility), or when
  the agent attempted a write the gold does not make. LACKING: the agent issued a gold write's call before making
  every read that precedes that write in gold (same tool, the same identifying arguments; free-text values such as
  titles and queries are not compared; calculator / think / transfer tools are not reads); or attempted a write
  although the gold makes none; or attempted a write of a kind the gold does not make; or made an extra successful
  write of a gold kind.
- `multi_step_task_completion` — applicable when the gold makes at least one write. LACKING: some gold write was never
  attempted (no agent call of that tool is left to match it).
- `tool_calling_precision` — applicable when the gold makes at least one write. LACKING: the agent called a gold write's
  tool but an argument holds another value that it took from an earlier tool result or user message, other than a
  sibling record of the required one (below); or a wrong option (boolean, null, or a literal such as a reason code that
  appears nowhere in the conversation).
- `structured_data_reasoning` — applicable when the gold makes a write or the task requires communicated facts
  (`communicate_info` graded by COMMUNICATE). LACKING: a write argument holds a value that sits in the same earlier tool
  result as the required value (the wrong record or field picked from a list: the wrong copy, variant, loan, price);
  or a value found in no earlier result or message where the required one is a number or was shown (miscomputed,
  miscombined or invented); or a required fact is absent from the agent's replies.

Limits: a required read made through a different tool than the gold's (e.g. identifying a user by name and postcode
where the gold uses the email) is not recognised; user-side (dual-control) gold actions are ignored; trajectories whose
task has no gold actions are labeled NA throughout, with a warning.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trace_rl.artifacts.capabilities import Label
from trace_rl.diagnose import causes
from trace_rl.diagnose.calls import CallEvent, WriteOracle, agent_calls, heuristic_is_write
from trace_rl.diagnose.causes import CAUSE_CAPABILITIES, CAUSE_DEFINITIONS, CLAIMS, ELICIT, NUMERIC, POLICY
from trace_rl.diagnose.items import DiagnosisItem
from trace_rl.diagnose.rule_analyst import RuleAnalyst
from trace_rl.types import Action, RewardType, Task, ToolCall, Trajectory

FORMATTING = "tool_call_formatting"
PRECONDITION = "precondition_verification"
COMPLETION = "multi_step_task_completion"
PRECISION = "tool_calling_precision"
REASONING = "structured_data_reasoning"

DEFINITIONS: dict[str, str] = {
    PRECONDITION: (
        "Before any state-changing tool call, the agent retrieves the current record it is about to change and "
        "confirms the change is permitted; it makes no state change that the request and policy do not call for, "
        "including any change when the correct outcome is to refuse or only to inform. Lacking when a write is issued "
        "without first reading the record it modifies, or when a write is made that the correct solution does not make."
    ),
    PRECISION: (
        "When the agent calls the state-changing tool the task requires, every argument carries exactly the value the "
        "request and policy call for. Lacking when the right tool is called with a wrong value carried over from "
        "elsewhere in the conversation (e.g. the total owed instead of the amount the user asked to pay, an id the "
        "user mentioned for another purpose) or with a wrong option (a flag, a reason code)."
    ),
    COMPLETION: (
        "The agent carries out every state change the request requires before ending the conversation. Lacking when "
        "one or more required writes are never attempted because the agent stops, hands off or loops after completing "
        "only part of the request."
    ),
    REASONING: (
        "The agent reads tool records correctly: from a list of similar records it picks the record or field that "
        "meets every stated constraint, derives values (totals, dates, combined lists) correctly, and reports the "
        "facts the task asks for. Lacking when a call uses a sibling record or field from the same tool result instead "
        "of the required one, uses a value found in no record (miscomputed or invented), or the replies omit a "
        "required fact."
    ),
    FORMATTING: (
        "Every tool call is executable as written: arguments are valid JSON, the tool exists, required arguments are "
        "present and no unknown ones are added, and values use the exact format of the records (case, prefixes, "
        "types). Lacking when a call fails to parse, names an unknown tool, is rejected for missing or unexpected "
        "arguments, or differs from the required call only in the format of a value."
    ),
}
DEFINITIONS.update(CAUSE_DEFINITIONS)
CAPABILITIES: tuple[str, ...] = (PRECONDITION, PRECISION, COMPLETION, REASONING, FORMATTING, *CAUSE_CAPABILITIES)


def _generic(name: str) -> bool:
    """Tools that read no record (calculator, scratchpad, hand-off): never a required read."""
    return name.lower().startswith(("calculate", "think", "transfer"))


# -- value comparison -----------------------------------------------------------------------------------------------
def _canon(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, list):
        return [_canon(v) for v in value]
    if isinstance(value, dict):
        return {k: _canon(v) for k, v in value.items()}
    return value


def values_equal(a: Any, b: Any) -> bool:
    return _canon(a) == _canon(b)


def _numeric(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return _canon(float(value.strip().replace(",", "")))
        except ValueError:
            return value
    return _canon(value)


def _loose(value: Any) -> str:
    return re.sub(r"[^0-9a-z.]", "", json.dumps(_numeric(value), sort_keys=True, default=str).lower()).strip(".")


def format_equal(a: Any, b: Any) -> bool:
    """Equal up to case, punctuation, spacing and number-vs-string: '#W12' ~ 'w12', '12' ~ 12, 12.0 ~ 12."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(format_equal(x, y) for x, y in zip(a, b, strict=True))
    return _loose(a) == _loose(b) and _loose(a) != ""


def _number_forms(x: float) -> list[str]:
    forms = {str(x), f"{x:.2f}", f"{x:,.2f}"}
    if float(x).is_integer():
        forms.add(str(int(x)))
    return sorted(forms)


def in_context(value: Any, context: str) -> bool:
    """Does `value` appear verbatim (case-insensitively) in `context`? Lists: every element does."""
    if isinstance(value, list):
        return bool(value) and all(in_context(v, context) for v in value)
    if isinstance(value, dict):
        return all(in_context(v, context) for v in value.values())
    if isinstance(value, bool) or value is None:
        return False
    low = context.lower()
    if isinstance(value, (int, float)):
        return any(re.search(rf"(?<![\w.]){re.escape(f)}(?!\w|\.\d)", low) for f in _number_forms(value))
    text = str(value).strip().lower()
    return len(text) >= 2 and text in low


def _read_done(gold: Action, event: CallEvent) -> bool:
    """Did the agent make this gold read? Same tool, a successful result, and the same identifying arguments:
    free-text values (containing spaces: titles, queries) are not compared, identifiers are up to format. An errored
    result counts (some gold reads fail on purpose, e.g. a lookup with the wrong email the user first gives)."""
    if event.name != gold.name or event.malformed:
        return False
    for key, want in gold.arguments.items():
        if isinstance(want, str) and len(want.split()) > 1:
            continue
        if not format_equal(want, event.call.arguments.get(key)):
            return False
    return True


def _call_text(name: str, args: Mapping[str, Any]) -> str:
    return f"{name}({json.dumps(args, ensure_ascii=False, default=str, sort_keys=True)})"


# -- analysis ---------------------------------------------------------------------------------------------------------
@dataclass
class Finding:
    capability: str
    kind: str
    detail: str
    call_index: int | None = None


@dataclass
class StructuralReport:
    """Which capabilities the task needs and which deficits the trajectory shows."""

    applicable: set[str] = field(default_factory=set)
    findings: list[Finding] = field(default_factory=list)
    has_reference: bool = True
    user_fault: str | None = None  # the simulated user, not the agent, kept the required change from happening

    def labels(self) -> dict[str, Label]:
        lacking = {f.capability for f in self.findings}
        out = {}
        for cap in CAPABILITIES:
            if cap in lacking:
                out[cap] = Label.LACKING
            elif cap in self.applicable:
                out[cap] = Label.PRESENT
            else:
                out[cap] = Label.NA
        return out

    def notes(self) -> list[str]:
        """One line per distinct finding ("(×3)" when repeated)."""
        counts: dict[str, int] = {}
        for f in self.findings:
            line = f"{f.capability}: {f.detail}"
            counts[line] = counts.get(line, 0) + 1
        lines = [line if n == 1 else f"{line} (×{n})" for line, n in counts.items()]
        return ([f"user: {self.user_fault}"] if self.user_fault else []) + lines


def _compare_keys(gold: Action, call: ToolCall) -> list[str]:
    if gold.compare_args is not None:
        return list(gold.compare_args)
    return sorted(set(gold.arguments) | set(call.arguments))


def _matches(gold: Action, call: ToolCall) -> bool:
    keys = _compare_keys(gold, call)
    return all(k in call.arguments and values_equal(gold.arguments.get(k), call.arguments[k]) for k in keys)


def classify_value(
    want: Any, have: Any, event: CallEvent, task: Task | None = None, users: Sequence[str] = ()
) -> tuple[str, str, str]:
    """(capability, finding kind, why) for an argument value `have` where the gold needs `want`."""
    if format_equal(want, have):
        return FORMATTING, "value_format", f"{have!r} is {want!r} in the wrong format"
    preference = causes.unasked_preference(want, have, task, [event.said])
    if preference is not None:
        return ELICIT, "preference_not_asked", preference
    if isinstance(have, bool) or have is None:
        return PRECISION, "wrong_choice", f"passed {have!r} instead of {want!r}"
    if in_context(have, event.context):
        if any(in_context(want, r) and in_context(have, r) for r in event.results):
            return REASONING, "wrong_record_selected", f"picked {have!r} instead of {want!r} from the same tool result"
        return PRECISION, "wrong_value_from_context", f"passed {have!r} (seen earlier) instead of {want!r}"
    if isinstance(want, str) and not in_context(want, event.context):
        return PRECISION, "wrong_choice", f"passed {have!r} instead of the option {want!r}"
    if causes.is_number(want) and causes.is_number(have):  # a number seen nowhere: computed, and wrongly
        return NUMERIC, "miscomputed", f"computed {have!r}, required {want!r}"
    return REASONING, "underived_value", f"passed {have!r}, found in no earlier result or message; required {want!r}"


def _diff_findings(
    gold: Action, event: CallEvent, task: Task | None = None, users: Sequence[str] = ()
) -> list[Finding]:
    """Why a same-tool agent call does not match its gold write, one finding per differing argument (nested lists of
    records compared field by field, so a wrong count inside `passengers` or `payment_methods` is named)."""
    out: list[Finding] = []
    call = event.call
    for key in _compare_keys(gold, call):
        want, have = gold.arguments.get(key), call.arguments.get(key)
        if key not in call.arguments:
            out.append(Finding(FORMATTING, "missing_argument", f"{call.name}: argument '{key}' missing", event.index))
        elif key not in gold.arguments:
            out.append(Finding(FORMATTING, "unexpected_argument", f"{call.name}: unexpected '{key}'", event.index))
        elif not values_equal(want, have):
            for path, w, h in _leaf_diffs(key, want, have):
                cap, kind, why = classify_value(w, h, event, task, users)
                out.append(Finding(cap, kind, f"{call.name}.{path}: {why}", event.index))
    return out


def _leaf_diffs(path: str, want: Any, have: Any) -> list[tuple[str, Any, Any]]:
    """The differing leaves of two argument values of the same shape (else the values themselves)."""
    if isinstance(want, list) and isinstance(have, list) and len(want) == len(have) and want:
        pairs = [(f"{path}[{i}]", w, h) for i, (w, h) in enumerate(zip(want, have, strict=True))]
        return [d for p, w, h in pairs if not values_equal(w, h) for d in _leaf_diffs(p, w, h)]
    if isinstance(want, dict) and isinstance(have, dict) and set(want) == set(have):
        return [
            d for k in want if not values_equal(want[k], have[k]) for d in _leaf_diffs(f"{path}.{k}", want[k], have[k])
        ]
    return [(path, want, have)]


def _flat(value: Any) -> set[str]:
    if isinstance(value, dict):
        return {x for v in value.values() for x in _flat(v)}
    if isinstance(value, list):
        return {x for v in value for x in _flat(v)}
    return {_loose(value)} if value is not None and not isinstance(value, bool) else set()


def _serves(read: Action, write: Action, writes: Sequence[Action]) -> bool:
    """Is a gold read required before a gold write? A search finds options (choosing among them is record
    selection, not a precondition): never. Another read is required unless it only serves another branch of the
    reference: it shares an identifying argument value (a user, a reservation) with some other gold write and none
    with this one. A read that shares values with no write (a member's details before renewing a loan) stays
    required."""
    if read.name.lower().startswith("search"):
        return False
    ids = {_loose(v) for v in read.arguments.values() if not (isinstance(v, str) and len(v.split()) > 1)}
    if ids & _flat(write.arguments):
        return True
    return not any(ids & _flat(w.arguments) for w in writes if w is not write)


def _communicated(task: Task) -> list[str]:
    criteria = task.evaluation_criteria
    if criteria is None or not criteria.communicate_info:
        return []
    basis = criteria.reward_basis
    if basis is not None and RewardType.COMMUNICATE not in basis:
        return []
    return list(criteria.communicate_info)


def analyze(trajectory: Trajectory, task: Task | None, is_write: WriteOracle = heuristic_is_write) -> StructuralReport:
    """Line the agent's calls up against the task's gold actions, name the deficits and the causes (causes.py)."""
    criteria = task.evaluation_criteria if task is not None else None
    if criteria is None or criteria.actions is None:
        return StructuralReport(has_reference=False)
    gold = [a for a in criteria.actions if a.requestor == "assistant"]
    gold_writes = [(i, a) for i, a in enumerate(gold) if is_write(a.name)]
    gold_write_names = {a.name for _, a in gold_writes}
    report = StructuralReport()
    events = agent_calls(trajectory)
    find = report.findings
    users = [m.content for m in trajectory.messages if m.role == "user" and m.content]

    if gold or events:
        report.applicable.add(FORMATTING)
    for e in events:
        if e.malformed:
            find.append(Finding(FORMATTING, "malformed_call", f"{e.name or '<unnamed call>'}: {e.malformed}", e.index))

    writes = [e for e in events if is_write(e.name) and not e.malformed and not causes.is_transfer(e.name)]
    required = {
        pos: [
            r
            for r in gold[:pos]
            if not is_write(r.name) and not _generic(r.name) and _serves(r, w, [x for _, x in gold_writes])
        ]
        for pos, w in gold_writes
    }
    if gold_writes:
        report.applicable |= {COMPLETION, PRECISION, REASONING, POLICY, ELICIT}
        if any(_flat_numbers(w.arguments) for _, w in gold_writes):
            report.applicable.add(NUMERIC)
    if not gold_writes or any(required.values()):
        report.applicable.add(PRECONDITION)

    # one-to-one matching: exact matches first, then the closest same-tool call for each unmatched gold write
    used: dict[int, int] = {}  # agent call index -> gold position
    unmatched: list[tuple[int, Action]] = []
    missing: list[Action] = []
    for pos, g in gold_writes:
        hit = next((e for e in writes if e.index not in used and e.name == g.name and _matches(g, e.call)), None)
        if hit is None:
            unmatched.append((pos, g))
        else:
            used[hit.index] = pos
    for pos, g in unmatched:
        same = [e for e in writes if e.index not in used and e.name == g.name]
        if not same:
            missing.append(g)
            continue
        best = min(same, key=lambda e: (len(_diff_findings(g, e, task, users)), e.errored, e.index))
        used[best.index] = pos
        find.extend(_diff_findings(g, best, task, users))
    _missing_writes(report, trajectory, events, missing)

    # reading the record before changing it
    for e in writes:
        if e.index not in used:
            continue
        for r in required[used[e.index]]:
            if not any(_read_done(r, p) for p in events[: e.index]):
                detail = f"called {e.name} without first calling {_call_text(r.name, r.arguments)}"
                find.append(Finding(PRECONDITION, "missing_read", detail, e.index))

    # state changes the reference does not make
    unwanted: list[CallEvent] = []
    for e in writes:
        if e.index in used:
            continue
        cap = PRECONDITION
        if not gold_write_names:
            kind, detail = "forbidden_write", f"called {e.name} although the correct outcome changes nothing"
        elif e.name not in gold_write_names:
            kind, detail = "unrequested_write", f"called {e.name}, a change the correct solution does not make"
        elif not e.errored:
            cap, kind = REASONING, "extra_record"
            detail = f"also made {_call_text(e.name, e.call.arguments)}: a record the request does not cover"
        else:
            continue  # a failed retry of a required write
        report.applicable.add(cap)
        find.append(Finding(cap, kind, detail, e.index))
        unwanted.append(e)
    _claims(report, trajectory, unwanted)
    _charges(report, trajectory, events, writes)
    for _, field_note in causes.asked_for_recorded(trajectory):
        report.applicable.add(ELICIT)
        find.append(Finding(ELICIT, "asked_recorded", field_note))

    # facts the user must be told
    facts = _communicated(task) if task is not None else []
    if report.user_fault or any(f.kind in ("transferred_instead", "refused_instead") for f in find):
        facts = []  # the facts hang on the change that never came: already explained
    if facts:
        report.applicable.add(REASONING)
        texts = [m.text for m in trajectory.messages if m.role == "assistant" and m.content]
        replies = [t.replace(",", "").lower() for t in texts]
        stated = causes.stated_amounts(texts)
        for info in facts:
            if any(info.lower() in r for r in replies):
                continue
            if re.fullmatch(r"\d+(?:\.\d+)?", info.strip()) and stated:
                report.applicable.add(NUMERIC)
                shown = ", ".join(f"${x:g}" for x in sorted(stated)[:4])
                find.append(Finding(NUMERIC, "misstated_figure", f"never told the user {info!r}; stated {shown}"))
            else:
                find.append(Finding(REASONING, "missing_fact", f"never told the user {info!r}"))
    return report


def _flat_numbers(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_flat_numbers(v) for v in value.values())
    if isinstance(value, list):
        return any(_flat_numbers(v) for v in value)
    return causes.is_number(value)


def _missing_writes(
    report: StructuralReport,
    trajectory: Trajectory,
    events: list[CallEvent],
    missing: list[Action],
) -> None:
    """Name why required changes were never attempted: the simulated user ended it, the agent refused or handed off
    (policy lens), or it stopped (early give-up)."""
    declined = causes.refusals(trajectory)
    transfers = [e for e in events if causes.is_transfer(e.name)]
    if declined or transfers:
        report.applicable.add(POLICY)
    if not missing:
        return
    names = ", ".join(_call_text(g.name, g.arguments) for g in missing)
    fault = causes.user_fault(trajectory)
    if fault is not None and not transfers:
        report.user_fault = f"{fault}; never called {names}"
        return
    if transfers:
        why = str(transfers[0].call.arguments.get("summary") or "")[:200]
        detail = f"transferred to a human instead of calling {names}" + (f" ({why!r})" if why else "")
        report.findings.append(Finding(POLICY, "transferred_instead", detail, transfers[0].index))
    elif declined:
        detail = f"declined ({declined[-1][1][:160]!r}) instead of calling {names}"
        report.findings.append(Finding(POLICY, "refused_instead", detail))
    else:
        detail = f"never called {names}: the conversation ended ({trajectory.termination or 'end'}) without it"
        report.findings.append(Finding(COMPLETION, "missing_write", detail))


def _claims(report: StructuralReport, trajectory: Trajectory, unwanted: list[CallEvent]) -> None:
    claims = causes.contradicted_claims(trajectory)
    if not claims:
        return
    report.applicable.add(CLAIMS)
    first = claims[0][0]
    acted = [e for e in unwanted if e.position > first]
    if acted:
        detail = f"{claims[0][1]}; then called {', '.join(dict.fromkeys(e.name for e in acted))}"
        report.findings.append(Finding(CLAIMS, "acted_on_claim", detail, acted[0].index))


def _charges(
    report: StructuralReport, trajectory: Trajectory, events: list[CallEvent], writes: list[CallEvent]
) -> None:
    """A write that charged or refunded an amount the agent's confirmation did not state (while stating others)."""
    messages = trajectory.messages
    for e in writes:
        if e.errored or e.result is None:
            continue
        amount = causes.new_charge(e.results, e.result.content)
        if amount is None:
            continue
        report.applicable.add(NUMERIC)
        before = [m.content for m in messages[: e.position] if m.role == "assistant" and m.content]
        stated = causes.stated_amounts(before)
        if stated and all(abs(abs(amount) - x) > 0.01 for x in stated):
            shown = ", ".join(f"${x:g}" for x in sorted(stated)[:4])
            detail = f"{e.name} charged ${abs(amount):g}; the confirmation stated {shown}"
            report.findings.append(Finding(NUMERIC, "charge_not_confirmed", detail, e.index))


class StructuralAnalyst(RuleAnalyst):
    """The Analyst protocol over `analyze`: a fixed dictionary, deterministic labels."""

    name = "structural"
    capabilities = CAPABILITIES
    definitions = DEFINITIONS

    def __init__(self, is_write: WriteOracle = heuristic_is_write) -> None:
        self.is_write = is_write
        self._cache: dict[str, StructuralReport] = {}

    def report(self, item: DiagnosisItem) -> StructuralReport:
        if item.id not in self._cache:
            self._cache[item.id] = analyze(item.trajectory, item.task, self.is_write)
        return self._cache[item.id]

    def batch_warnings(self, items: Sequence[DiagnosisItem]) -> list[str]:
        missing = [i.id for i in items if not self.report(i).has_reference]
        if not missing:
            return []
        shown = ", ".join(missing[:5]) + (" …" if len(missing) > 5 else "")
        return [f"{len(missing)} trajectories have no gold actions and are labeled NA throughout ({shown})"]


__all__ = [
    "CAPABILITIES",
    "DEFINITIONS",
    "Finding",
    "StructuralAnalyst",
    "StructuralReport",
    "analyze",
]
