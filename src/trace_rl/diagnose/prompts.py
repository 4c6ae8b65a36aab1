"""Prompts of the LLM analyst (discovery and labeling), written for trace-rl after TRACE §3.2 and the released
prompts' requirements (docs/method-notes.md §1): general capabilities, precise definitions, three-way labels, and
"lean toward PRESENT when the failure's cause is unclear"."""

from __future__ import annotations

import json
from collections.abc import Sequence

from trace_rl.artifacts.capabilities import CandidateSpec

SYSTEM = (
    "You are an analyst of tool-using AI agents. You study recorded conversations in which an agent talks to a user "
    "and calls tools, and you explain its failures in terms of general capabilities. You answer with one JSON object "
    "and nothing else."
)

DISCOVERY = """Below are {n} trajectories of the same agent on tasks of one environment: {n_pass} succeeded and \
{n_fail} failed. Each shows the user's goal (what the simulated user was told to get done), the user's messages, \
the agent's tool calls (name and arguments), the tool results (whole) and the agent's replies; long messages are cut.
{policy}
Contrast the successful trajectories with the failed ones and name the capabilities whose absence explains failures \
that recur across tasks. A capability is an action or behaviour that some tasks require for success.

Rules:
- Propose at most {max_candidates} capabilities, ordered from the most to the least explanatory.
- Names: snake_case, 2 to 5 words, general across environments (good: multi_step_state_modification, \
precondition_verification; bad: flight_rebooking_procedure, refund_gift_card).
- Definitions: 2 or 3 sentences stating what the agent must do and what counts as lacking it, precise enough that two \
analysts would label the same trajectory the same way. No domain rules, entity names, amounts or task-solving hints.
- example_task_ids: 2 to 4 task ids from the trajectories below that show the capability (mix failures and, where \
useful, successes).
{evidence}
Answer with exactly this JSON shape:
{{"candidates": [{{"name": "snake_case_name", "definition": "...", "example_task_ids": ["..."]}}]}}

{summaries}"""

EVIDENCE = """
An automatic check compared each trajectory with the task's reference solution; its findings are shown as \
"reference check" lines and summarised here (treat them as evidence, not as the answer):
{table}
"""

LABELING = """You will label trajectories of a tool-using agent against a fixed dictionary of capabilities.

Capabilities:
{dictionary}
{policy}
Each trajectory shows the user's goal (what the simulated user was told to get done), then the conversation. A long \
trajectory is shown in parts ("part k of n"): label each part on what it shows (LACKING only when the lack shows in \
that part); the parts' labels are combined.

For every trajectory and every capability give exactly one label:
- "NA": the task does not require this capability;
- "PRESENT": the task requires it and the agent exercised it (for a failed trajectory: the failure was caused by \
something else);
- "LACKING": the task requires it and the agent did not exercise it (for a failed trajectory: this contributed to \
the failure; a successful trajectory can also lack a capability).
Judge each trajectory on its own. When a trajectory failed and you cannot tell whether this capability caused it, \
lean toward PRESENT. Use only the capability names above and the trajectory references given (T1, T2, ...).

Answer with exactly this JSON shape, one entry per trajectory reference and one key per capability:
{{"labels": {{"T1": {{{example}}}}}}}

{summaries}"""

POLICY = """
The agent was given this policy (its system prompt); judge its actions against it:
<policy>
{policy}
</policy>
"""

REPAIR = """Your reply could not be used: {error}
Reply again with only the JSON object in the required shape, no other text."""

MISSING = """Some labels are missing or invalid: {problems}
Reply with only a JSON object {{"labels": {{...}}}} that labels these trajectories: {refs}, each with every \
capability: {names}."""


def policy_section(policy: str) -> str:
    return POLICY.format(policy=policy) if policy else ""


def dictionary_text(capabilities: Sequence[CandidateSpec]) -> str:
    return "\n".join(f"- {c.name}: {c.definition}" for c in capabilities)


def label_example(capabilities: Sequence[CandidateSpec]) -> str:
    return ", ".join(f'{json.dumps(c.name)}: "NA|PRESENT|LACKING"' for c in capabilities)


__all__ = [
    "DISCOVERY",
    "EVIDENCE",
    "LABELING",
    "MISSING",
    "POLICY",
    "REPAIR",
    "SYSTEM",
    "dictionary_text",
    "label_example",
    "policy_section",
]
