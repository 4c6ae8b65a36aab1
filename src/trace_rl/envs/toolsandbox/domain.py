"""`ToolSandboxDomain`: ToolSandbox (Lu et al. 2024, apple/ToolSandbox 165848b) behind trace-rl's `Domain` protocol.

- Task sets (`toolsandbox:<set>`): `base_offline` (91 base scenarios that need no RapidAPI tool, the default),
  `base` (129), `all_offline` (728: the 91 with their 7 augmentations each), `all` (1,032). Scenarios needing a
  RapidAPI tool carry `needs_network`; those tools are present and fail as without a key.
- Splits: `all`, `train`, `test`. A scenario's family is its base scenario; a family goes wholly to test when
  sha256(family) mod 10 < 3, so augmentations of one base scenario never straddle the split.
- Each task's environment has the scenario's own world, allow-list and agent-facing schemas (scrambled names and
  all). Reward = ToolSandbox's similarity; a trajectory is perfect when it is 1.0.
"""

from __future__ import annotations

import functools
import hashlib
from functools import cached_property
from pathlib import Path
from typing import Any

from trace_rl.config import EnvConfig
from trace_rl.envs.toolsandbox import data
from trace_rl.envs.toolsandbox.episode import first_user_message, score_conversation, user_instruction
from trace_rl.envs.toolsandbox.sandbox import Sandbox
from trace_rl.envs.toolsandbox.user import ENDING_NOTE, ToolSandboxLLMUser, ToolSandboxScriptedUser, user_scenario
from trace_rl.errors import UserError
from trace_rl.models.base import ModelClient, SamplingParams
from trace_rl.types import Action, EvaluationCriteria, Message, RewardInfo, Task, TerminationReason, ToolCall

TASK_SETS = ("base_offline", "base", "all_offline", "all")
SPLITS = ("all", "train", "test")
TEST_SHARE = 3  # tenths of the families that go to test
FREE_TEXT_ARGUMENTS = frozenset({"content"})  # compared by ROUGE-L in ToolSandbox: not an exact gold argument
WORKED_EXAMPLE = "add_contact_with_name_and_phone_number"  # a train-split family; its path: one call, one reply


def family_split(family: str) -> str:
    return "test" if int(hashlib.sha256(family.encode()).hexdigest(), 16) % 10 < TEST_SHARE else "train"


def in_task_set(scenario: dict[str, Any], task_set: str) -> bool:
    if task_set.startswith("base") and scenario["variant"] != "base":
        return False
    return not (task_set.endswith("offline") and scenario["needs_network"])


class ToolSandboxEnvironment:
    """One episode of one scenario (an `Environment`)."""

    def __init__(self, domain: ToolSandboxDomain) -> None:
        self.domain = domain
        self.scenario: dict[str, Any] | None = None
        self.sandbox: Sandbox | None = None

    def reset(self, task: Task, seed: int | None = None) -> list[Message]:
        self.scenario = self.domain.scenario(task)
        self.sandbox = Sandbox(self.scenario, data.FROZEN_NOW)
        return [Message(role="user", content=first_user_message(self.scenario))]

    def tool_schemas(self) -> list[dict[str, Any]]:
        """This scenario's agent-facing schemas; before `reset`, every agent tool unscrambled (see docs)."""
        if self.scenario is None:
            return self.domain.all_agent_schemas()
        return list(self.scenario["agent_tool_schemas"])

    def user_tool_schemas(self) -> list[dict[str, Any]]:
        return []  # the generic LLM user ends with a stop token; `ToolSandboxLLMUser` has its own end_conversation tool

    def policy(self) -> str:
        return self.domain.system_prompt()

    def execute(self, call: ToolCall) -> Message:
        if self.sandbox is None:
            raise RuntimeError("execute before reset")
        if call.requestor == "user":
            result = self.sandbox.end_conversation()
            return Message(role="tool", content=result.content, tool_call_id=call.id, name=call.name)
        if call.parse_error is not None:
            text = f"Error: could not parse arguments of '{call.name}': {call.parse_error}"
            return Message(role="tool", content=text, tool_call_id=call.id, name=call.name, error=True)
        if call.name not in self.sandbox.agent_names:
            known = sorted(self.sandbox.agent_names)
            text = f"KeyError: Agent tool call '{call.name}' is not a known allowed tool. Options are {known}"
            return Message(role="tool", content=text, tool_call_id=call.id, name=call.name, error=True)
        result = self.sandbox.agent_calls([(call.name, call.arguments)])[0]
        return Message(
            role="tool",
            content=result.content,
            tool_call_id=call.id,
            name=call.name,
            error=result.exception is not None,
        )

    def state_hash(self) -> str:
        if self.sandbox is None:
            return ""
        world = {db: self.sandbox.tables.snapshot(db) for db in ("SETTING", "CONTACT", "MESSAGING", "REMINDER")}
        return hashlib.sha256(repr(world).encode()).hexdigest()

    async def score(
        self, task: Task, messages: list[Message], termination: TerminationReason, judge: ModelClient | None = None
    ) -> RewardInfo:
        return self.score_now(task, messages, termination)

    def score_now(self, task: Task, messages: list[Message], termination: TerminationReason) -> RewardInfo:
        """`score` without an event loop (ToolSandbox's evaluator needs no model): replays and `env check`."""
        scenario = self.domain.scenario(task)
        result, mismatches = score_conversation(scenario, messages, self.domain.meta, data.FROZEN_NOW)
        return RewardInfo(
            reward=result.similarity,
            breakdown={
                "similarity": result.similarity,
                "milestone_similarity": result.milestone_similarity,
                "minefield_similarity": result.minefield_similarity,
            },
            details={**result.as_dict(), "replay_mismatches": mismatches, "termination": str(termination)},
        )


