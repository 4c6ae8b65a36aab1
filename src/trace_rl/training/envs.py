"""`TrainEnv` implementations: any `Domain` plus a seeded task generator, a library family as a stand-in capability,
and a uniform mix of several environments (the multi-capability baseline). Which of a run's environments train is
`selection.py`.

Scoring: the domain's τ²-style evaluator gives the reward; success is `reward == 1` (`envs.evaluator.is_success`). A
synthesized environment may add a shaped reward; the success label then stays the evaluator's binary outcome.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from trace_rl.config import EnvConfig
from trace_rl.engine.prompt import agent_examples, agent_tools
from trace_rl.envs.evaluator import is_success
from trace_rl.envs.library import FAMILIES, fresh_train_seeds, make_task
from trace_rl.envs.library.splits import SplitOptions, split_seeds
from trace_rl.envs.registry import load_domain
from trace_rl.errors import UserError
from trace_rl.training.protocol import TrainEnv
from trace_rl.types import EpisodeScore, Message, Task, TerminationReason

if TYPE_CHECKING:
    from trace_rl.envs.base import Domain, Environment
    from trace_rl.envs.users import UserSimulator


class DomainTrainEnv:
    """A `Domain` plus `make_task(seed)`: the smallest capability environment.

    `hint` (optional) is appended to the system prompt of hinted rollouts. `render_tools=False` passes no tool schemas
    to the chat template, for domains whose system prompt already lists the tools (the library). `shaped=True` adds
    partial credit to the evaluator's binary reward (`shaped_components`); success stays `reward == 1`.
    `prefix_hint=True` makes hinted episodes start with the opening of the first gold tool call (`hint_prefix`).
    """

    def __init__(
        self,
        name: str,
        domain: Domain,
        make_task: Callable[[int], Task],
        *,
        hint: str | None = None,
        render_tools: bool = True,
        train_seeds: Sequence[int] | None = None,
        test_seeds: Sequence[int] | None = None,
        shaped: bool = False,
        prefix_hint: bool = False,
    ) -> None:
        self.name = name
        self.domain = domain
        self._make_task = make_task
        self.hint = hint
        self.render_tools = render_tools
        self.train_seeds = list(train_seeds) if train_seeds is not None else None
        self.test_seeds = list(test_seeds) if test_seeds is not None else None
        self.resample_seed_start: int | None = None
        self.shaped = shaped
        self.prefix_hint = prefix_hint

    def make_task(self, seed: int) -> Task:
        return self._make_task(seed)

    def make_env(self, task: Task) -> Environment:
        return self.domain.make_env()

    def system_prompt(self, task: Task, *, hinted: bool = False) -> str:
        base = self.domain.system_prompt()
        return f"{base}\n\nHint: {self.hint}" if hinted and self.hint else base

    def has_hint(self) -> bool:
        return bool(self.hint) or self.prefix_hint

    def example_messages(self, task: Task) -> list[Message]:
        examples = getattr(self.domain, "example_messages", None)
        return examples() if callable(examples) else []

    def hint_prefix(self, task: Task) -> str | None:
        """With `prefix_hint`: the opening of the task's first gold tool call up to its first argument's value,
        `{"name": "<tool>", "arguments": {"<arg>": ` (plus the opening quote of a string value)."""
        actions = (task.evaluation_criteria.actions if task.evaluation_criteria else None) or []
        if not self.prefix_hint or not actions:
            return None
        head = '{"name": "' + actions[0].name + '", "arguments": {'
        if not actions[0].arguments:
            return head
        key, value = next(iter(actions[0].arguments.items()))
        return head + f'"{key}": ' + ('"' if isinstance(value, str) else "")

    def agent_tools(self, env: Environment) -> list[dict[str, Any]] | None:
        return env.tool_schemas() if self.render_tools else None

    def scripted_user(self, task: Task) -> UserSimulator:
        user = self.domain.scripted_user(task)
        if user is None:
            raise UserError(f"environment '{self.name}' has no scripted user for task {task.id}")
        return user

    async def score(
        self, env: Environment, task: Task, messages: list[Message], termination: TerminationReason
    ) -> EpisodeScore:
        info = await env.score(task, messages, termination)
        success = is_success(info.reward)
        breakdown = dict(info.breakdown)
        if not self.shaped:
            return EpisodeScore(shaped=info.reward, success=success, breakdown=breakdown)
        progress, said = shaped_components(task, messages)
        breakdown.update({"progress": progress, "communicate_share": said})
        shaped = SHAPE_ALPHA * float(success) + (1 - SHAPE_ALPHA) * (0.6 * progress + 0.4 * said)
        return EpisodeScore(shaped=shaped, success=success, breakdown=breakdown)


SHAPE_ALPHA = 0.5


def shaped_components(task: Task, messages: list[Message]) -> tuple[float, float]:
    """Partial credit for the stand-in shaped reward (the recipe of TRACE App. B, as synthesized environments use):
    progress = mean over gold actions of 1 (a call matched it, name and arguments), 0.5 (only the name), else 0;
    communicate = share of the required values said to the user (case-insensitive, commas ignored)."""
    from trace_rl.envs.evaluator import action_matches

    criteria = task.evaluation_criteria
    calls = [c for m in messages if m.role == "assistant" for c in (m.tool_calls or [])]
    gold = (criteria.actions if criteria else None) or []
    credit = [
        1.0 if any(action_matches(g, c) for c in calls) else 0.5 if any(c.name == g.name for c in calls) else 0.0
        for g in gold
    ]
    progress = sum(credit) / len(credit) if credit else 1.0
    infos = (criteria.communicate_info if criteria else None) or []
    texts = [m.text.replace(",", "").lower() for m in messages if m.role == "assistant" and m.content]
    said = sum(any(i.lower() in t for t in texts) for i in infos) / len(infos) if infos else 1.0
    return progress, said


def library_family_env(family: str, *, name: str | None = None, n_train: int = 4096) -> DomainTrainEnv:
    """A library task family as a capability environment (the stand-in until synthesized environments exist).

    Training seeds come from the library's fresh range (neither its train nor its test split); the held-out seeds are
    the family's tasks of the library's test split. The reward is shaped (0.5 · success + 0.5 · partial credit for
    gold actions and values said), as synthesized environments' are, so an uncalibrated family still gives signal.
    Hinted episodes (`hint_fraction > 0`) start with the opening of the first gold tool call (off by default: with
    the library prompt's worked examples SmolLM2-135M makes the first call on its own).
    """
    if family not in FAMILIES:
        raise UserError(f"unknown library task family '{family}' (known: {', '.join(FAMILIES)})")
    domain = load_domain("library")
    test = [s for f, s in split_seeds("test", SplitOptions(n_test=20 * len(FAMILIES))) if f == family]
    env = DomainTrainEnv(
        name or family,
        domain,
        lambda seed: make_task(family, seed),
        render_tools=False,
        shaped=True,
        prefix_hint=True,
        train_seeds=fresh_train_seeds(n_train),
        test_seeds=test,
    )
    env.resample_seed_start = fresh_train_seeds(1, start=n_train)[0]
    return env


def task_list_env(name: str, domain: Domain, tasks: list[Task]) -> DomainTrainEnv:
    """A `TrainEnv` over a fixed list of tasks (e.g. a target's train split): seed s plays task s mod n."""
    return DomainTrainEnv(name, domain, lambda seed: tasks[seed % len(tasks)], train_seeds=list(range(len(tasks))))


def domain_split_env(name: str, env: EnvConfig, split: str) -> DomainTrainEnv:
    """`task_list_env` over the tasks of a configured environment's split, built from its config alone (a recipe a
    spawned training process can run)."""
    domain = load_domain(env.name, env)
    return task_list_env(name, domain, domain.tasks(split))


class MixTrainEnv:
    """A uniform mix of several environments: seed `s` belongs to environment `s % n` with its own seed `s // n`.

    Used for the paper's multi-capability baseline (one adapter on all capability environments); the task remembers
    which environment it came from, so every other call is routed by the task.
    """

    def __init__(self, name: str, envs: Sequence[TrainEnv]) -> None:
        if not envs:
            raise UserError("a mixed environment needs at least one environment")
        self.name = name
        self.envs = list(envs)

    def _of(self, task: Task) -> TrainEnv:
        return self.envs[int(task.metadata["mix_index"])]

    def make_task(self, seed: int) -> Task:
        n = len(self.envs)
        task = self.envs[seed % n].make_task(seed // n)
        return task.model_copy(update={"metadata": {**task.metadata, "mix_index": seed % n, "mix_seed": seed}})

    def make_env(self, task: Task) -> Environment:
        return self._of(task).make_env(task)

    def system_prompt(self, task: Task, *, hinted: bool = False) -> str:
        return self._of(task).system_prompt(task, hinted=hinted)

    def has_hint(self) -> bool:
        return any(e.has_hint() for e in self.envs)

    def example_messages(self, task: Task) -> list[Message]:
        return agent_examples(self._of(task), task)

    def agent_tools(self, env: Environment) -> list[dict[str, Any]] | None:
        return agent_tools(self.envs[0], env)  # the mixed environments share one target and its prompt format

    def scripted_user(self, task: Task) -> UserSimulator:
        return self._of(task).scripted_user(task)

    async def score(
        self, env: Environment, task: Task, messages: list[Message], termination: TerminationReason
    ) -> EpisodeScore:
        return await self._of(task).score(env, task, messages, termination)
