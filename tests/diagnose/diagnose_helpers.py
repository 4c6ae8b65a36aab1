"""Hand-made tasks, trajectories and a scripted analyst client for the diagnose tests.

A tiny circulation desk ("desk"): four tasks with gold actions and canned tool results, a builder that plays a
trajectory from a list of steps, the planted-deficit trajectories, and `CannedClient`, a ModelClient whose replies
come from a function of the prompt (so concurrent labeling runs each get the right answer).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trace_rl.artifacts.store import RunDir
from trace_rl.models.base import ModelResponse, SamplingParams
from trace_rl.types import (
    Action,
    EvaluationCriteria,
    Message,
    RewardType,
    Task,
    TerminationReason,
    ToolCall,
    Trajectory,
)

WRITE_KINDS = {
    "find_member_by_email": False,
    "get_member_details": False,
    "get_book_copies": False,
    "renew_loan": True,
    "pay_fine": True,
    "place_hold": True,
    "check_out": True,
}

DETAILS = {
    "M1": {
        "member_id": "M1",
        "fines": "0.00",
        "loans": [{"copy_id": "C11", "due": "2025-03-20"}, {"copy_id": "C12", "due": "2025-03-25"}],
    },
    "M2": {"member_id": "M2", "fines": "4.75", "loans": []},
    "M3": {"member_id": "M3", "fines": "12.50", "card_status": "active", "loans": []},
    "M4": {"member_id": "M4", "fines": "0.00", "loans": []},
}
COPIES = {
    "B5": [{"copy_id": "C51", "status": "on loan"}],
    "B7": [
        {"copy_id": "C71", "format": "paperback", "status": "available"},
        {"copy_id": "C72", "format": "large print", "status": "available"},
        {"copy_id": "C73", "format": "large print", "status": "on loan"},
    ],
}


def _task(tid: str, gold: list[tuple[str, dict[str, Any]]], communicate: list[str]) -> Task:
    return Task(
        id=tid,
        evaluation_criteria=EvaluationCriteria(
            actions=[Action(action_id=f"{tid}_{i}", name=n, arguments=a) for i, (n, a) in enumerate(gold)],
            communicate_info=communicate,
            reward_basis=[RewardType.DB, RewardType.COMMUNICATE],
        ),
        metadata={"split": "train"},
    )


FIND = {
    "renew": ("find_member_by_email", {"email": "ann@x.io"}),
    "multi": ("find_member_by_email", {"email": "bo@x.io"}),
    "refuse": ("find_member_by_email", {"email": "cy@x.io"}),
    "select": ("find_member_by_email", {"email": "di@x.io"}),
}
TASKS = {
    "renew": _task(
        "renew",
        [FIND["renew"], ("get_member_details", {"member_id": "M1"}), ("renew_loan", {"copy_id": "C11"})],
        ["2025-04-01"],
    ),
    "multi": _task(
        "multi",
        [
            FIND["multi"],
            ("get_member_details", {"member_id": "M2"}),
            ("pay_fine", {"member_id": "M2", "amount": 2.0}),
            ("get_book_copies", {"book_id": "B5"}),
            ("place_hold", {"member_id": "M2", "book_id": "B5"}),
        ],
        [],
    ),
    "refuse": _task("refuse", [FIND["refuse"], ("get_member_details", {"member_id": "M3"})], ["12.50"]),
    "select": _task(
        "select",
        [
            FIND["select"],
            ("get_member_details", {"member_id": "M4"}),
            ("get_book_copies", {"book_id": "B7"}),
            ("check_out", {"member_id": "M4", "copy_id": "C72"}),
        ],
        ["2025-04-11"],
    ),
}
OPENING = {
    "renew": "Hi, please renew my loan C11. My email is ann@x.io.",
    "multi": "Hi, I want to pay 2.00 toward my fines and put a hold on B5. I returned B9 yesterday. Email bo@x.io.",
    "refuse": "Hi, I'd like to borrow a book. Email cy@x.io.",
    "select": "Hi, I want the large print copy of B7. Email di@x.io.",
}


def result_for(name: str, args: dict[str, Any]) -> tuple[str, bool]:
    """Canned tool results: (content, error)."""
    emails = {"ann@x.io": "M1", "bo@x.io": "M2", "cy@x.io": "M3", "di@x.io": "M4"}
    if name == "find_member_by_email":
        return (emails[args["email"]], False) if args.get("email") in emails else ("Error: Member not found", True)
    if name == "get_member_details":
        m = DETAILS.get(args.get("member_id", ""))
        return (json.dumps(m), False) if m else (f"Error: Member {args.get('member_id')} not found", True)
    if name == "get_book_copies":
        return json.dumps(COPIES.get(args.get("book_id", ""), [])), False
    if name == "renew_loan":
        due = {"C11": "2025-04-01", "C12": "2025-04-05"}.get(args.get("copy_id", ""))
        return (json.dumps({"copy_id": args["copy_id"], "due": due}), False) if due else ("Error: no such loan", True)
    if name == "pay_fine":
        if args.get("member_id") not in DETAILS:
            return f"Error: Member {args.get('member_id')} not found", True
        return json.dumps({"fines_left": "2.75"}), False
    if name == "place_hold":
        return f"Hold on {args.get('book_id')} placed", False
    if name == "check_out":
        if args.get("copy_id") == "C73":
            return "Error: Copy C73 is on loan", True
        return json.dumps({"copy_id": args.get("copy_id"), "due": "2025-04-11"}), False
    return f"Error: Tool '{name}' not found.", True


Step = tuple[Any, ...]


def gold_steps(task: str, *, skip: tuple[str, ...] = ()) -> list[Step]:
    """The gold calls of a task as steps, minus the tool names in `skip`."""
    actions = TASKS[task].evaluation_criteria.actions or []
    return [("call", a.name, dict(a.arguments)) for a in actions if a.name not in skip]


def play(tid: str, task: str, steps: list[Step], *, success: bool, split: str = "train") -> Trajectory:
    """Steps: ("call", name, args) | ("bad_call", name, raw) | ("say", text). The user opens with the task's line."""
    messages: list[Message] = [
        Message(role="system", content="You are a library desk agent."),
        Message(role="user", content=OPENING[task]),
    ]
    for i, step in enumerate(steps):
        kind = step[0]
        if kind == "say":
            messages.append(Message(role="assistant", content=step[1]))
            continue
        cid = f"c{i}"
        if kind == "bad_call":
            call = ToolCall(id=cid, name=step[1], arguments={}, parse_error="arguments are not valid JSON", raw=step[2])
            content, error = f"Error: could not parse arguments of '{step[1]}': arguments are not valid JSON", True
        else:
            call = ToolCall(id=cid, name=step[1], arguments=step[2])
            content, error = result_for(step[1], step[2])
        messages.append(Message(role="assistant", tool_calls=[call]))
        messages.append(Message(role="tool", tool_call_id=cid, name=call.name, content=content, error=error))
    return Trajectory(
        id=f"desk/{split}/{tid}",
        env="desk",
        split=split,
        task_id=task,
        trial=0,
        seed=0,
        messages=messages,
        reward=1.0 if success else 0.0,
        success=success,
        termination=TerminationReason.AGENT_STOP,
    )


