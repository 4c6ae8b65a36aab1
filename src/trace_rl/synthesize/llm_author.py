"""Generator 2: an author model writes a seeded scenario generator (Python) for one capability.

The prompt (our own words; the paper's App. B asks for the same ingredients) gives the capability's definition and
type, what the reward checks, compact transcripts of failed train-split trajectories, the target's tool schemas and
policy, the `GeneratorAPI` and the output schema. The answer's last ```python block that defines `generate` is the
code. It runs only in the sandbox (`sandbox.run_generator`) on the validation seeds; its tasks must validate
(gold replay without errors, gold scores 1, removing the capability's step lowers the reward) and pass the leak
check. Otherwise the author gets the problems back and rewrites, up to `author_attempts` times. Every prompt,
response, code and feedback is kept under `envs/<capability>/author/attempt_<n>/`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trace_rl.artifacts.layout import EnvLayout
from trace_rl.artifacts.store import atomic_write_text
from trace_rl.envs.synthetic.gen_api import API_DOC
from trace_rl.envs.synthetic.generated import GeneratedTask
from trace_rl.envs.synthetic.generators import to_task
from trace_rl.models.base import ModelClient, SamplingParams
from trace_rl.types import Message, Task

SYSTEM = """\
You design training environments for tool-using language-model agents. You write one Python module that generates \
tasks procedurally from an integer seed. Your tasks are used for reinforcement learning, so every task must have one \
verifiably correct solution (a list of tool calls) and must be solvable only by exercising one specific capability."""

TYPE_GUIDANCE = {
    "precondition_verification": (
        "Make the right outcome depend on a condition the agent can only learn by reading records first (a status, "
        "a limit, an availability flag). Mix tasks where the request is allowed (gold: the reads, then the write) "
        "with tasks where a policy rule forbids it (gold: the reads only; the DB must stay unchanged and the agent "
        "must state the blocking value, put it in communicate_info). Mark the deciding reads in capability_steps."
    ),
    "tool_calling_precision": (
        "Make the task hinge on calling a write tool with exactly the right arguments: identifiers that must be "
        "looked up (never given verbatim by the user), amounts and names copied precisely. Mark the key call in "
        "capability_steps."
    ),
    "multi_step_completion": (
        "Let the user ask for two to four separate changes in one conversation; the gold solution makes all of them "
        "and communicates each result. The DB only matches when every change is made."
    ),
    "structured_data_reasoning": (
        "Give records several similar candidates (copies, items, variants) and a request with two or more "
        "conditions, so the agent must compare fields to pick the single record that satisfies all of them. Put the "
        "value the agent must report (a date, id or amount from the chosen record) in communicate_info."
    ),
}

OUTPUT_SCHEMA = """\
generate(seed, api) returns a dict:
{
  "request": str,               # the user's first message (must not contain ids the agent should look up)
  "reason_for_call": str,       # one sentence for an LLM user simulator
  "known_info": str,            # what the user knows (e.g. their email), stated plainly
  "unknown_info": str,          # what the user does not know
  "facts": {str: str},          # answers the user gives when asked, e.g. {"email": "..."}
  "world": dict,                # exactly api.start(seed)["world"]
  "data_patch": dict | null,    # deep-merged into the db before the episode (add or change records; same shape)
  "gold_actions": [{"name": str, "arguments": dict}],   # the solution, in order; only the target's tools
  "communicate_info": [str],    # exact strings the agent must say (as they appear in tool results)
  "capability_steps": [int],    # indices into gold_actions that exercise the capability
  "difficulty": int             # the api.difficulty you honoured
}"""

RULES = """\
Rules:
- Deterministic: the same seed gives the same task. Use api.rng(seed) for every random choice.
- Different seeds must give meaningfully different scenarios (records, requests, constraint combinations).
- Import only the standard library (random, math, json, itertools, collections, datetime, string). No files, no
  network, no processes: the code runs in a sandbox that stops them.
