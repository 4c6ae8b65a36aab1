"""`TrainEnv` implementations: any `Domain` plus a seeded task generator, a library family as a stand-in capability,
a uniform mix of several environments (the multi-capability baseline), and the run directory's synthesized
environments (`runs/<name>/envs/<capability>/`, issue 7).

Scoring: the domain's τ²-style evaluator gives the reward; success is `reward == 1` (`envs.evaluator.is_success`). A
synthesized environment may add a shaped reward; the success label then stays the evaluator's binary outcome.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trace_rl.envs.evaluator import is_success
from trace_rl.errors import UserError
from trace_rl.training.protocol import EpisodeScore, TrainEnv
from trace_rl.types import Message, Task, TerminationReason

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
    try:
        from trace_rl.envs.library import FAMILIES, fresh_train_seeds, make_task
        from trace_rl.envs.library.splits import SplitOptions, split_seeds
    except ImportError:
        raise UserError("the library domain is not available in this build") from None
    if family not in FAMILIES:
        raise UserError(f"unknown library task family '{family}' (known: {', '.join(FAMILIES)})")
    from trace_rl.envs.registry import load_domain

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


def agent_tools(train_env: TrainEnv, env: Environment) -> list[dict[str, Any]] | None:
    """The tool schemas to render for the agent (`agent_tools` is optional on a TrainEnv)."""
    fn = getattr(train_env, "agent_tools", None)
    return fn(env) if fn is not None else env.tool_schemas()


def agent_examples(train_env: TrainEnv, task: Task) -> list[Message]:
    """The worked-example turns placed between the system prompt and the conversation (`example_messages` is
    optional on a TrainEnv): training must see the prompt the agent is deployed with."""
    fn = getattr(train_env, "example_messages", None)
    return list(fn(task)) if fn is not None else []


# -- environments of a run directory --------------------------------------------------------------------------------


def env_status(folder: Path) -> str | None:
    """`ready` (passed calibration), `needs_attention`, or None (not finished) from `<folder>/status.json`."""
    try:
        from trace_rl.envs.synthetic.spec import EnvStatus
    except ImportError:
        return None
    status = EnvStatus.load(folder)
    return status.status if status is not None else None


def load_synthesized_env(folder: Path) -> TrainEnv:
    """The capability environment synthesized in `folder` (issue 7's loader, found by name)."""
    try:
        module = importlib.import_module("trace_rl.envs.synthetic")
    except ImportError:
        raise UserError("synthesized environments are not available in this build") from None
    for attr in ("load_train_env", "load_capability_env"):
        loader = getattr(module, attr, None)
        if loader is not None:
            return loader(Path(folder))
    raise UserError(f"{folder}: trace_rl.envs.synthetic has no load_train_env(folder)")


def run_envs(run_root: Path) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Environment folders of a run that passed calibration, and the others with their status (skipped)."""
    root = Path(run_root) / "envs"
    ready: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    if not root.is_dir():
        return ready, skipped
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        status = env_status(folder)
        if status == "ready":
            ready.append(folder)
        else:
            skipped.append((folder, status or "unfinished"))
    return ready, skipped


def env_from_spec(spec: str) -> TrainEnv:
    """`library:<family>` on the command line (a stand-in capability environment)."""
    prefix, _, rest = spec.partition(":")
    if prefix == "library" and rest:
        return library_family_env(rest)
    raise UserError(f"unknown training environment '{spec}': use library:<family> or a run's envs/<capability>/")
