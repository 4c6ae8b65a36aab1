"""`CapabilityEnvironment`: one synthesized, capability-targeted environment (TRACE Definition 2), loaded from
`envs/<capability>/`.

It keeps the target's tools, DB and policy (P_c ⊆ P_E): `make_env()` is the target domain's own environment, the
system prompt is the target's (plus the spec's optional intro), and tasks are seeded (`make_task(seed)`, G_c).
Scoring (R_c, y_c) is `reward(task, trajectory) -> (shaped reward, binary success)`, see `reward.py`. A hinted
system prompt carries an `<expert_guidance>` block that `strip_hint` removes, so training can swap it back.

It is also a `Domain` (splits train/test = the spec's disjoint seed ranges), so rollout, evaluate and routing can
run on it as on any target.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from functools import cached_property
from pathlib import Path
from typing import Any

from trace_rl.artifacts.environments import EnvSpec, read_env_spec, read_env_status
from trace_rl.artifacts.layout import EnvLayout
from trace_rl.config import EnvConfig
from trace_rl.envs.base import Domain, ToolkitEnvironment
from trace_rl.envs.evaluator import is_success
from trace_rl.envs.synthetic.generators import TaskGenerator, build_generator
from trace_rl.envs.synthetic.leak_guard import LeakIndex, task_leaks
from trace_rl.envs.synthetic.reward import RewardModel, Score
from trace_rl.envs.synthetic.users import TemplateUser
from trace_rl.envs.users import UserSimulator
from trace_rl.errors import UserError
from trace_rl.types import Message, Task, Trajectory

MAX_DRAWS = 8
DECISION_TURNS = 3  # a decision is judged on the agent's first moves: a read or two, then the move
HINT_OPEN = "<expert_guidance>"
HINT_CLOSE = "</expert_guidance>"
_HINT_BLOCK = re.compile(r"\n*" + re.escape(HINT_OPEN) + r".*?" + re.escape(HINT_CLOSE) + r"\n?", re.S)


def hint_block(text: str) -> str:
    return f"{HINT_OPEN}\n{text.strip()}\n{HINT_CLOSE}"


def strip_hint(prompt: str) -> str:
    """The system prompt without its hint block (the unhinted prompt, exactly)."""
    return _HINT_BLOCK.sub("", prompt)


def is_hinted(prompt: str) -> bool:
    return HINT_OPEN in prompt


def target_config(spec: EnvSpec) -> EnvConfig:
    return EnvConfig.model_validate(spec.target)


class CapabilityEnvironment:
    """A capability environment: seeded tasks over the target's tools, shaped reward, hinted prompt."""

    def __init__(self, spec: EnvSpec, folder: Path, *, status: str | None = None, target: Domain | None = None) -> None:
        self.spec = spec
        self.folder = Path(folder)
        self.name = spec.name
        loaded = read_env_status(EnvLayout(self.folder)) if status is None else None
        self.status: str = status or (loaded.status if loaded else "needs_attention")
        self._target = target
        self._tasks: OrderedDict[int, Task] = OrderedDict()
        self._by_id: dict[str, Task] = {}

    # -- target ------------------------------------------------------------------------------------------------------
    @property
    def target(self) -> Domain:
        if self._target is None:
            from trace_rl.envs.registry import load_domain

            cfg = target_config(self.spec)
            self._target = load_domain(cfg.name, cfg)
        return self._target

    @cached_property
    def generator(self) -> TaskGenerator:
        return build_generator(self.spec, self.folder, self.target)

    @cached_property
    def leak_index(self) -> LeakIndex | None:
        return LeakIndex.load(self.folder)

    @cached_property
    def rewarder(self) -> RewardModel:
        return RewardModel(self.spec.reward, self.make_env)

    # -- the training API -------------------------------------------------------------------------------------------
    def make_task(self, seed: int) -> Task:
        """The task of `seed` (deterministic; cached)."""
        seed = int(seed)
        if seed not in self._tasks:
            task = self._draw(seed)
            self._tasks[seed] = task
            self._by_id[task.id] = task
            while len(self._tasks) > 4096:
                old = self._tasks.popitem(last=False)[1]
                self._by_id.pop(old.id, None)
        return self._tasks[seed]

    def _draw(self, seed: int) -> Task:
        """Generate, refusing draws that contain a test-split identifier, name or phrase (leak guard)."""
        hits: list[str] = []
        for salt in range(MAX_DRAWS):
            try:
                task = self.generator.make(seed, salt)
            except UserError as exc:
                hits.append(str(exc))
                continue
            if self.leak_index is None:
                return task
            found = task_leaks(self.leak_index, task)
            if not found:
                return task
            hits.extend(f"{h.kind} {h.masked}" for h in found)
        raise UserError(
            f"capability env '{self.name}': no usable task for seed {seed} in {MAX_DRAWS} draws: {hits[:3]}"
        )

    @property
    def target_scored(self) -> bool:
        """The target environment's own score is the reward (ToolSandbox similarity), not the shaped formula."""
        return self.spec.reward.source == "target"

    def make_env(self) -> ToolkitEnvironment:
        env = self.target.make_env()
        if not isinstance(env, ToolkitEnvironment) and not self.target_scored:
            raise UserError(f"capability env '{self.name}': the target's environment is not toolkit-backed")
        return env  # type: ignore[return-value]  # a target-scored environment needs only the Environment protocol

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self.make_env().tool_schemas()

    def tool_schemas_for(self, task: Task) -> list[dict[str, Any]]:
        """The agent's schemas for `task`: the target's per-task schemas where it has them (ToolSandbox scenarios)."""
        per_task = getattr(self.target, "tool_schemas_for", None)
        return per_task(task) if per_task is not None else self.tool_schemas()

    @property
    def llm_user(self) -> Any:
        """The target's own LLM user factory (ToolSandbox's), or None: the engine then builds the generic one."""
        return getattr(self.target, "llm_user", None)

    @property
    def prompt_lists_tools(self) -> bool:
        return bool(getattr(self.target, "prompt_lists_tools", False))

    def example_messages(self) -> list[Message]:
        """The target's worked-example turns, so the agent sees the target's prompt format."""
        examples = getattr(self.target, "example_messages", None)
        return examples() if callable(examples) else []

    def system_prompt(self, hinted: bool = False) -> str:
        """The target's system prompt (plus the spec's intro); `hinted` appends the marked hint block."""
        parts = [self.target.system_prompt().strip()]
        if self.spec.intro.strip():
            parts.append(self.spec.intro.strip())
        prompt = "\n\n".join(parts)
        if hinted:
            prompt += "\n\n" + hint_block(self.spec.hint.text)
        return prompt

    @property
    def agent_turns(self) -> int | None:
        """The agent turns an episode needs at most: a decision environment's judge reads only the first few moves
        (what follows the decision is not scored, so sampling it is wasted); None: no limit of its own."""
        return DECISION_TURNS if self.spec.reward.success == "decision" else None

    @property
    def hint_fraction(self) -> float:
        return self.spec.hint.fraction

    def scripted_user(self, task: Task) -> UserSimulator:
        """The target's scripted user when the task carries its script or is a whole target scenario (a
        target-scored environment), else the template user."""
        if "user_script" in task.metadata or self.target_scored:
            user = self.target.scripted_user(task)
            if user is not None:
                return user
        return TemplateUser.for_task(task)

    def guidelines(self) -> str:
        """User-simulator guidelines for an LLM user (the target's)."""
        target_guidelines = getattr(self.target, "guidelines", None)
        if target_guidelines is None:
            raise UserError(f"capability env '{self.name}': the target has no user-simulator guidelines")
        return str(target_guidelines())

    def score(self, task: Task, trajectory: Trajectory) -> Score:
        if self.target_scored:  # the trajectory was scored by the target's own environment (run_episode)
            reward = float(trajectory.reward or 0.0)
            return Score(reward=reward, success=is_success(reward), components={"target": reward}, checks={})
        return self.rewarder.score(task, trajectory)

    def reward(self, task: Task, trajectory: Trajectory) -> tuple[float, bool]:
        """(shaped reward in [0, 1], binary success DB × COMMUNICATE == 1)."""
        s = self.score(task, trajectory)
        return s.reward, s.success

    # -- the Domain protocol ----------------------------------------------------------------------------------------
    def splits(self) -> list[str]:
        return ["train", "test"]

    def tasks(self, split: str) -> list[Task]:
        try:
            seeds = self.spec.splits.seeds(split)
        except ValueError as exc:
            raise UserError(f"capability env '{self.name}': {exc}") from None
        return [self.make_task(s) for s in seeds]

    def task_by_id(self, task_id: str) -> Task:
        if task_id not in self._by_id:
            prefix = f"{self.name}-"
            if not task_id.startswith(prefix) or not task_id[len(prefix) :].isdigit():
                raise UserError(f"capability env '{self.name}': no task '{task_id}'")
            self.make_task(int(task_id[len(prefix) :]))
        return self._by_id[task_id]


def load_capability_env(folder: Path, *, target: Domain | None = None) -> CapabilityEnvironment:
    """Load `envs/<capability>/` (spec.json, status.json, generator files)."""
    return CapabilityEnvironment(read_env_spec(EnvLayout(folder)), Path(folder), target=target)


__all__ = [
    "HINT_CLOSE",
    "HINT_OPEN",
    "CapabilityEnvironment",
    "hint_block",
    "is_hinted",
    "load_capability_env",
    "strip_hint",
]
