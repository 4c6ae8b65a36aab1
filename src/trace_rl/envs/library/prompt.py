"""The agent's prompt for the library: a system prompt (role, turn format, a compact tool list, the policy) and one
worked example exchange given as chat turns before the conversation.

The prompt is part of the domain's definition (the same for every task) and is recorded with every run under
`PROMPT_VERSION` and `prompt_sha()`. It is short on purpose: the default model (SmolLM2-135M-Instruct) has an 8k
context and is slow on CPU. Tools are listed one line each, so a client whose chat template ignores `tools` needs no
JSON schema listing (pass it no tools, or it lists them a second time).

Why the example is turns and not text: measured on SmolLM2-135M (bf16, 6 samples at temperature 0.7 per request),
the same example written inside the system prompt gave 0 JSON tool calls; as a user → tool call → tool result →
answer exchange before the conversation, most replies were JSON calls (often with the book title as the tool name).
Pass `example_messages()` as `Agent(..., examples=...)` (or use `LibraryDomain.make_agent`).
"""

from __future__ import annotations

import hashlib
import inspect
import json
from functools import lru_cache
from importlib import resources

from trace_rl.envs.library.tools import LibraryTools
from trace_rl.envs.library.world import NOW
from trace_rl.envs.toolkit import ToolType
from trace_rl.types import Message, ToolCall

PROMPT_VERSION = "library-agent-v1"

EXAMPLE_QUESTION = 'Who wrote "Night Harbor"?'
EXAMPLE_CALL = ToolCall(id="example_0", name="search_catalog", arguments={"query": "Night Harbor"})
EXAMPLE_RESULT = [{"book_id": "B900", "title": "Night Harbor", "author": "Lena Park", "year": 2015}]
EXAMPLE_ANSWER = '"Night Harbor" was written by Lena Park.'

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


def example_messages() -> list[Message]:
    """The worked example, as the turns placed between the system prompt and the conversation (fresh copies)."""
    return [
        Message(role="user", content=EXAMPLE_QUESTION),
        Message(role="assistant", tool_calls=[EXAMPLE_CALL.model_copy()]),
        Message(role="tool", tool_call_id=EXAMPLE_CALL.id, name=EXAMPLE_CALL.name, content=json.dumps(EXAMPLE_RESULT)),
        Message(role="assistant", content=EXAMPLE_ANSWER),
    ]


def worked_example_text() -> str:
    """The worked example as text (for reports and the README)."""
    call = json.dumps({"name": EXAMPLE_CALL.name, "arguments": EXAMPLE_CALL.arguments})
    return "\n".join(
        [
            f"member: {EXAMPLE_QUESTION}",
            f"agent: {call}",
            f"tool: {json.dumps(EXAMPLE_RESULT)}",
            f"agent: {EXAMPLE_ANSWER}",
        ]
    )


def prompt_sha() -> str:
    """sha256 (first 12 hex) of the system prompt and the example turns, recorded next to `PROMPT_VERSION`."""
    examples = json.dumps([m.model_dump(mode="json") for m in example_messages()], sort_keys=True)
    return hashlib.sha256((system_prompt() + "\n" + examples).encode()).hexdigest()[:12]
