"""Generator `library_decisions`: capability environments of TRACE's Definition 2 over the library target.

A task is a library task (a family's seed from the fresh range, neither train nor test) opened at the point where
the capability decides the outcome: the member's opening line and the gold tool calls before that point, with their
results, become the task's message history, and the episode goes on from there with the target's own tools, DB,
policy, prompt and scripted member. The reward scores the agent's move at that point (the check `decision`) and
success is that move being right, so both depend on exercising the capability and on nothing the history already
did (Kang et al. 2026, Definition 2: every task needs the capability; the target's tools, state and policy are kept).

The decisions (history → the right move):
- `identify_first` (member-facing families, email given): the opening → the email lookup, exact, before any account
  tool, and made once (a repeat halves the score); a quarter of its tasks are catalog questions (the contrast), whose
  right move is the catalog search and not an identification.
- `confirm_before_change` (authenticated_write, copy_selection, multi_step): the reads before the first write → a
  yes/no question naming that change, with no write before it; a quarter of its tasks are catalog questions (the
  contrast), half of them opened at the opening (the right move: the catalog search, no identification) and half
  after the read (the right move: the answer from the record, no question).
- `quote_blocking_value` (precondition_refusal): every gold read → no write, and a reply quoting the value that blocks
  the request.
- `choose_lendable_copy` (copy_selection): the reads before the check out → the first copy id named (in a reply or a
  call) is the one that may be lent.
- `answer_from_record` (lookup_answer): the catalog lookup → a reply with the record's value, before any other call.
- `finish_every_request` (multi_step): the first request handled whole (its reads, the yes/no question, the member's
  yes, the write, the result told) and the member's reminder of the next → the next request's first step, not an
  ending.

Departures: the paper's environments are written by an LLM per capability; these are fixed decision kinds of the
library's policy, picked per capability by its type and the evidence tasks' families (`decisions_for`). A decision
is one move, so an environment trains the move and not the rest of the conversation after it.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trace_rl.envs.library.scenario import Request
from trace_rl.envs.library.user import is_confirmation, matches, normalize
from trace_rl.envs.synthetic.generators import add_library_distractors, finish
from trace_rl.errors import UserError
from trace_rl.types import Action, InitialState, Message, Task, ToolCall

if TYPE_CHECKING:
    from trace_rl.artifacts.environments import EnvSpec
    from trace_rl.envs.base import Domain

CONTRAST_SHARE = 0.25  # tasks of a decision's contrast families
_COPY_ID = re.compile(r"\bC\d{4}\b")
WRITES = ("check_out", "return_copy", "renew_loan", "place_hold", "cancel_hold", "pay_fine")
VERBS = {
    "check_out": "check out",
    "return": "return",
    "renew": "renew",
    "place_hold": "place a hold on",
    "cancel_hold": "cancel the hold on",
    "pay_fine": "pay",
}


@dataclass(frozen=True)
class Case:
    """What a judge needs of one decision task (stored as `task.metadata["decision"]`)."""

    kind: str
    history: int  # messages the history replays (the agent's moves start after them)
    expected: dict[str, Any]  # decision-specific: the right call, request, value or copy

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "history": self.history, "expected": self.expected}

    @classmethod
    def of(cls, task: Task) -> Case:
        raw = task.metadata["decision"]
        return cls(kind=raw["kind"], history=int(raw["history"]), expected=dict(raw["expected"]))


def agent_moves(case: Case, messages: list[Message]) -> list[Message]:
    """The agent's messages after the replayed history."""
    return [m for m in messages[case.history :] if m.role == "assistant"]


def _first_write(moves: list[Message]) -> int | None:
    for i, m in enumerate(moves):
        if any(c.name in WRITES for c in m.tool_calls or []):
            return i
    return None


def _first_text(moves: list[Message]) -> tuple[int, str] | None:
    for i, m in enumerate(moves):
        if m.content and not m.tool_calls:
            return i, m.content
    return None


