"""The agent's prompt for the library: a system prompt (role, turn format, a compact tool list, the policy) and four
worked example exchanges given as chat turns before the conversation.

The prompt is part of the domain's definition (the same for every task) and is recorded with every run under
`PROMPT_VERSION` and `prompt_sha()`. It is short on purpose: the default model (SmolLM2-135M-Instruct) has an 8k
context and is slow on CPU. Tools are listed one line each, so a client whose chat template ignores `tools` needs no
JSON schema listing (pass it no tools, or it lists them a second time).

Why four examples, as turns (measured on SmolLM2-135M-Instruct, first agent turn of 8 `lookup_answer` test tasks,
greedy): with this system prompt and one example exchange, 2 of 8 replies were tool calls and none named a real
tool (`library-agent-v1`: 0 tool calls in 106 turns of whole episodes at temperature 0.7); with three catalog lookups
as examples, 8 of 8 were the exact gold call, with or without the policy in the prompt. The fourth example (identify
by email, then read the record) gives the member-facing families a pattern to start from; it does not show a write,
a confirmation or a refusal, so those stay for the agent to get from the policy.
The agent gets them through `LibraryDomain.example_messages()` (`trace_rl.engine.prompt.domain_prompt`).

`library-agent-v3` (the domain option `prompt`) adds a fifth example before the last lookup: a renewal, with the
identification, the record read, the confirmation question and the member's yes, the write and its result. It was
meant to bring the member-facing families within copying distance of the base model (issue #18). Measured on the
100 test tasks (SmolLM2-135M through vLLM, T = 0.3, 1 trial) it did worse than v2 (3 trials of the same tasks): 11.0 %
against 14.3 %, lookups 55 % against 72 %, every account family still at 0. v2 stays the default.

`library-agent-v4` adds a second confirmed write of another kind (a fine payment) after the renewal, and
`library-agent-v5` a confirmed write of every kind (renewal, check out, return, hold, cancelled hold, fine payment).
At the confirmation decision point (`benchmarks/decision_profile.py`, 24 seeds x 4 samples, T = 0.7) SmolLM2-135M
asks for the yes with the right change 2.1 % of the time on v3, 16.7 % on v4 and 15.6 % on v5, nearly all of it on
the kind of the last account example (fine payments: 14 of 24 on v4, 11 of 24 on v5): it copies the most recent
confirmation, verb and all ("I will pay 2.00 toward your loan of ..."), whatever the member asked for. The question
is there; naming the right change is what a confirmation environment can train (its judge gives such a question
half the reward).
"""

from __future__ import annotations

import hashlib
import inspect
import json
from functools import lru_cache
from importlib import resources
from typing import Any, NamedTuple

from trace_rl.envs.library.tools import LibraryTools
from trace_rl.envs.library.world import NOW
from trace_rl.envs.toolkit import ToolType
from trace_rl.types import Message, ToolCall

PROMPT_VERSION = "library-agent-v2"


class Exchange(NamedTuple):
    """A message to the member in the middle of an example, and the member's reply (a confirmation and its yes)."""

    agent: str
    member: str


class WorkedExample(NamedTuple):
    """One example exchange: the member's request, the agent's tool calls with their results (and any exchange with
    the member between them), the agent's answer. Its ids and titles are made up (the generated worlds use other
    ones)."""

    request: str
    steps: tuple[tuple[str, dict[str, Any], Any] | Exchange, ...]  # (tool, arguments, result) or an Exchange
    answer: str

    def calls(self) -> list[tuple[str, dict[str, Any], Any]]:
        """The example's tool calls, without its exchanges."""
        return [step for step in self.steps if not isinstance(step, Exchange)]