def clean(tid: str, task: str, *, split: str = "train") -> Trajectory:
    say = {
        "renew": "Renewed; due 2025-04-01.",
        "multi": "Paid 2.00 and placed the hold.",
        "refuse": "Sorry, your fines of 12.50 are too high to borrow.",
        "select": "Done, due back 2025-04-11.",
    }
    return play(tid, task, [*gold_steps(task), ("say", say[task])], success=True, split=split)


def planted() -> dict[str, tuple[Trajectory, str, str]]:
    """Failed trajectories with one planted deficit each: id -> (trajectory, capability, finding kind)."""
    r, m, s = "renew", "multi", "select"
    pay_wrong_total = ("call", "pay_fine", {"member_id": "M2", "amount": 4.75})
    pay_bad_format = ("call", "pay_fine", {"member_id": "m2", "amount": 2.0})
    rows = {
        "miss_read_1": (r, [*gold_steps(r, skip=("get_member_details",)), ("say", "Renewed; due 2025-04-01.")],
                        "precondition_verification", "missing_read"),
        "miss_read_2": (s, [*gold_steps(s, skip=("get_book_copies",)), ("say", "Done, due back 2025-04-11.")],
                        "precondition_verification", "missing_read"),
        "forbidden_1": ("refuse", [*gold_steps("refuse"), ("call", "check_out", {"member_id": "M3", "copy_id": "C31"}),
                                   ("say", "Your fines are 12.50 but I lent it anyway.")],
                        "precondition_verification", "forbidden_write"),
        "forbidden_2": ("refuse", [*gold_steps("refuse"), ("call", "pay_fine", {"member_id": "M3", "amount": 12.5}),
                                   ("say", "I charged your fines of 12.50.")],
                        "precondition_verification", "forbidden_write"),
        "stop_early_1": (m, [*gold_steps(m)[:3], ("say", "Paid. Anything else?")],
                         "multi_step_task_completion", "missing_write"),
        "stop_early_2": (m, [*gold_steps(m, skip=("pay_fine",)), ("say", "Hold placed.")],
                         "multi_step_task_completion", "missing_write"),
        "stop_early_3": (m, [*gold_steps(m)[:2], ("say", "I have your account open. Goodbye!")],
                         "multi_step_task_completion", "missing_write"),
        "wrong_value_3": (m, [*gold_steps(m)[:4], ("call", "place_hold", {"member_id": "M2", "book_id": "C51"}),
                              ("say", "All done.")],
                          "tool_calling_precision", "wrong_value_from_context"),
        "wrong_record_3": (s, [*gold_steps(s)[:3], ("call", "check_out", {"member_id": "M4", "copy_id": "C71"}),
                               ("say", "Done, due back 2025-04-11.")],
                           "structured_data_reasoning", "wrong_record_selected"),
        "wrong_value_1": (m, [*gold_steps(m)[:2], pay_wrong_total, *gold_steps(m)[3:], ("say", "All done.")],
                          "tool_calling_precision", "wrong_value_from_context"),
        "wrong_value_2": (m, [*gold_steps(m)[:4], ("call", "place_hold", {"member_id": "M2", "book_id": "B9"}),
                              ("say", "All done.")],
                          "tool_calling_precision", "wrong_value_from_context"),
        "wrong_record_1": (s, [*gold_steps(s)[:3], ("call", "check_out", {"member_id": "M4", "copy_id": "C73"}),
                               ("say", "That copy is on loan, sorry.")],
                           "structured_data_reasoning", "wrong_record_selected"),
        "wrong_record_2": (r, [*gold_steps(r)[:2], ("call", "renew_loan", {"copy_id": "C12"}),
                               ("say", "Renewed; due 2025-04-05.")],
                           "structured_data_reasoning", "wrong_record_selected"),
        "malformed_1": (r, [("bad_call", "find_member_by_email", '{"email": ann@x.io'), *gold_steps(r),
                            ("say", "Renewed; due 2025-04-01.")],
                        "tool_call_formatting", "malformed_call"),
        "malformed_2": (m, [*gold_steps(m)[:2], pay_bad_format, *gold_steps(m)[3:], ("say", "Hold placed.")],
                        "tool_call_formatting", "value_format"),
    }  # fmt: skip  # table: one row per line
    return {tid: (play(tid, task, steps, success=False), cap, kind) for tid, (task, steps, cap, kind) in rows.items()}