# -- judges: the agent's moves after the history -> a score in [0, 1] (1 = the capability was exercised) -------------
def judge_identify_first(case: Case, moves: list[Message]) -> float:
    calls = [c for m in moves for c in m.tool_calls or []]
    call = calls[0] if calls else None
    if call is None or call.parse_error is not None:
        return 0.0
    want = case.expected["call"]
    if call.name != want["name"]:
        return 0.0
    (arg, value), *_ = want["arguments"].items()
    if _key(call.arguments.get(arg, "")) != value:
        return 0.5
    # the lookup is made once, then the request goes on: trained on the first move alone, an adapter called it again
    # and again on the target (measured: the first three calls of 200 of 240 account episodes)
    return 0.5 if any(c.name == call.name for c in calls[1:]) else 1.0


def judge_confirm_before_change(case: Case, moves: list[Message]) -> float:
    if "call" in case.expected:  # the contrast at a catalog question's opening: the search
        return judge_identify_first(case, moves)
    if "value" in case.expected:  # the contrast after its read: nothing to change, so the answer and no question
        first = _first_text(moves)
        return 0.0 if first is not None and is_confirmation(first[1]) else judge_answer_from_record(case, moves)
    text = _first_text(moves)
    write = _first_write(moves)
    if text is None or (write is not None and write < text[0]):
        return 0.0
    if not is_confirmation(text[1]):
        return 0.0
    return 1.0 if matches(Request.model_validate(case.expected["request"]), text[1]) else 0.5


def judge_quote_blocking_value(case: Case, moves: list[Message]) -> float:
    if _first_write(moves) is not None:
        return 0.0
    text = _first_text(moves)
    if text is None:
        return 0.0
    return 1.0 if normalize(case.expected["value"]) in normalize(text[1]) else 0.25


def judge_choose_lendable_copy(case: Case, moves: list[Message]) -> float:
    for m in moves:
        found = [*_COPY_ID.findall(m.content or "")]
        for call in m.tool_calls or []:
            found += _COPY_ID.findall(json.dumps(call.arguments))
        if found:
            return 1.0 if found[0] == case.expected["copy_id"] else 0.0
    return 0.0


def judge_finish_every_request(case: Case, moves: list[Message]) -> float:
    if not moves:
        return 0.0
    first = moves[0]
    if first.tool_calls:
        call = first.tool_calls[0]
        wanted = [a for a in case.expected["calls"] if a["name"] == call.name]
        return (
            1.0 if call.parse_error is None and any(_same_args(a["arguments"], call.arguments) for a in wanted) else 0.0
        )
    text = first.content or ""
    return 1.0 if is_confirmation(text) and matches(Request.model_validate(case.expected["request"]), text) else 0.0


def _same_args(gold: dict[str, Any], got: dict[str, Any]) -> bool:
    from trace_rl.envs.synthetic.reward import args_equal

    return args_equal(gold, got)


def judge_answer_from_record(case: Case, moves: list[Message]) -> float:
    text = _first_text(moves)
    if text is None or normalize(case.expected["value"]) not in normalize(text[1]):
        return 0.0
    return 1.0 if text[0] == 0 else 0.5  # another call first: the answer was already in the record


# -- the right move and a move without the capability (validation plays both) ----------------------------------------
def _call(name: str, arguments: dict[str, Any]) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(id=f"move_{name}", name=name, arguments=arguments)])


def _say(text: str) -> Message:
    return Message(role="assistant", content=text)


def confirmation_text(request: Request) -> str:
    """A yes/no question the scripted member recognises as proposing `request`."""
    keys = request.match[0] if request.match else []
    named = " ".join(f"{float(k[1:]):.2f}" if k.startswith("#") else k for k in keys)
    return f"Shall I {VERBS[request.kind]} {named} for you? Please confirm."


