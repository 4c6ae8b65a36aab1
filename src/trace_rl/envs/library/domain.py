"""`LibraryDomain`: the built-in offline domain (a public library's circulation desk) behind the `Domain` protocol.

Each task has its own world: `LibraryEnvironment.pristine_dbs(task)` regenerates (cached) the world of the task's
`metadata["world_seed"]`, and the task's initial state deep-merges the scenario patch over it. Splits are drawn from
disjoint seed ranges (`splits.py`). Options (`EnvConfig.options`): n_train, n_test, seed, train_start, test_start,
families, prompt (the prompt's version).
"""

from __future__ import annotations

from functools import cached_property, lru_cache
from importlib import resources
from typing import Any

from trace_rl.envs.base import ToolkitEnvironment
from trace_rl.envs.library.data_model import LibraryDB
from trace_rl.envs.library.families import CAPABILITY_TYPES, FAMILIES, make_task
from trace_rl.envs.library.prompt import example_messages, policy_text, prompt_sha, system_prompt
from trace_rl.envs.library.splits import SplitOptions, fresh_train_seeds, split_seeds
from trace_rl.envs.library.tools import LibraryTools
from trace_rl.envs.library.user import LibraryScriptedUser
from trace_rl.envs.library.world import world
from trace_rl.errors import UserError
from trace_rl.types import Message, Task

NAME = "library"


class LibraryEnvironment(ToolkitEnvironment):
    """A toolkit environment whose pristine DB is the world of the task's seed."""

    def __init__(self) -> None:
        super().__init__(toolkit_cls=LibraryTools, db=world(0), policy=policy_text())

    def pristine_dbs(self, task: Task | None) -> tuple[LibraryDB, None]:
        if task is None:
            return world(0), None
        return world(int(task.metadata.get("world_seed", 0))), None


@lru_cache(maxsize=1)
def guidelines_text() -> str:
    """Instructions for an LLM user simulator playing a library member (package data `guidelines.md`)."""
    return resources.files("trace_rl.envs.library").joinpath("guidelines.md").read_text(encoding="utf-8").strip()


class LibraryDomain:
    """The library circulation desk: procedurally generated tasks in five families."""

    name = NAME
    prompt_lists_tools = True  # system_prompt() lists the tools: clients need no schema listing
    families = FAMILIES
    capability_types = CAPABILITY_TYPES

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options = SplitOptions.model_validate(options or {})

    @property
    def prompt_version(self) -> str:
        return self.options.prompt

    def splits(self) -> list[str]:
        return ["train", "test"]

    @cached_property
    def _tasks(self) -> dict[str, list[Task]]:
        return {split: [make_task(f, s) for f, s in split_seeds(split, self.options)] for split in self.splits()}

    def tasks(self, split: str) -> list[Task]:
        if split not in self.splits():
            raise UserError(f"library has no split '{split}' (splits: train, test)")
        return list(self._tasks[split])

    def make_task(self, family: str, seed: int) -> Task:
        return make_task(family, seed)

    def template_sample(self, per_family: int = 150) -> list[Task]:
        """Tasks of every family from the fresh seed range (neither train nor test). The leak guard treats the
        phrases they share with a test instruction as the family templates' own words, not test content."""
        seeds = fresh_train_seeds(per_family, start=900_000, options=self.options)
        return [make_task(f, s) for f in self.options.families for s in seeds]

    def make_env(self) -> LibraryEnvironment:
        return LibraryEnvironment()

    def system_prompt(self) -> str:
        return system_prompt()

    def example_messages(self) -> list[Message]:
        """The worked example turns that go between the system prompt and the conversation."""
        return example_messages(self.options.prompt)

    def prompt_record(self) -> dict[str, str]:
        """What to record with a run: the prompt's version and hash."""
        return {"prompt_version": self.options.prompt, "prompt_sha": prompt_sha(self.options.prompt)}

    def scripted_user(self, task: Task) -> LibraryScriptedUser:
        return LibraryScriptedUser.for_task(task)

    def guidelines(self) -> str:
        return guidelines_text()