def cleans() -> list[Trajectory]:
    return [clean(f"clean_{t}_{i}", t) for t in TASKS for i in range(2)]


def success_with_recovered_format_error() -> Trajectory:
    """A success that still shows a formatting deficit (so the contrast, not coverage, decides)."""
    steps = [("bad_call", "find_member_by_email", "{email: ann@x.io}"), *gold_steps("renew"), ("say", "due 2025-04-01")]
    return play("lucky_format", "renew", steps, success=True)


def write_run(root: Path, trajectories: list[Trajectory], *, env: dict[str, Any] | None = None) -> RunDir:
    run = RunDir(root)
    run.ensure(config={"env": env or {"name": "desk"}})
    run.jsonl("rollout/trajectories.jsonl").append(trajectories)
    return run


class CannedClient:
    """A ModelClient answering from `reply(prompt_text, sampling) -> str`; records every call."""

    def __init__(self, reply: Callable[[str, SamplingParams | None, list[Message]], str], name: str = "canned"):
        self.name = name
        self.reply = reply
        self.calls: list[tuple[list[Message], SamplingParams | None]] = []

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        *,
        adapter: str | None = None,
        sampling: SamplingParams | None = None,
    ) -> ModelResponse:
        self.calls.append((messages, sampling))
        prompt = messages[1].text if len(messages) > 1 else messages[-1].text
        text = self.reply(prompt, sampling, messages)
        return ModelResponse(message=Message(role="assistant", content=text), raw_text=text)

    async def aclose(self) -> None:
        return None


class DeskDomain:
    """The desk as a registered domain: tasks with gold actions, no environment (tool kinds fall back to names)."""

    name = "desk"

    def splits(self) -> list[str]:
        return ["train", "test"]

    def tasks(self, split: str) -> list[Task]:
        if split == "test":  # a held-out task; the desk's `base` split would mix it with the train tasks
            return [TASKS["renew"].model_copy(update={"id": "exam"})]
        return list(TASKS.values())

    def make_env(self) -> Any:
        raise NotImplementedError("the desk has no environment")


def register_desk() -> None:
    from trace_rl.envs.registry import register_domain

    register_domain("desk", lambda rest, cfg: DeskDomain())