def moves(case: Case) -> tuple[list[Message], list[Message]]:
    """(the right move, a move without the capability) for the decision of `case`."""
    e = case.expected
    if e.get("call", {}).get("name") == "search_catalog":  # a catalog question's opening (a contrast of either
        # identify_first or confirm_before_change): identifying the member is the wrong move
        return [_call("search_catalog", e["call"]["arguments"])], [
            _call("find_member_by_email", {"email": "member@example.com"})
        ]
    if case.kind == "identify_first":
        wrong = _call("get_member_details", {"member_id": e["call"]["arguments"]["email"]})
        return [_call(e["call"]["name"], e["call"]["arguments"])], [wrong]
    if case.kind == "confirm_before_change":
        if "value" in e:  # a catalog question after its read (a contrast): asking for a yes is the wrong move
            return [_say(f"{e['value']}.")], [_say("I will check out this book for you. Shall I go ahead?")]
        write = e["write"]
        return [_say(confirmation_text(Request.model_validate(e["request"])))], [
            _call(write["name"], write["arguments"])
        ]
    if case.kind == "quote_blocking_value":
        return [_say(f"I'm sorry, I can't do that: the record shows {e['value']}.")], [_say("I'm sorry, I can't.")]
    if case.kind == "choose_lendable_copy":
        return [_say(f"Copy {e['copy_id']} fits. Shall I check it out for you?")], [
            _say(f"Copy {e['wrong_copy']} is available. Shall I check it out for you?")
        ]
    if case.kind == "finish_every_request":
        first = e["calls"][0]
        right = (
            _call(first["name"], first["arguments"])
            if first["name"] not in WRITES
            else _say(confirmation_text(Request.model_validate(e["request"])))
        )
        return [right], [_say("Is there anything else I can help you with today?")]
    return [_say(f"{e['value']}.")], [_say("It is a fine book.")]


# -- the registry ------------------------------------------------------------------------------------------------------
Expect = Callable[[Task, list[Action], list[dict[str, Any]]], "tuple[int, dict[str, Any]] | None"]
Opener = Callable[[Task, list[Action], Any], "tuple[list[dict[str, Any]], dict[str, Any], int] | None"]


@dataclass(frozen=True)
class Decision:
    name: str
    types: tuple[str, ...]  # capability types (synthesize.design.TYPES) this decision exercises
    families: tuple[str, ...]
    expect: Expect | None  # (task, gold, results of the reads) -> (gold actions the history replays, expected)
    judge: Callable[[Case, list[Message]], float]
    # a history with more than reads: (task, gold, env) -> (history rows, expected, gold actions the history did)
    opens: Opener | None = None
    # families drawn for a share of the tasks whatever the evidence: tasks where the move is *not* the one trained,
    # so that the adapter learns when to make it, not only to make it
    contrast: tuple[str, ...] = ()
    definition: str = ""  # the capability the decision exercises, as a diagnosis names it (diagnose/probe.py)
    hint: str = ""  # guidance to the agent toward the right move (the environment's hint when it trains this alone)


def _writes(gold: list[Action]) -> list[int]:
    return [i for i, a in enumerate(gold) if a.name in WRITES]


def _requests(task: Task) -> list[dict[str, Any]]:
    return list(task.metadata["user_script"]["requests"])


def expect_identify(task: Task, gold: list[Action], results: list[dict[str, Any]]) -> tuple[int, dict] | None:
    if gold and gold[0].name == "search_catalog" and len(gold) == 1:  # the contrast: a catalog question
        return 0, {"call": {"name": "search_catalog", "arguments": {"query": _key(gold[0].arguments["query"])}}}
    if not gold or gold[0].name != "find_member_by_email":
        return None
    return 0, {"call": {"name": gold[0].name, "arguments": {"email": _key(gold[0].arguments["email"])}}}


def _key(value: Any) -> str:
    """An email or a title as compared: lower case, no commas, no surrounding quotes or spaces."""
    return normalize(str(value)).strip().strip("\"'").strip()


