"""`Tau2Domain`: a τ²-bench domain (mock, retail, airline) behind trace-rl's `Domain` protocol.

- Task sets: `head` (`tasks.json`, upstream HEAD `a2c0247`) or `v0.2` (`tasks_v0.2.json`; retail then hides
  `get_item_details`, giving the paper's 15 retail tools). v0.2.0 has no split file: its splits reuse HEAD's
  `split_tasks.json`, dropping ids the v0.2 file lacks (mock's `update_task_with_user_tools`).
- Splits: those of `split_tasks.json` (`base` = all; airline and retail also `train` / `test`). Retail's `tasks()`
  also takes `tau1` (500 τ-bench training tasks) and `train+tau1`; they are not listed by `splits()`, so "every
  split" stays the 114 τ² tasks.
- Reward basis: the task's own (default `[DB, COMMUNICATE]`) unless `env.reward_basis` overrides it for every task.
  The paper's setting is `task_set: v0.2`, or HEAD tasks with `reward_basis: [DB, COMMUNICATE]` and
  `options: {hidden_tools: [get_item_details]}` (the only option; it hides more tools from the agent).
- Environments show the agent the exact upstream schemas of `tools.json`; tool semantics, quirks: see the domain
  toolkits and `quirks.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trace_rl.config import EnvConfig
from trace_rl.envs.base import ToolkitEnvironment
from trace_rl.envs.evaluator import ScoringRules
from trace_rl.envs.tau2 import data
from trace_rl.envs.tau2.db import Tau2DB
from trace_rl.envs.tau2.quirks import resolve_quirks
from trace_rl.envs.tau2.tools_base import Tau2Tools
from trace_rl.envs.users import ScriptedUser
from trace_rl.errors import UserError
from trace_rl.types import RewardType, Task

INSTRUCTIONS = """You are a customer-service agent. Help the user while following the policy below to the letter.
On each turn do exactly one of two things: write a message to the user, or call a tool. Never do both in one turn.
Use only information from the user, the tools and the policy; never invent it.
Tool arguments must be valid JSON that matches the tool's schema."""

V02_HIDDEN_TOOLS = {"retail": frozenset({"get_item_details"})}


@dataclass(frozen=True)
class DomainParts:
    db_cls: type[Tau2DB]
    tools_cls: type[Tau2Tools]
    user_db_cls: type[Tau2DB] | None = None
    user_tools_cls: type[Tau2Tools] | None = None


def domain_parts(domain: str) -> DomainParts:
    if domain == "mock":
        from trace_rl.envs.tau2.mock import MockDB, MockTools, MockUserDB, MockUserTools

        return DomainParts(MockDB, MockTools, MockUserDB, MockUserTools)
    if domain == "retail":
        from trace_rl.envs.tau2.retail import RetailDB, RetailTools

        return DomainParts(RetailDB, RetailTools)
    if domain == "airline":
        from trace_rl.envs.tau2.airline import AirlineTools, FlightDB

        return DomainParts(FlightDB, AirlineTools)
    raise UserError(f"unknown τ² domain '{domain}' (known: {', '.join(data.DOMAINS)})")


def parse_reward_basis(basis: list[str] | None) -> list[str] | None:
    if basis is None:
        return None
    known = [r.value for r in RewardType]
    for component in basis:
        if component not in known:
            raise UserError(f"env.reward_basis: unknown component '{component}' (known: {', '.join(known)})")
    if not basis:
        raise UserError("env.reward_basis: must name at least one component")
    return list(basis)


