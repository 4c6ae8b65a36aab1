"""The vocabulary of every file trace-rl writes: messages, tool calls, tasks, trajectories, capabilities.

All records are pydantic v2 models that round-trip through JSON unchanged. The task format follows τ²-bench's
(`user_scenario`, `initial_state`, `evaluation_criteria`) so that τ² tasks load as they are
and every other domain (library, synthesized environments) is scored by the same evaluator.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Role = Literal["system", "user", "assistant", "tool"]


class Record(BaseModel):
    """Base for records: unknown keys are errors, so a malformed file is reported, not half-read."""

    model_config = ConfigDict(extra="forbid")


class ToolCall(Record):
    """One tool call requested by the agent (or by the user in dual-control domains)."""

    id: str = Field(description="Call id; tool results refer to it.")
    name: str = Field(description="Tool name as the model wrote it (may be unknown to the environment).")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Decoded JSON arguments.")
    requestor: Literal["assistant", "user"] = "assistant"
    parse_error: str | None = Field(
        None, description="Set when the model's arguments were not valid JSON; the raw text is kept in `raw`."
    )
    raw: str | None = Field(None, description="The raw text the call was parsed from, when parsing was needed.")


class SampledTokens(Record):
    """Token ids a backend actually sampled for one assistant turn, so training never re-tokenizes text."""

    prompt_ids: list[int] | None = Field(None, description="Prompt ids the turn was sampled from, when known.")
    completion_ids: list[int] = Field(default_factory=list, description="Ids sampled for this turn.")
    logprobs: list[float] | None = Field(None, description="Per-token log-probabilities of completion_ids.")


class Message(Record):
    """One message. An assistant message carries text or tool calls, never silently both (see `thought`)."""

    role: Role
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = Field(None, description="For role=tool: the call this result answers.")
    name: str | None = Field(None, description="For role=tool: the tool that produced it.")
    error: bool = Field(False, description="For role=tool: the tool raised; content starts with 'Error: '.")
    thought: str | None = Field(
        None,
        description="Text the model wrote next to its tool calls. Kept for inspection, not shown to the user "
        "(τ²-bench routes a message by its tool calls).",
    )
    sampled: SampledTokens | None = Field(None, description="Backend token ids for assistant turns.")
    turn: int | None = Field(None, description="Index of the orchestrator step that produced the message.")
    example: bool = Field(
        False,
        description="A worked-example turn placed before the conversation: part of the agent's prompt, not of the "
        "episode (routing and conversation keys skip it).",
    )

    @model_validator(mode="after")
    def _text_or_tools(self) -> Message:
        if self.tool_calls and self.content:
            raise ValueError(
                "a message carries text or tool calls, not both: move the text to `thought` or drop the calls"
            )
        if self.tool_calls and self.role not in ("assistant", "user"):
            raise ValueError(f"role '{self.role}' cannot carry tool calls")
        if self.role == "tool" and self.tool_call_id is None:
            raise ValueError("a tool message needs tool_call_id")
        return self

    @property
    def text(self) -> str:
        return self.content or ""


class Action(Record):
    """A gold action (τ²-bench `Action`): compared by name and arguments, replayed for the DB check."""

    action_id: str = ""
    requestor: Literal["assistant", "user"] = "assistant"
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    info: str | None = None
    compare_args: list[str] | None = None


class EnvFunctionCall(Record):
    env_type: Literal["assistant", "user"] = "assistant"
    func_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class EnvAssertion(EnvFunctionCall):
    assert_value: bool = True
    message: str | None = None


class RewardType(StrEnum):
    DB = "DB"
    ENV_ASSERTION = "ENV_ASSERTION"
    COMMUNICATE = "COMMUNICATE"
    NL_ASSERTION = "NL_ASSERTION"
    ACTION = "ACTION"


class EvaluationCriteria(Record):
    actions: list[Action] | None = None
    env_assertions: list[EnvAssertion] | None = None
    communicate_info: list[str] | None = None
    nl_assertions: list[str] | None = None
    reward_basis: list[RewardType] | None = Field(
        None, description="Components multiplied into the reward; None means the τ² default [DB, COMMUNICATE]."
    )


class InitialState(Record):
    initialization_data: dict[str, Any] | None = None
    initialization_actions: list[EnvFunctionCall] | None = None
    message_history: list[dict[str, Any]] | None = Field(
        None, description="τ²-format messages replayed before the episode starts."
    )


class Task(Record):
    """A task of any domain, in τ²-bench's shape plus trace-rl metadata."""

    model_config = ConfigDict(extra="allow")  # τ² task files carry optional extras (annotations, ticket, issues)

    id: str
    description: dict[str, Any] | str | None = None
    user_scenario: dict[str, Any] | str | None = None
    ticket: str | None = None
    initial_state: InitialState | None = None
    evaluation_criteria: EvaluationCriteria | None = None
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="trace-rl extras: family, difficulty, seed, capability, split."
    )