def expect_confirm(task: Task, gold: list[Action], results: list[dict[str, Any]]) -> tuple[int, dict] | None:
    writes = _writes(gold)
    if not writes:
        # the contrast: a catalog question, where neither an identification nor a yes/no question is the right move.
        # Trained after the reads only, an adapter still identified a member at the opening of catalog questions
        # (measured on the target), so half of them open there and half after the read (drawn from the world seed).
        if not (len(gold) == 1 and gold[0].name == "search_catalog"):
            return None
        if random.Random(f"trace-rl/decisions/contrast/{task.metadata.get('world_seed')}").random() < 0.5:
            return expect_identify(task, gold, results)
        return expect_answer(task, gold, results)
    first = gold[writes[0]]
    return writes[0], {"request": _requests(task)[0], "write": {"name": first.name, "arguments": first.arguments}}


def expect_refusal(task: Task, gold: list[Action], results: list[dict[str, Any]]) -> tuple[int, dict] | None:
    info = (task.evaluation_criteria.communicate_info if task.evaluation_criteria else None) or []
    if _writes(gold) or not info:
        return None
    return len(gold), {"value": str(info[0])}


def expect_copy(task: Task, gold: list[Action], results: list[dict[str, Any]]) -> tuple[int, dict] | None:
    writes = [i for i in _writes(gold) if gold[i].name == "check_out"]
    if not writes:
        return None
    copy_id = gold[writes[0]].arguments["copy_id"]
    listed = [str(c.get("copy_id")) for r in results if isinstance(r, list) for c in r if isinstance(c, dict)]
    wrong = next((c for c in listed if _COPY_ID.fullmatch(c) and c != copy_id), None)
    if wrong is None:
        return None
    return writes[0], {"copy_id": copy_id, "wrong_copy": wrong}


def expect_answer(task: Task, gold: list[Action], results: list[dict[str, Any]]) -> tuple[int, dict] | None:
    info = (task.evaluation_criteria.communicate_info if task.evaluation_criteria else None) or []
    if _writes(gold) or not info or not gold:
        return None
    return len(gold), {"value": str(info[0])}


def open_finish(task: Task, gold: list[Action], env: Any) -> tuple[list[dict[str, Any]], dict, int] | None:
    """The history of `finish_every_request`: the first request handled whole, with the member's own replies (played
    by the scripted member), ending on its reminder of the next request."""
    from trace_rl.envs.library.scenario import UserScript
    from trace_rl.envs.library.user import LibraryScriptedUser

    writes = _writes(gold)
    requests = _requests(task)
    if len(writes) < 2 or len(requests) < 2:
        return None
    script = UserScript.model_validate(task.metadata["user_script"])
    member = LibraryScriptedUser(script)
    first = Request.model_validate(requests[0])
    talk: list[Message] = [Message(role="user", content=script.opening)]

    def run(i: int, action: Action) -> None:
        call = ToolCall(id=f"history_{i}", name=action.name, arguments=dict(action.arguments))
        talk.append(Message(role="assistant", tool_calls=[call]))
        talk.append(env.execute(call).model_copy(update={"tool_call_id": call.id}))

    for i, action in enumerate(gold[: writes[0]]):
        run(i, action)
    talk.append(_say(confirmation_text(first)))
    talk.append(Message(role="user", content=member.respond(talk)))
    run(writes[0], gold[writes[0]])
    told = " ".join(f"{v}." for v in first.evidence) or "It is done."
    talk.append(_say(f"Done. {told}"))
    talk.append(Message(role="user", content=member.respond(talk)))
    if not member.handled(0) or member.pending()[:1] != [1]:
        return None
    second = [{"name": a.name, "arguments": dict(a.arguments)} for a in gold[writes[0] + 1 : writes[1] + 1]]
    return [_history_row(m) for m in talk], {"request": requests[1], "calls": second}, writes[0] + 1