WORKED_EXAMPLES: tuple[WorkedExample, ...] = (
    WorkedExample(
        'Who wrote "Night Harbor"?',
        (
            (
                "search_catalog",
                {"query": "Night Harbor"},
                [{"book_id": "B090", "title": "Night Harbor", "author": "Lena Park", "year": 2015}],
            ),
        ),
        '"Night Harbor" was written by Lena Park.',
    ),
    WorkedExample(
        'What year was "The Copper Bell" published?',
        (
            (
                "search_catalog",
                {"query": "The Copper Bell"},
                [{"book_id": "B091", "title": "The Copper Bell", "author": "Omar Reyes", "year": 1998}],
            ),
        ),
        '"The Copper Bell" was published in 1998.',
    ),
    WorkedExample(
        "Hi! How much do I owe in fines? My email is sam.ortiz7@mail.com.",
        (
            ("find_member_by_email", {"email": "sam.ortiz7@mail.com"}, "M0410"),
            (
                "get_member_details",
                {"member_id": "M0410"},
                {
                    "member_id": "M0410",
                    "name": "Sam Ortiz",
                    "email": "sam.ortiz7@mail.com",
                    "postcode": "40120",
                    "card_status": "active",
                    "fines": "3.50",
                    "loans": [],
                    "holds": [],
                },
            ),
        ),
        "Your fines are 3.50.",
    ),
    WorkedExample(
        'Who wrote "Winter of Ash"?',
        (
            (
                "search_catalog",
                {"query": "Winter of Ash"},
                [{"book_id": "B092", "title": "Winter of Ash", "author": "Ada Moreau", "year": 2003}],
            ),
        ),
        '"Winter of Ash" was written by Ada Moreau.',
    ),
)

RENEWAL_EXAMPLE = WorkedExample(
    'Hi! I\'d like to renew my loan of "Glass Orchard". My email is dana.kim3@mail.com.',
    (
        ("find_member_by_email", {"email": "dana.kim3@mail.com"}, "M0522"),
        (
            "get_member_details",
            {"member_id": "M0522"},
            {
                "member_id": "M0522",
                "name": "Dana Kim",
                "email": "dana.kim3@mail.com",
                "postcode": "40388",
                "card_status": "active",
                "fines": "0.00",
                "loans": [
                    {
                        "copy_id": "C0931",
                        "book_id": "B093",
                        "title": "Glass Orchard",
                        "due": "2025-03-18",
                        "renewals": 0,
                    }
                ],
                "holds": [],
            },
        ),
        Exchange('I will renew your loan of "Glass Orchard" (copy C0931). Shall I go ahead?', "Yes, please go ahead."),
        ("renew_loan", {"copy_id": "C0931"}, {"copy_id": "C0931", "title": "Glass Orchard", "due": "2025-04-08"}),
    ),
    'Done: "Glass Orchard" is renewed and now due back on 2025-04-08.',
)
FINE_PAYMENT_EXAMPLE = WorkedExample(
    "Hello, I want to pay 2.00 toward my fines. My email is lee.moss8@mail.com.",
    (
        ("find_member_by_email", {"email": "lee.moss8@mail.com"}, "M0617"),
        (
            "get_member_details",
            {"member_id": "M0617"},
            {
                "member_id": "M0617",
                "name": "Lee Moss",
                "email": "lee.moss8@mail.com",
                "postcode": "40251",
                "card_status": "active",
                "fines": "5.25",
                "loans": [],
                "holds": [],
            },
        ),
        Exchange("I will pay 2.00 toward your fines of 5.25. Shall I go ahead?", "Yes, go ahead."),
        ("pay_fine", {"member_id": "M0617", "amount": 2.0}, {"member_id": "M0617", "paid": "2.00", "fines": "3.25"}),
    ),
    "Done: you paid 2.00, and your fines are now 3.25.",
)


def _record(member_id: str, name: str, email: str, **rest: Any) -> dict[str, Any]:
    """A member record as `get_member_details` returns it (made-up member, no fines, loans or holds unless given)."""
    return {
        "member_id": member_id,
        "name": name,
        "email": email,
        "postcode": "40300",
        "card_status": "active",
        "fines": "0.00",
        "loans": [],
        "holds": [],
        **rest,
    }


def _copy(copy_id: str, status: str, **rest: Any) -> dict[str, Any]:
    """A copy as `get_book_copies` lists it."""
    return {
        "copy_id": copy_id,
        "format": "paperback",
        "edition": 2010,
        "language": "English",
        "reference_only": False,
        "loan_days": 21,
        "status": status,
        **rest,
    }