- Call api.replay(task) on your candidate and read values from its results; every gold action must succeed.
- Use only the tools listed above, with their exact parameter names.
- Harder with api.difficulty: more distractor records, more conditions, less information in the request.
- Answer with one ```python code block containing the whole module."""


@dataclass
class AuthorAttempt:
    n: int
    code: str | None
    ok: bool
    feedback: str = ""
    sandbox: dict[str, Any] = field(default_factory=dict)
    validation: dict[str, Any] = field(default_factory=dict)
    leak: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "attempt": self.n,
            "ok": self.ok,
            "has_code": self.code is not None,
            "feedback": self.feedback,
            "sandbox": self.sandbox,
            "validation": {k: v for k, v in self.validation.items() if k != "tasks"},
            "leak": self.leak,
        }


def _compact_schemas(schemas: list[dict[str, Any]]) -> str:
    lines = []
    for s in schemas:
        fn = s["function"]
        props = fn.get("parameters", {}).get("properties", {})
        args = ", ".join(f"{k}: {v.get('type', 'any')}" for k, v in props.items())
        lines.append(f"- {fn['name']}({args}): {fn.get('description', '')}")
    return "\n".join(lines)


def build_prompt(
    *,
    name: str,
    definition: str,
    kind: str,
    checks: list[str],
    domain: str,
    schemas: list[dict[str, Any]],
    policy: str,
    evidence: list[str],
    example_db_keys: list[str],
    feedback: str | None = None,
    previous: str | None = None,
) -> list[Message]:
    parts = [
        f"Capability: {name}\nDefinition: {definition}\nType: {kind.replace('_', ' ')}",
        "What the reward checks, besides the final database and the communicated values: " + ", ".join(checks) + ".",
        f"How to make the capability necessary:\n{TYPE_GUIDANCE.get(kind, TYPE_GUIDANCE['tool_calling_precision'])}",
        f"Target domain: {domain}. Database top-level keys: {', '.join(example_db_keys)}.",
        f"Tools:\n{_compact_schemas(schemas)}",
        f"Policy the agent follows:\n{policy.strip()}",
    ]
    if evidence:
        parts.append(
            "Failed training conversations where the agent lacked this capability (do not copy their entities):\n"
            + "\n\n".join(evidence)
        )
    parts += [f"The api object:\n{API_DOC}", OUTPUT_SCHEMA, RULES]
    if feedback:
        parts.append(
            f"Your previous module:\n```python\n{previous or ''}\n```\nIt was rejected:\n{feedback}\n"
            "Fix every problem and answer with the whole corrected module."
        )
    return [Message(role="system", content=SYSTEM), Message(role="user", content="\n\n".join(parts))]


_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.S)


def extract_code(text: str) -> str | None:
    """The last fenced block defining `generate`, else the whole text when it is bare code defining it."""
    blocks = [b for b in _FENCE.findall(text or "") if "def generate" in b]
    if blocks:
        return blocks[-1].strip() + "\n"
    if text and "def generate" in text and "```" not in text:
        return text.strip() + "\n"
    return None


async def ask(client: ModelClient, messages: list[Message], *, max_tokens: int, temperature: float) -> str:
    response = await client.chat(
        messages, None, sampling=SamplingParams(temperature=temperature, max_tokens=max_tokens)
    )
    return response.raw_text or response.message.content or response.message.thought or ""


def tasks_from(raw: dict[int, dict[str, Any]], spec: Any, domain: str) -> tuple[dict[int, Task], dict[int, str]]:
    """Sandbox output → tasks; schema problems per seed."""
    tasks: dict[int, Task] = {}
    problems: dict[int, str] = {}
    for seed, data in raw.items():
        try:
            tasks[seed] = to_task(GeneratedTask.model_validate(data), spec, seed, domain)
        except ValueError as exc:
            problems[seed] = f"output does not match the schema: {str(exc).splitlines()[0][:300]}"
    return tasks, problems


def save_attempt(folder: Path, n: int, messages: list[Message], response: str, attempt: AuthorAttempt) -> None:
    files = EnvLayout(folder).author_attempt(n)
    atomic_write_text(files.prompt, "\n\n".join(f"## {m.role}\n\n{m.content}" for m in messages))
    atomic_write_text(files.response, response)
    if attempt.code:
        atomic_write_text(files.code, attempt.code)
    atomic_write_text(files.result, json.dumps(attempt.as_dict(), indent=2, default=str))


__all__ = ["AuthorAttempt", "ask", "build_prompt", "extract_code", "save_attempt", "tasks_from"]


async def author_code(
    client: ModelClient,
    *,
    prompt_args: dict[str, Any],
    check: Any,
    folder: Path,
    attempts: int,
    max_tokens: int,
    temperature: float,
    first_feedback: str | None = None,
    previous: str | None = None,
    start: int = 1,
) -> tuple[str | None, list[AuthorAttempt]]:
    """Ask, extract, check; rewrite with feedback until `check(code) -> AuthorAttempt` passes or attempts run out."""
    log: list[AuthorAttempt] = []
    feedback, code = first_feedback, previous
    for n in range(start, start + attempts):
        messages = build_prompt(**prompt_args, feedback=feedback, previous=code)
        response = await ask(client, messages, max_tokens=max_tokens, temperature=temperature)
        new_code = extract_code(response)
        if new_code is None:
            attempt = AuthorAttempt(n, None, False, "The answer had no ```python block defining generate(seed, api).")
        else:
            attempt = check(new_code)
            attempt.n, attempt.code = n, new_code
            code = new_code
        save_attempt(folder, n, messages, response, attempt)
        log.append(attempt)
        if attempt.ok:
            return attempt.code, log
        feedback = attempt.feedback
    return None, log


__all__ += ["author_code"]