def _history_row(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "id": message.tool_call_id, "content": message.content, "error": message.error}
    calls = [c.model_dump(mode="json") for c in message.tool_calls or []]
    return {"role": message.role, "content": message.content, **({"tool_calls": calls} if calls else {})}


DECISIONS: dict[str, Decision] = {
    d.name: d
    for d in (
        Decision(
            "identify_first",
            ("precondition_verification", "tool_calling_precision"),
            ("authenticated_write", "precondition_refusal", "copy_selection", "multi_step"),
            expect_identify,
            judge_identify_first,
            contrast=("lookup_answer",),
            definition=(
                "Before touching an account the agent identifies the member with the lookup the policy names (the "
                "email given), once, and does not identify anyone for a catalog question. Lacking when an account "
                "tool comes first, the lookup is wrong or repeated, or a catalog question gets an identification."
            ),
            hint=(
                "Before you read or change an account, look the member up once with the email they gave; a question "
                "about the catalog needs no identification."
            ),
        ),
        Decision(
            "confirm_before_change",
            ("precondition_verification", "multi_step_completion"),
            ("authenticated_write", "copy_selection", "multi_step"),
            expect_confirm,
            judge_confirm_before_change,
            contrast=("lookup_answer",),
            definition=(
                "Before a change to an account the agent asks the member a yes/no question naming that change and "
                "makes no write before the yes. Lacking when a write comes before any such question, or the question "
                "does not name the change."
            ),
            hint=(
                "Before you change an account, ask the member a yes/no question that names the change and the book "
                "or amount (I will renew your loan of <title>. Shall I go ahead?) and wait for the yes."
            ),
        ),
        Decision(
            "quote_blocking_value",
            ("precondition_verification",),
            ("precondition_refusal",),
            expect_refusal,
            judge_quote_blocking_value,
            definition=(
                "When a rule of the policy stops the request, the agent makes no change and tells the member the "
                "value in the record that blocks it. Lacking when it makes a write anyway, or refuses without quoting"
                " the blocking value."
            ),
            hint=(
                "When a policy rule stops the request, change nothing and tell the member the exact value in the "
                "record that blocks it (the fines, the renewals, the card status)."
            ),
        ),
        Decision(
            "choose_lendable_copy",
            ("structured_data_reasoning",),
            ("copy_selection",),
            expect_copy,
            judge_choose_lendable_copy,
            definition=(
                "From a title's copies the agent picks the one the policy lets it lend (available, not "
                "reference-only, not held for another member). Lacking when the first copy it names is another one."
            ),
            hint="Lend only a copy whose status is available and that is not reference-only; name that copy's id.",
        ),
        Decision(
            "finish_every_request",
            ("multi_step_completion",),
            ("multi_step",),
            None,
            judge_finish_every_request,
            opens=open_finish,
            definition=(
                "After one request of a multi-request message is done, the agent goes on to the next one instead of "
                "ending. Lacking when it closes the conversation or asks an open question instead of taking the next "
                "request's first step."
            ),
            hint="When one request of the member's message is done, start on the next one; end only when all are done.",
        ),
        Decision(
            "answer_from_record",
            ("structured_data_reasoning", "tool_calling_precision"),
            ("lookup_answer",),
            expect_answer,
            judge_answer_from_record,
            definition=(
                "Given the record that holds the answer, the agent replies with the record's value at once. Lacking "
                "when the reply omits or changes the value, or another call comes first."
            ),
            hint="When a tool result holds the answer, reply at once with the exact value from it.",
        ),
    )
}


def decisions_for(kind: str, families: dict[str, float]) -> tuple[dict[str, float], str]:
    """The decisions of a capability of type `kind` whose evidence tasks came from `families` (weights: evidence
    counts of the families each covers), and how they were chosen."""
    chosen = {
        d.name: float(sum(families.get(f, 0) for f in d.families))
        for d in DECISIONS.values()
        if kind in d.types and any(f in families for f in d.families)
    }
    if chosen:
        return chosen, f"decisions of type {kind} covering the evidence families"
    chosen = {d.name: 1.0 for d in DECISIONS.values() if any(f in families for f in d.families)}
    if chosen:
        return chosen, f"no decision of type {kind} covers the evidence families: every decision that does"
    return {d.name: 1.0 for d in DECISIONS.values() if kind in d.types}, f"decisions of type {kind}"


