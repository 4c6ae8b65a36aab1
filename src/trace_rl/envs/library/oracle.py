"""`OracleClient`: a model client that plays a task's gold solution the way the policy asks for it, optionally with
one capability removed.

It asks for name and postcode when the member identifies that way, makes the gold reads, asks one confirmation
question covering every requested change, makes the gold writes, then says the facts to communicate (or refuses with
them). Its step is the number of assistant messages after the greeting, so it follows the scripted member. Used by
tests and dry runs to show that every generated task is solvable within the rules.

Ablations (`ablate=`) remove one capability each, to show that each family needs its own:
- `no_tools`: answers from the request alone, without any tool call (and says nothing it did not read);
- `skip_checks`: does what the member asks even when the policy forbids it (precondition verification);
- `first_request_only`: handles the first requested change and closes (multi-step completion);
- `first_available_copy`: lends the first copy on the shelf, ignoring the member's constraints (structured data).
"""

from __future__ import annotations

from typing import Any

from trace_rl.envs.library.data_model import LibraryDB
from trace_rl.envs.library.scenario import UserScript
from trace_rl.envs.library.tools import LibraryTools
from trace_rl.envs.library.user import WRITE_VERBS
from trace_rl.models.base import ModelResponse, SamplingParams
from trace_rl.types import Action, Message, Task, ToolCall


def _confirmation(script: UserScript) -> str:
    parts = []
    for request in script.requests:
        if request.kind == "ask" or not request.match:
            continue
        keys = [f"{float(k[1:]):.2f}" if k.startswith("#") else k for k in request.match[0]]
        parts.append(f"{WRITE_VERBS[request.kind][0]} {' '.join(keys)}")
    return f"Shall I {' and '.join(parts)}?"


ABLATIONS = ("no_tools", "skip_checks", "first_request_only", "first_available_copy")


def _ablated_actions(task: Task, ablate: str | None) -> tuple[list[Action], list[str]]:
    """The actions to play and the facts to say, under an ablation."""
    criteria = task.evaluation_criteria
    actions = list((criteria.actions if criteria else None) or [])
    communicate = list((criteria.communicate_info if criteria else None) or [])
    family = task.metadata.get("family")
    tools = LibraryTools(None)
    if ablate == "no_tools":
        return [], []
    if ablate == "first_request_only" and family == "multi_step":
        writes = [i for i, a in enumerate(actions) if tools.mutates_state(a.name)]
        keep = actions[: writes[0] + 1] if writes else actions
        return keep, communicate[:1]
    if ablate == "first_available_copy" and family == "copy_selection":
        db = _start_db(task)
        book = next(a.arguments["book_id"] for a in actions if a.name == "get_book_copies")
        first = next(c.copy_id for c in db.book_copies(book) if c.status == "available")
        out = [
            a if a.name != "check_out" else a.model_copy(update={"arguments": {**a.arguments, "copy_id": first}})
            for a in actions
        ]
        return out, communicate
    if ablate == "skip_checks" and family == "precondition_refusal":
        return [*actions, _forbidden_write(task)], communicate
    return actions, communicate


def _start_db(task: Task) -> LibraryDB:
    from trace_rl.envs.library.domain import LibraryEnvironment

    env = LibraryEnvironment()
    env.reset(task)
    return env.tools.db


def _forbidden_write(task: Task) -> Action:
    """What the member asked for in a refusal task, which the policy forbids."""
    db = _start_db(task)
    actions = task.evaluation_criteria.actions if task.evaluation_criteria else []
    member = next(a.arguments["member_id"] for a in actions or [] if a.name == "get_member_details")
    kind = UserScript.model_validate(task.metadata["user_script"]).requests[0].kind
    if kind == "renew":
        due = (task.evaluation_criteria.communicate_info or [""])[0]  # type: ignore[union-attr]
        copy_id = next(ln.copy_id for ln in db.member_loans(member) if ln.due == due)
        return Action(name="renew_loan", arguments={"copy_id": copy_id})
    book = next(a.arguments["book_id"] for a in actions or [] if a.name == "get_book_copies")
    if kind == "place_hold":
        return Action(name="place_hold", arguments={"member_id": member, "book_id": book})
    copy_id = next(c.copy_id for c in db.book_copies(book) if c.status == "available")
    return Action(name="check_out", arguments={"member_id": member, "copy_id": copy_id})


def plan(task: Task, ablate: str | None = None) -> list[Message]:
    """The oracle's assistant messages, in order."""
    script = UserScript.model_validate(task.metadata["user_script"])
    actions, communicate = _ablated_actions(task, ablate)
    steps: list[Message] = []
    if "email" not in script.facts and "first_name" in script.facts:
        steps.append(Message(role="assistant", content="Could you tell me your first name, last name and postcode?"))
    confirmed = False
    tools = LibraryTools(None)
    for i, action in enumerate(actions):
        if tools.mutates_state(action.name) and not confirmed:
            steps.append(Message(role="assistant", content=_confirmation(script)))
            confirmed = True
        call = ToolCall(id=f"oracle_{i}", name=action.name, arguments=dict(action.arguments))
        steps.append(Message(role="assistant", tool_calls=[call]))
    facts = " ".join(communicate)
    if ablate == "no_tools":
        final = "I'm sorry, I can't look that up right now."
    elif confirmed:
        final = f"All done. {facts}".strip()
    elif task.metadata.get("family") == "precondition_refusal":
        final = f"I'm sorry, I can't do that under our policy. From your record: {facts}."
    else:
        final = f"Here is the answer: {facts}."
    steps.append(Message(role="assistant", content=final))
    return steps


class OracleClient:
    """Plays `plan(task)`; the n-th call (after the greeting) returns the n-th step (the last one thereafter)."""

    def __init__(self, task: Task, *, ablate: str | None = None, name: str = "library-oracle") -> None:
        if ablate is not None and ablate not in ABLATIONS:
            raise ValueError(f"unknown ablation '{ablate}' (known: {', '.join(ABLATIONS)})")
        self.name = name if ablate is None else f"{name}-{ablate}"
        self.steps = plan(task, ablate)

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        *,
        adapter: str | None = None,
        sampling: SamplingParams | None = None,
    ) -> ModelResponse:
        done = sum(1 for m in messages if m.role == "assistant") - 1  # minus the greeting
        step = self.steps[min(max(done, 0), len(self.steps) - 1)]
        return ModelResponse(
            message=step.model_copy(deep=True), finish_reason="tool_calls" if step.tool_calls else "stop"
        )

    async def aclose(self) -> None:
        """Nothing to release."""