CHECKOUT_EXAMPLE = WorkedExample(
    'Can I borrow "Salt Road"? My email is ria.shah5@mail.com.',
    (
        ("find_member_by_email", {"email": "ria.shah5@mail.com"}, "M0733"),
        (
            "search_catalog",
            {"query": "Salt Road"},
            [{"book_id": "B095", "title": "Salt Road", "author": "Ivo Berg", "year": 2011}],
        ),
        (
            "get_book_copies",
            {"book_id": "B095"},
            [_copy("C0951", "on loan"), _copy("C0952", "available", reference_only=True), _copy("C0953", "available")],
        ),
        Exchange('I will check out "Salt Road" (copy C0953) for you. Shall I go ahead?', "Yes, please."),
        (
            "check_out",
            {"member_id": "M0733", "copy_id": "C0953"},
            {"copy_id": "C0953", "member_id": "M0733", "title": "Salt Road", "due": "2025-04-04"},
        ),
    ),
    'Done: you have "Salt Road" (copy C0953), due back on 2025-04-04.',
)
RETURN_EXAMPLE = WorkedExample(
    'Hi, I\'m returning "Blue Lantern" today. My email is tom.hale2@mail.com.',
    (
        ("find_member_by_email", {"email": "tom.hale2@mail.com"}, "M0844"),
        (
            "get_member_details",
            {"member_id": "M0844"},
            _record(
                "M0844",
                "Tom Hale",
                "tom.hale2@mail.com",
                loans=[
                    {"copy_id": "C0961", "book_id": "B096", "title": "Blue Lantern", "due": "2025-03-10", "renewals": 1}
                ],
            ),
        ),
        Exchange('I will return your copy C0961 of "Blue Lantern". Shall I go ahead?', "Yes, go ahead."),
        (
            "return_copy",
            {"copy_id": "C0961"},
            {"copy_id": "C0961", "title": "Blue Lantern", "member_id": "M0844", "late_fee": "1.00", "fines": "1.00"},
        ),
    ),
    'Done: "Blue Lantern" is returned. It was 4 days late, so the late fee is 1.00.',
)
HOLD_EXAMPLE = WorkedExample(
    'Could you put a hold on "Red Meadow" for me? My email is ana.cruz4@mail.com.',
    (
        ("find_member_by_email", {"email": "ana.cruz4@mail.com"}, "M0955"),
        (
            "search_catalog",
            {"query": "Red Meadow"},
            [{"book_id": "B097", "title": "Red Meadow", "author": "Joel Price", "year": 2007}],
        ),
        ("get_book_copies", {"book_id": "B097"}, [_copy("C0971", "on loan"), _copy("C0972", "on loan")]),
        Exchange('I will place a hold on "Red Meadow" for you. Shall I go ahead?', "Yes, please do."),
        (
            "place_hold",
            {"member_id": "M0955", "book_id": "B097"},
            {"book_id": "B097", "title": "Red Meadow", "member_id": "M0955", "position": 1},
        ),
    ),
    'Done: you are first in the hold queue for "Red Meadow".',
)
CANCEL_EXAMPLE = WorkedExample(
    'Please cancel my hold on "Iron Gate". My email is max.lund6@mail.com.',
    (
        ("find_member_by_email", {"email": "max.lund6@mail.com"}, "M0966"),
        (
            "get_member_details",
            {"member_id": "M0966"},
            _record("M0966", "Max Lund", "max.lund6@mail.com", holds=[{"book_id": "B098", "title": "Iron Gate"}]),
        ),
        Exchange('I will cancel your hold on "Iron Gate". Shall I go ahead?', "Yes, go ahead."),
        ("cancel_hold", {"member_id": "M0966", "book_id": "B098"}, "Hold on B098 for M0966 cancelled"),
    ),
    'Done: your hold on "Iron Gate" is cancelled.',
)
PROMPT_EXAMPLES: dict[str, tuple[WorkedExample, ...]] = {
    "library-agent-v2": WORKED_EXAMPLES,
    "library-agent-v3": (*WORKED_EXAMPLES[:3], RENEWAL_EXAMPLE, WORKED_EXAMPLES[3]),
    "library-agent-v4": (*WORKED_EXAMPLES[:3], RENEWAL_EXAMPLE, FINE_PAYMENT_EXAMPLE, WORKED_EXAMPLES[3]),
    "library-agent-v5": (
        *WORKED_EXAMPLES[:3],
        RENEWAL_EXAMPLE,
        CHECKOUT_EXAMPLE,
        RETURN_EXAMPLE,
        HOLD_EXAMPLE,
        CANCEL_EXAMPLE,
        FINE_PAYMENT_EXAMPLE,
        WORKED_EXAMPLES[3],
    ),
}
PROMPT_VERSIONS: tuple[str, ...] = tuple(PROMPT_EXAMPLES)