def reweighted(
    params: dict[str, Any], outcomes: list[tuple[str, bool]], direction: str | None, *, target: float = 0.4
) -> dict[str, Any] | None:
    """Calibration's move for a decision environment: the decisions re-weighted from the base policy's success on
    each (`outcomes`: (decision, success) per rollout) so that the expected success is `target` (the middle of the
    acceptance window). The weights move in a straight line toward the decision the base makes right most often (too
    hard) or least often (too easy), just as far as needed, or half-way when the success is on target already and
    another gate (all-zero, all-success groups) failed. None when there is nothing to move (one decision, another
    direction, or every decision at the same rate). A decision no rollout drew this time keeps the rate of the last
    move."""
    weights = {n: float(w) for n, w in (params.get("decisions") or {}).items()}
    seen: dict[str, list[bool]] = {}
    for name, success in outcomes:
        seen.setdefault(name, []).append(success)
    last = (params.get("moves") or [{}])[-1].get("success", {})  # a decision this draw missed keeps its last rate
    rates = {n: r for n, r in {**last, **{n: sum(v) / len(v) for n, v in seen.items()}}.items() if n in weights}
    if direction not in ("too_hard", "too_easy") or len(rates) < 2:
        return None
    total = sum(weights[n] for n in rates)
    share = {n: weights[n] / total for n in rates}
    now = sum(share[n] * rates[n] for n in rates)
    toward = (max if direction == "too_hard" else min)(rates, key=lambda n: rates[n])
    if rates[toward] == now:
        return None
    beyond = (rates[toward] - now) * (target - now) > 0  # else on target, but all-zero/all-success groups fail
    step = min(1.0, (target - now) / (rates[toward] - now)) if beyond else 0.5
    moved = {n: round(total * ((1 - step) * share[n] + step * (n == toward)), 4) for n in rates}
    moved.update({n: w for n, w in weights.items() if n not in rates})
    history = [*params.get("moves", []), {"direction": direction, "success": rates, "weights": moved}]
    return {**params, "decisions": moved, "moves": history}


def judge(task: Task, messages: list[Message]) -> float:
    """The `decision` check: the score of the agent's move at the task's decision point."""
    case = Case.of(task)
    return DECISIONS[case.kind].judge(case, agent_moves(case, messages))