class TerminationReason(StrEnum):
    AGENT_STOP = "agent_stop"
    USER_STOP = "user_stop"
    MAX_STEPS = "max_steps"
    TOO_MANY_ERRORS = "too_many_errors"
    TIMEOUT = "timeout"
    AGENT_ERROR = "agent_error"
    USER_ERROR = "user_error"
    INFRA_ERROR = "infra_error"


SCORED_TERMINATIONS = frozenset({TerminationReason.AGENT_STOP, TerminationReason.USER_STOP})


class RewardInfo(Record):
    """How a finished episode was scored."""

    reward: float
    reward_basis: list[RewardType] = Field(default_factory=list)
    breakdown: dict[str, float] = Field(default_factory=dict, description="Component name -> score in [0, 1].")
    details: dict[str, Any] = Field(default_factory=dict, description="Per-component evidence (hashes, checks).")


class EpisodeScore(Record):
    """How a finished training episode scored: the shaped reward used for advantages and the binary outcome."""

    shaped: float = Field(description="Reward R_E(x, τ) fed to GRPO (may be shaped / partial credit).")
    success: bool = Field(description="Success label y_E(x, τ); groups are filtered on it.")
    breakdown: dict[str, float] = Field(default_factory=dict)


class ErrorRecord(Record):
    """A per-episode error: data, not a crash."""

    kind: Literal["tool", "parse", "protocol", "infra", "user", "internal"]
    message: str
    turn: int | None = None


class Timings(Record):
    started_at: float = 0.0
    ended_at: float = 0.0
    model_s: float = 0.0
    env_s: float = 0.0
    user_s: float = 0.0

    @property
    def duration_s(self) -> float:
        return max(0.0, self.ended_at - self.started_at)


class TokenCounts(Record):
    prompt: int = 0
    completion: int = 0
    model_calls: int = 0


class Trajectory(Record):
    """One episode of one task: what happened, how it scored, and what produced it."""

    id: str = Field(description="Unique within a run: '<env>/<split>/<task_id>/<trial>[/<variant>]'.")
    env: str
    split: str
    task_id: str
    trial: int
    seed: int
    messages: list[Message] = Field(default_factory=list)
    reward: float | None = None
    success: bool | None = Field(None, description="reward == 1 within 1e-6 (τ²-bench).")
    reward_info: RewardInfo | None = None
    termination: TerminationReason | None = None
    timings: Timings = Field(default_factory=Timings)
    tokens: TokenCounts = Field(default_factory=TokenCounts)
    errors: list[ErrorRecord] = Field(default_factory=list)
    infra_error: str | None = Field(
        None,
        description="Set when the episode failed for infrastructure reasons; such episodes are retried, not scored.",
    )
    model: str = ""
    adapter: str | None = None
    capability: str | None = None
    user_model: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def is_infra_failure(self) -> bool:
        return self.infra_error is not None


_SNAKE = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")
MAX_CAPABILITY_NAME = 64  # a folder name under envs/ and adapters/ (300 characters: "file name too long")


class Capability(Record):
    """A capability (TRACE Definition 1) with the evidence that selected it."""

    name: str
    definition: str
    example_task_ids: list[str] = Field(default_factory=list)
    stats: dict[str, Any] = Field(default_factory=dict, description="Δ, Cov, ER± per run and aggregated.")
    status: Literal["pending", "selected", "rejected", "synthesized", "needs_attention", "trained"] = "pending"

    @field_validator("name")
    @classmethod
    def _snake_case(cls, v: str) -> str:
        if len(v) > MAX_CAPABILITY_NAME or not _SNAKE.fullmatch(v):  # fullmatch: `$` also matches before a "\n"
            raise ValueError(
                f"capability name {v[:80]!r} is not snake_case of at most {MAX_CAPABILITY_NAME} characters"
            )
        return v