class Tau2Domain:
    """One τ² domain with a pinned task set, reward basis and quirk settings."""

    def __init__(self, domain: str, cfg: EnvConfig) -> None:
        self.domain = domain
        self.name = f"tau2:{domain}"
        self.parts = domain_parts(domain)
        self.task_set = cfg.task_set
        self.quirks = resolve_quirks(domain, cfg.quirks)
        self.reward_basis = parse_reward_basis(cfg.reward_basis)
        self.scoring = cfg.scoring.model_dump()  # envs/evaluator.py ScoringRules
        self.root = data.resolve_data_dir(cfg.data_dir)
        self.dir = data.domain_dir(self.root, domain)
        hidden = V02_HIDDEN_TOOLS.get(domain, frozenset()) if cfg.task_set == "v0.2" else frozenset()
        self.hidden_tools = hidden | self._extra_hidden(cfg.options)

    def _extra_hidden(self, options: dict[str, Any]) -> frozenset[str]:
        unknown = sorted(set(options) - {"hidden_tools"})
        if unknown:
            raise UserError(f"env.options: unknown option '{unknown[0]}' for {self.name} (known: hidden_tools)")
        names = options.get("hidden_tools") or []
        tools = self.parts.tools_cls.tool_methods()
        if not isinstance(names, list) or any(n not in tools for n in names):
            raise UserError(f"env.options.hidden_tools: must list tools of {self.name} (known: {', '.join(tools)})")
        return frozenset(names)

    # -- files --------------------------------------------------------------------------------------------------
    @property
    def tasks_file(self) -> Path:
        return self.dir / data.TASK_FILES[self.task_set]

    def _all_tasks(self) -> list[Task]:
        return data.load_tasks(self.tasks_file)

    def _tau1_tasks(self) -> list[Task]:
        return data.load_tasks(self.dir / data.TAU1_FILE)

    def _split_ids(self) -> dict[str, tuple[str, ...]]:
        return data.load_splits(self.dir / "split_tasks.json")

    # -- Domain protocol ----------------------------------------------------------------------------------------
    def splits(self) -> list[str]:
        """The splits of `split_tasks.json`; `tasks()` also takes `extra_splits()` (kept out so 'all splits' = 114)."""
        return list(self._split_ids())

    def extra_splits(self) -> list[str]:
        return ["tau1", "train+tau1"] if self.domain == "retail" else []

    def tasks(self, split: str = "base") -> list[Task]:
        if self.domain == "retail" and split == "tau1":
            return self._tau1_tasks()
        if self.domain == "retail" and split == "train+tau1":
            return self.tasks("train") + self._tau1_tasks()
        ids = self._split_ids()
        if split not in ids:
            known = ", ".join([*self.splits(), *self.extra_splits()])
            raise UserError(f"{self.name}: unknown split '{split}' (known: {known})")
        by_id = {task.id: task for task in self._all_tasks()}
        missing = [task_id for task_id in ids[split] if task_id not in by_id]
        if missing and self.task_set == "head":
            raise UserError(
                f"{self.dir / 'split_tasks.json'}: {split}: task id {missing[0]!r} is not in {self.tasks_file.name}"
            )
        return [by_id[task_id] for task_id in ids[split] if task_id in by_id]

    def make_env(self) -> ToolkitEnvironment:
        parts = self.parts
        db = data.load_db(self.dir / "db.json", parts.db_cls)
        user_db = data.load_db(self.dir / "user_db.json", parts.user_db_cls) if parts.user_db_cls else None
        agent_schemas, user_schemas = self.tool_schemas()
        env = ToolkitEnvironment(
            toolkit_cls=parts.tools_cls,
            db=db,
            policy=self.policy(),
            user_toolkit_cls=parts.user_tools_cls,
            user_db=user_db,
            schemas=agent_schemas,
            user_schemas=user_schemas if parts.user_tools_cls else None,
            hidden_tools=self.hidden_tools,
            reward_basis_override=self.reward_basis,
            toolkit_kwargs={"quirks": self.quirks},
        )
        env.scoring_rules = ScoringRules(**self.scoring)  # type: ignore[attr-defined]
        return env

    def system_prompt(self) -> str:
        return f"<instructions>\n{INSTRUCTIONS}\n</instructions>\n<policy>\n{self.policy()}\n</policy>"

    def scripted_user(self, task: Task) -> ScriptedUser | None:
        """Mock tasks carry a `ticket` a scripted user can state; retail/airline need an LLM user."""
        if self.domain == "mock" and task.ticket:
            return ScriptedUser([task.ticket], name="scripted:ticket")
        return None

    # -- extras -------------------------------------------------------------------------------------------------
    def policy(self) -> str:
        return data.read_text(self.dir / "policy.md")

    def guidelines(self) -> str:
        """User-simulator guidelines for `LLMUserSimulator` (the tools variant when the user has tools)."""
        return data.read_text(data.guidelines_path(self.root, with_tools=self.parts.user_tools_cls is not None))

    def tool_schemas(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Exact upstream schemas (agent, user), checked against the toolkits; hidden tools not removed here."""
        path = self.dir / "tools.json"
        agent, user = data.load_tool_schemas(path)
        for key, schemas, kit in (
            ("agent_tools", agent, self.parts.tools_cls),
            ("user_tools", user, self.parts.user_tools_cls),
        ):
            implemented = set(kit.tool_methods()) if kit is not None else set()
            declared = {s["function"]["name"] for s in schemas}
            if declared != implemented:
                diff = sorted(declared ^ implemented)
                raise UserError(f"{path}: {key}: tools {diff} do not match the {self.domain} toolkit")
        return agent, user

    def __repr__(self) -> str:
        return f"Tau2Domain({self.name!r}, task_set={self.task_set!r})"