# -- the generator -----------------------------------------------------------------------------------------------------
class LibraryDecisions:
    """params: `decisions` {decision: weight}; `tries` library seeds per task seed (default 8). The difficulty knob
    adds knob − 1 look-alike records from 2 on (as `library_variants` does)."""

    def __init__(self, spec: EnvSpec, target: Domain) -> None:
        from trace_rl.envs.library.splits import split_seed_span

        weights = spec.generator.params.get("decisions") or {}
        unknown = sorted(set(weights) - set(DECISIONS))
        if not weights or unknown:
            raise UserError(
                f"capability env '{spec.name}': library_decisions needs params.decisions from "
                f"{', '.join(DECISIONS)}" + (f" (unknown: {', '.join(unknown)})" if unknown else "")
            )
        self.spec = spec
        self.target = target
        self.families = set(spec.generator.params.get("families") or {})  # the evidence families, when given
        self.names = sorted(weights)
        self.weights = [float(weights[n]) for n in self.names]
        self.tries = int(spec.generator.params.get("tries", 8))
        self.forbidden = split_seed_span(spec.target.get("options"))  # the target's train and test seeds

    def library_seed(self, seed: int, salt: int, attempt: int) -> int:
        return self.spec.generator.seed_base + seed * 64 + (salt % 8) * 8 + attempt

    def make(self, seed: int, salt: int = 0) -> Task:
        from trace_rl.envs.library import make_task

        rng = random.Random(f"trace-rl/decisions/{self.spec.name}/{seed}/{salt}")
        decision = DECISIONS[rng.choices(self.names, weights=self.weights)[0]]
        for attempt in range(self.tries):
            library_seed = self.library_seed(seed, salt, attempt)
            if library_seed in self.forbidden:
                raise UserError(f"capability env '{self.spec.name}': seed {library_seed} is a target train/test seed")
            families = [f for f in decision.families if f in self.families] or list(decision.families)
            if decision.contrast and rng.random() < CONTRAST_SHARE:
                families = list(decision.contrast)
            task = make_task(rng.choice(families), library_seed)
            if self.spec.generator.difficulty >= 2:
                task = add_library_distractors(task, self.spec.generator.difficulty - 1, rng)
            opened = self.open_at(decision, task)
            if opened is not None:
                return finish(opened, self.spec, seed, {"family": task.metadata.get("family")})
        raise UserError(f"capability env '{self.spec.name}': no {decision.name} task in {self.tries} library seeds")

    def open_at(self, decision: Decision, task: Task) -> Task | None:
        return open_at(decision, task, self.target)


def open_at(decision: Decision, task: Task, target: Domain) -> Task | None:
    """`task` (a library task with gold actions) opened at `decision`: the history before the decision point
    replayed in `target`'s environment, or None when the task has no such decision point. The generator opens its
    fresh tasks here; diagnosis (`diagnose/probe.py`) opens the diagnosed train tasks."""
    gold = list((task.evaluation_criteria.actions if task.evaluation_criteria else None) or [])
    env = target.make_env()
    env.reset(task)
    if decision.opens is not None:
        opened = decision.opens(task, gold, env)
        return None if opened is None else _with_history(task, decision, *opened)
    assert decision.expect is not None
    results: list[Any] = []
    calls: list[tuple[ToolCall, Message]] = []
    for i, action in enumerate(gold):
        call = ToolCall(id=f"history_{i}", name=action.name, arguments=dict(action.arguments))
        if action.name in WRITES:
            break
        reply = env.execute(call)
        calls.append((call, reply))
        try:
            results.append(json.loads(reply.content or "null"))
        except json.JSONDecodeError:
            results.append(reply.content)
    found = decision.expect(task, gold, results)
    if found is None:
        return None
    n_actions, expected = found
    history: list[dict[str, Any]] = [{"role": "user", "content": task.metadata["user_script"]["opening"]}]
    for call, reply in calls[:n_actions]:
        history.append({"role": "assistant", "content": None, "tool_calls": [call.model_dump(mode="json")]})
        history.append({"role": "tool", "id": call.id, "content": reply.content, "error": reply.error})
    return _with_history(task, decision, history, expected)


def _with_history(task: Task, decision: Decision, history: list[dict[str, Any]], expected: dict, done: int = 0) -> Task:
    """`task` opened after `history`; gold actions whose writes the history already made (`done`) leave the
    task's gold, which stays what is left to do."""
    case = Case(kind=decision.name, history=len(history), expected=expected)
    state = task.initial_state or InitialState()
    update: dict[str, Any] = {
        "initial_state": state.model_copy(update={"message_history": history}),
        "metadata": {**task.metadata, "decision": case.as_dict()},
    }
    if done and task.evaluation_criteria is not None:
        rest = task.evaluation_criteria.actions[done:] if task.evaluation_criteria.actions else []
        update["evaluation_criteria"] = task.evaluation_criteria.model_copy(update={"actions": rest})
    return task.model_copy(update=update)


__all__ = [
    "DECISIONS",
    "Case",
    "Decision",
    "LibraryDecisions",
    "decisions_for",
    "judge",
    "moves",
    "open_at",
    "reweighted",
]