INSTRUCTIONS = """\
You are the circulation desk assistant of Elm Street Library. Today is {today}.
Each turn, do one thing:
- call a tool: write only one line of JSON, {{"name": <tool>, "arguments": {{...}}}}
- or write a short message to the member.
Copy emails, names and ids exactly as written. Use only facts from tool results."""


@lru_cache(maxsize=1)
def policy_text() -> str:
    """The policy document (package data `policy.md`)."""
    return resources.files("trace_rl.envs.library").joinpath("policy.md").read_text(encoding="utf-8").strip()


def policy_body() -> str:
    """The policy without its Markdown heading (the prompt labels it)."""
    return "\n".join(line for line in policy_text().splitlines() if not line.startswith("#")).strip()


def tool_lines() -> str:
    """One line per tool: `name(args): summary`, writes marked."""
    lines = []
    for name, fn in LibraryTools.tool_methods().items():
        args = ", ".join(p for p in inspect.signature(fn).parameters if p != "self")
        summary = inspect.cleandoc(fn.__doc__ or "").splitlines()[0].rstrip(".")
        mark = " [change]" if fn.__tool_type__ == ToolType.WRITE else ""  # type: ignore[attr-defined]
        lines.append(f"- {name}({args}){mark}: {summary}")
    return "\n".join(lines)


@lru_cache(maxsize=1)
def system_prompt() -> str:
    """The agent's system prompt, the same for every task."""
    return "\n\n".join(
        [
            INSTRUCTIONS.format(today=NOW.isoformat()),
            f"Tools:\n{tool_lines()}",
            f"Policy:\n{policy_body()}",
        ]
    )


def example_messages(version: str = PROMPT_VERSION) -> list[Message]:
    """The worked examples of prompt `version`, as the turns placed between the system prompt and the conversation
    (fresh copies)."""
    messages: list[Message] = []
    for n, example in enumerate(PROMPT_EXAMPLES[version]):
        messages.append(Message(role="user", content=example.request, example=True))
        for k, step in enumerate(example.steps):
            if isinstance(step, Exchange):
                messages.append(Message(role="assistant", content=step.agent, example=True))
                messages.append(Message(role="user", content=step.member, example=True))
                continue
            name, arguments, result = step
            call = ToolCall(id=f"example_{n}_{k}", name=name, arguments=dict(arguments))
            messages.append(Message(role="assistant", tool_calls=[call], example=True))
            messages.append(
                Message(role="tool", tool_call_id=call.id, name=name, content=json.dumps(result), example=True)
            )
        messages.append(Message(role="assistant", content=example.answer, example=True))
    return messages


def worked_example_text(version: str = PROMPT_VERSION) -> str:
    """The worked examples of prompt `version` as text (for reports and the README), one exchange per paragraph."""
    blocks = []
    for example in PROMPT_EXAMPLES[version]:
        lines = [f"member: {example.request}"]
        for step in example.steps:
            if isinstance(step, Exchange):
                lines += [f"agent: {step.agent}", f"member: {step.member}"]
                continue
            name, arguments, result = step
            lines += [f"agent: {json.dumps({'name': name, 'arguments': arguments})}", f"tool: {json.dumps(result)}"]
        blocks.append("\n".join([*lines, f"agent: {example.answer}"]))
    return "\n\n".join(blocks)


def prompt_sha(version: str = PROMPT_VERSION) -> str:
    """sha256 (first 12 hex) of the system prompt and the example turns of `version`, recorded next to it."""
    examples = json.dumps([m.model_dump(mode="json") for m in example_messages(version)], sort_keys=True)
    return hashlib.sha256((system_prompt() + "\n" + examples).encode()).hexdigest()[:12]