class ToolSandboxDomain:
    """ToolSandbox scenarios of one task set."""

    prompt_lists_tools = False
    check_measure = "similarity-1.0"  # `env check`: a reference path per task reaches ToolSandbox similarity 1.0

    def __init__(self, task_set: str, cfg: EnvConfig) -> None:
        task_set = task_set or "base_offline"
        if task_set not in TASK_SETS:
            raise UserError(f"toolsandbox: unknown task set '{task_set}' (known: {', '.join(TASK_SETS)})")
        unknown = sorted(set(cfg.options) - {"worked_example"})
        if unknown:
            raise UserError(f"env.options: toolsandbox takes only worked_example (got '{unknown[0]}')")
        worked = cfg.options.get("worked_example", False)
        if not isinstance(worked, bool):
            raise UserError(f"env.options.worked_example: expected true or false, got {worked!r}")
        self.worked_example = worked
        self.task_set = task_set
        self.name = f"toolsandbox:{task_set}"
        self.root: Path = data.resolve_data_dir(cfg.data_dir)
        self.meta, self.scenarios = data.load_scenarios(self.root)

    @cached_property
    def _tasks(self) -> list[Task]:
        tasks = [self._task(s) for s in self.scenarios.values() if in_task_set(s, self.task_set)]
        return [t.model_copy(update={"evaluation_criteria": self._reference_criteria(t)}) for t in tasks]

    def _reference_criteria(self, task: Task) -> EvaluationCriteria:
        """The reference path's tool calls as the task's gold actions (agent-facing names of this scenario), for
        reference-guided diagnosis and capability environments; the reward stays ToolSandbox's similarity. An
        augmentation takes its base scenario's path, as `env check` does."""
        scenario = self.scenario(task)
        steps = self._reference_steps(scenario["base_scenario"])
        to_agent = {b: a for a, b in (scenario.get("agent_to_execution_tool_name") or {}).items()}
        actions = [
            Action(
                action_id=f"{task.id}-{i}",
                name=to_agent.get(step["name"], step["name"]),
                arguments=dict(step["arguments"]),
                compare_args=[k for k in step["arguments"] if k not in FREE_TEXT_ARGUMENTS] or None,
            )
            for i, step in enumerate(s for s in steps if s["type"] == "tool_call")
        ]
        return EvaluationCriteria(actions=actions)

    @functools.cache  # noqa: B019 - one domain per process holds at most 1,032 scenarios
    def _reference_steps(self, base_scenario: str) -> list[dict[str, Any]]:
        from trace_rl.envs.toolsandbox.reference import replay_reference

        base = self._task(self.scenarios[base_scenario])
        replay, _ = replay_reference(self, base)
        return replay.steps

    def _task(self, scenario: dict[str, Any]) -> Task:
        family = scenario["base_scenario"]
        return Task(
            id=scenario["name"],
            description=first_user_message(scenario),
            user_scenario=user_scenario(scenario),
            metadata={
                "scenario": scenario["name"],
                "family": family,
                "variant": scenario["variant"],
                "categories": list(scenario["categories"]),
                "needs_network": scenario["needs_network"],
                "split": family_split(family),
            },
        )

    def scenario(self, task: Task) -> dict[str, Any]:
        name = task.metadata.get("scenario", task.id)
        if name not in self.scenarios:
            raise UserError(f"toolsandbox: no scenario named '{name}'")
        return self.scenarios[name]

    # -- Domain protocol ----------------------------------------------------------------------------------------
    def splits(self) -> list[str]:
        return list(SPLITS)

    def tasks(self, split: str = "all") -> list[Task]:
        if split not in SPLITS:
            raise UserError(f"{self.name}: unknown split '{split}' (known: {', '.join(SPLITS)})")
        return [t for t in self._tasks if split == "all" or t.metadata["split"] == split]

    def make_env(self) -> ToolSandboxEnvironment:
        return ToolSandboxEnvironment(self)

    def system_prompt(self) -> str:
        """ToolSandbox's agent system prompt (the seeded SYSTEM -> AGENT message, the same in every scenario)."""
        first = next(iter(self.scenarios.values()))
        rows = first["initial_databases"]["SANDBOX"]["rows"]
        return next(r["content"] for r in rows if r.get("sender") == "SYSTEM" and r.get("recipient") == "AGENT")

    def example_messages(self) -> list[Message]:
        """With `env.options.worked_example: true` (a departure from ToolSandbox, whose agent gets no example): one
        train-split scenario played by its reference path (the user's request, the tool call, its result, the reply),
        shown before every conversation so a small model sees the tool-call format. Off by default."""
        if not self.worked_example:
            return []
        return list(self._example)

    @cached_property
    def _example(self) -> list[Message]:
        from trace_rl.envs.toolsandbox.reference import STOP_TOKEN, replay_reference

        scenario = self.scenarios[WORKED_EXAMPLE]
        assert family_split(scenario["base_scenario"]) == "train"  # never a test family's data
        replay, _ = replay_reference(self, self._task(scenario))
        shown = [m for m in replay.messages if not (m.role == "user" and m.content == STOP_TOKEN)]
        return [m.model_copy(update={"example": True}) for m in shown]

    def scripted_user(self, task: Task) -> ToolSandboxScriptedUser:
        return ToolSandboxScriptedUser()

    def llm_user(self, client: ModelClient, task: Task, sampling: SamplingParams | None = None) -> ToolSandboxLLMUser:
        """ToolSandbox's own LLM user for `task` (the engine prefers it to the generic one)."""
        return ToolSandboxLLMUser(client, self.scenario(task), sampling=sampling)

    def guidelines(self) -> str:
        return ENDING_NOTE

    def tool_schemas_for(self, task: Task) -> list[dict[str, Any]]:
        """The agent-facing schemas of `task`'s scenario (what an engine asking per task should render)."""
        return list(self.scenario(task)["agent_tool_schemas"])

    def all_agent_schemas(self) -> list[dict[str, Any]]:
        tools = data.load_tools(self.root)
        return [t["openai_schema"] for t in tools.values() if "AGENT" in t["visible_to"]]

    def reference_check(self, task: Task) -> tuple[bool, list[str]]:
        """`env check`: play `task`'s reference path (reference.py) through an environment; (similarity == 1.0,
        the tool errors on the way)."""
        from trace_rl.envs.toolsandbox.reference import replay_reference

        replay, scores = replay_reference(self, task)
        return scores["similarity"] == 1.0, replay.errors

    def user_instruction(self, task: Task) -> str:
        return user_instruction(self.scenario(task))

    def __repr__(self) -> str:
        return f"ToolSandboxDomain({self.name!r})"


__all__ = ["SPLITS", "TASK_SETS", "ToolSandboxDomain", "ToolSandboxEnvironment", "family_split", "in_task_set"]
