"""Task generators behind `CapabilityEnvironment.make_task(seed)`, one per `GeneratorSpec.kind`.

- `library_variants`: new seeds of the library families the evidence tasks came from (the library's own
  `make_task(family, seed)`, seeds from its fresh range, disjoint from train and test). The difficulty knob steers
  which variant a seed lands on (trivial → hard) and, from 2 on, adds knob − 1 distractor records (a namesake
  member, a book whose title contains the target title) to the task's initial-state patch.
- `library_decisions`: library tasks opened at a decision point (`library_decisions.py`, TRACE's Definition 2).
- `tau2_variants`: see `tau2_variants.py`; `toolsandbox_scenarios` and `target_reseed` (an imported OpenEnv or
  verifiers target's fresh seeds or rows): their own modules.
- `code`: tasks an author model's generator wrote, materialised at synthesis time in `tasks.jsonl`; a seed outside
  that pool runs the generator again in the sandbox.

All generators are deterministic in (spec, seed).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from trace_rl.artifacts.environments import EnvSpec, read_task_pool
from trace_rl.artifacts.layout import EnvLayout
from trace_rl.envs.state import deep_merge
from trace_rl.envs.synthetic.generated import GeneratedTask
from trace_rl.errors import UserError
from trace_rl.types import Action, EvaluationCriteria, InitialState, RewardType, Task

if TYPE_CHECKING:
    from trace_rl.envs.base import Domain

DIFFICULTY_RANK = {"trivial": 0, "easy": 1, "medium": 2, "hard": 3}
STOP_HINT = "When everything you came for is handled (or refused with a reason), end the conversation with ###STOP###."


class TaskGenerator(Protocol):
    def make(self, seed: int, salt: int = 0) -> Task:
        """The task of `seed`; `salt` > 0 draws an alternative (used when a draw is refused, e.g. by the leak
        guard)."""
        ...


def synthetic_task_id(name: str, seed: int) -> str:
    return f"{name}-{seed}"


# -- library ---------------------------------------------------------------------------------------------------------
class LibraryVariants:
    """params: `families` {family: weight}; `tries` per seed to land on the target difficulty (default 6).

    The difficulty knob (default 1) also re-weights the families: weight × 4^((knob − 1) · level), where level is the
    rank of the family's easiest variant (lookup 0 … multi-step 2). So when calibration finds an environment too hard
    and moves the knob to 0, the evidence families the base can sometimes solve dominate (a calibration move of
    trace-rl's own: the released code asks the author LLM to rewrite the generator instead).
    """

    def __init__(self, spec: EnvSpec, target: Domain) -> None:
        from trace_rl.envs.library import make_task

        self.spec = spec
        self.target = target
        self._make = make_task
        fams = spec.generator.params.get("families") or {}
        if not fams:
            raise UserError(f"capability env '{spec.name}': library_variants needs params.families")
        from trace_rl.envs.library.families import FAMILY_LEVELS

        self.families = sorted(fams)
        shift = spec.generator.difficulty - 1
        self.weights = [float(fams[f]) * 4.0 ** (shift * FAMILY_LEVELS.get(f, 1)) for f in self.families]
        self.tries = int(spec.generator.params.get("tries", 4))
        from trace_rl.envs.library.splits import split_seed_span

        self.forbidden = split_seed_span(spec.target.get("options"))  # the target's train and test seeds

    def library_seed(self, seed: int, salt: int, attempt: int) -> int:
        """Seeds of the library's fresh range (neither train nor test): 32 per task seed."""
        return self.spec.generator.seed_base + seed * 32 + (salt % 8) * 4 + attempt

    def make(self, seed: int, salt: int = 0) -> Task:
        knob = self.spec.generator.difficulty
        rng = random.Random(f"trace-rl/synthetic/{self.spec.name}/{seed}/{salt}")
        family = rng.choices(self.families, weights=self.weights)[0]
        target_rank = min(3, max(0, knob - 1 + rng.choice((0, 0, 1))))
        best: tuple[int, Task] | None = None
        for attempt in range(min(self.tries, 4)):
            library_seed = self.library_seed(seed, salt, attempt)
            if library_seed in self.forbidden:
                raise UserError(f"capability env '{self.spec.name}': seed {library_seed} is a target train/test seed")
            task = self._make(family, library_seed)
            gap = abs(DIFFICULTY_RANK.get(str(task.metadata.get("difficulty")), 1) - target_rank)
            if best is None or gap < best[0]:
                best = (gap, task)
            if gap == 0:
                break
        assert best is not None
        task = best[1]
        n_distractors = max(0, knob - 1)
        if n_distractors:
            task = add_library_distractors(task, n_distractors, rng)
        return finish(task, self.spec, seed, {"family": family, "target_rank": target_rank})


def add_library_distractors(task: Task, n: int, rng: random.Random) -> Task:
    """Add up to `n` look-alike records (a namesake member elsewhere, a book whose title extends the target title)."""
    from trace_rl.envs.library.data_model import Book, LibraryDB, Member
    from trace_rl.envs.library.world import taken_ids, unique_id, world

    base = world(int(task.metadata.get("world_seed", 0)))
    state = task.initial_state or InitialState()
    patch = dict((state.initialization_data or {}).get("agent_data") or {})
    db = LibraryDB.model_validate(deep_merge(base.model_dump(mode="python"), patch))
    taken = taken_ids(db)
    args = [a.arguments for a in (task.evaluation_criteria.actions if task.evaluation_criteria else None) or []]
    member_ids = [a["member_id"] for a in args if a.get("member_id") in db.members]
    book_ids = [a["book_id"] for a in args if a.get("book_id") in db.books]
    book_ids += [db.copies[a["copy_id"]].book_id for a in args if a.get("copy_id") in db.copies]
    added: dict[str, dict[str, Any]] = {"members": {}, "books": {}}
    options = []
    if member_ids:
        options.append("member")
    if book_ids:
        options.append("book")
    for i in range(n):
        if not options:
            break
        kind = options[i % len(options)]
        if kind == "member":
            m = db.members[member_ids[0]]
            new_id = unique_id(rng, "M", 1000, 9999, taken)
            code = str((int(m.postcode) + rng.randint(101, 8999)) % 90000 + 10000)
            email = f"{m.first_name.lower()}.{m.last_name.lower()}{rng.randint(100, 999)}@{m.email.split('@')[-1]}"
            added["members"][new_id] = Member(
                member_id=new_id,
                first_name=m.first_name,
                last_name=m.last_name,
                email=email,
                postcode=code,
                card_status="active",
                fines=0.0,
            ).model_dump(mode="python")
        else:
            b = db.books[book_ids[0]]
            new_id = unique_id(rng, "B", 100, 999, taken)
            suffix = rng.choice(("Revisited", "Stories", "A Companion", "Notes"))
            added["books"][new_id] = Book(
                book_id=new_id,
                title=f"{b.title}: {suffix}",
                author=b.author,
                year=min(2024, b.year + rng.randint(3, 20)),
            ).model_dump(mode="python")
    added = {k: v for k, v in added.items() if v}
    if not added:
        return task
    patch = deep_merge(patch, added)
    new_state = InitialState(initialization_data={"agent_data": patch})
    meta = {**task.metadata, "distractors": sorted(k for v in added.values() for k in v)}
    return task.model_copy(update={"initial_state": new_state, "metadata": meta})


# -- common ----------------------------------------------------------------------------------------------------------
def finish(task: Task, spec: EnvSpec, seed: int, extra: dict[str, Any] | None = None) -> Task:
    """Give a generated task its synthetic id and provenance metadata (the source id stays in `source_task_id`)."""
    meta = dict(task.metadata)
    meta.setdefault("source_task_id", task.id)
    meta.update(
        {
            "capability": spec.name,
            "synthetic_seed": seed,
            "generator": spec.generator.kind,
            "difficulty_knob": spec.generator.difficulty,
            **(extra or {}),
        }
    )
    return task.model_copy(update={"id": synthetic_task_id(spec.name, seed), "metadata": meta})


def generated_task(gen: GeneratedTask, task_id: str, domain_name: str) -> Task:
    """A generator's output (`GeneratedTask`) as a τ²-shaped task with id `task_id`."""
    actions = [
        Action(action_id=f"{task_id}-{i}", name=a.name, arguments=a.arguments) for i, a in enumerate(gen.gold_actions)
    ]
    instructions = {
        "domain": domain_name,
        "reason_for_call": gen.reason_for_call or gen.request,
        "known_info": gen.known_info or "; ".join(f"{k}: {v}" for k, v in gen.facts.items()),
        "unknown_info": gen.unknown_info,
        "task_instructions": STOP_HINT,
    }
    meta: dict[str, Any] = {
        **gen.world,
        "template_user": {"opening": gen.request, "facts": gen.facts, "waits_for": gen.communicate_info},
        "capability_steps": gen.capability_steps,
        "difficulty": gen.difficulty,
    }
    return Task(
        id=task_id,
        description={"purpose": "generated", "relevant_policies": None, "notes": None},
        user_scenario={"persona": None, "instructions": instructions},
        initial_state=InitialState(initialization_data={"agent_data": gen.data_patch}) if gen.data_patch else None,
        evaluation_criteria=EvaluationCriteria(
            actions=actions,
            communicate_info=list(gen.communicate_info),
            reward_basis=[RewardType.DB, RewardType.COMMUNICATE],
        ),
        metadata=meta,
    )


def to_task(gen: GeneratedTask, spec: EnvSpec, seed: int, domain_name: str) -> Task:
    """A `code` generator's output for `seed` as this environment's task."""
    return finish(generated_task(gen, synthetic_task_id(spec.name, seed), domain_name), spec, seed)


class CodeTasks:
    """Tasks of an author-written generator: `tasks.jsonl` first, the sandbox for seeds outside it."""

    def __init__(self, spec: EnvSpec, folder: Path, domain_name: str) -> None:
        self.spec = spec
        self.env = EnvLayout(folder)
        self.domain_name = domain_name
        self.pool: dict[int, Task] = {int(t.metadata["synthetic_seed"]): t for t in read_task_pool(self.env)}

    def make(self, seed: int, salt: int = 0) -> Task:
        if salt == 0 and seed in self.pool:
            return self.pool[seed]
        if salt:
            seed = seed + salt * 10_000_019  # an alternative draw, far from every split
        from trace_rl.config.synthesize import SandboxConfig
        from trace_rl.envs.synthetic.sandbox import run_generator

        code = self.env.generator.read_text()
        limits = SandboxConfig.model_validate(self.spec.generator.params.get("sandbox") or {})
        result = run_generator(
            code, [seed], target=self.spec.target, difficulty=self.spec.generator.difficulty, limits=limits
        )
        raw = result.tasks.get(seed)
        if raw is None:
            raise UserError(f"capability env '{self.spec.name}': generator failed for seed {seed}: {result.summary}")
        task = to_task(GeneratedTask.model_validate(raw), self.spec, seed, self.domain_name)
        self.pool[seed] = task
        return task


def _library_decisions(spec: EnvSpec, folder: Path, target: Domain) -> TaskGenerator:
    from trace_rl.envs.synthetic.library_decisions import LibraryDecisions

    return LibraryDecisions(spec, target)


def _tau2_variants(spec: EnvSpec, folder: Path, target: Domain) -> TaskGenerator:
    from trace_rl.envs.synthetic.leak_guard import LeakIndex
    from trace_rl.envs.synthetic.tau2_variants import Tau2Variants

    return Tau2Variants(spec, target, LeakIndex.load(folder))


def _toolsandbox_scenarios(spec: EnvSpec, folder: Path, target: Domain) -> TaskGenerator:
    from trace_rl.envs.synthetic.toolsandbox_scenarios import ToolSandboxScenarios

    return ToolSandboxScenarios(spec, target)


def _target_reseed(spec: EnvSpec, folder: Path, target: Domain) -> TaskGenerator:
    from trace_rl.envs.synthetic.target_reseed import TargetReseed

    return TargetReseed(spec, target)


GENERATORS: dict[str, Callable[[EnvSpec, Path, Domain], TaskGenerator]] = {
    "library_variants": lambda spec, folder, target: LibraryVariants(spec, target),
    "library_decisions": _library_decisions,
    "tau2_variants": _tau2_variants,
    "toolsandbox_scenarios": _toolsandbox_scenarios,
    "target_reseed": _target_reseed,
    "code": lambda spec, folder, target: CodeTasks(spec, folder, getattr(target, "name", spec.target.get("name", ""))),
}


def build_generator(spec: EnvSpec, folder: Path, target: Domain) -> TaskGenerator:
    factory = GENERATORS.get(spec.generator.kind)
    if factory is None:
        raise UserError(f"capability env '{spec.name}': unknown generator kind '{spec.generator.kind}'")
    return factory(spec, folder, target)


__all__ = [
    "GENERATORS",
    "CodeTasks",
    "LibraryVariants",
    "TaskGenerator",
    "add_library_distractors",
    "build_generator",
    "finish",
    "generated_task",
    "synthetic_task_id",
    "to_task",
]
