"""Scoring a capability environment's episode: capability-exercised checks, the shaped reward, the binary success.

Every component is computed from (task, trajectory) alone: the gold side by replaying the task's gold actions on a
fresh target environment (results kept, so a read is credited when the agent obtained the same record, whatever the
argument spelling), the agent side from the trajectory's tool calls and results. The final DB is taken from the
trajectory's `reward_info` when the target evaluator scored it, else by replaying the agent's successful WRITE calls
(τ²-bench's replay). Shaped reward (TRACE App. B): `alpha * prod(product) + (1 - alpha) * weighted mean`; success is
τ²'s DB × COMMUNICATE == 1 on a stop-terminated episode, kept next to the shaped reward (docs/method-notes.md §7);
for a decision task (`library_decisions`) success is its one move being right (`RewardSpec.success = "decision"`).
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trace_rl.envs.evaluator import communicate_check
from trace_rl.envs.toolkit import ToolType
from trace_rl.types import SCORED_TERMINATIONS, Message, Task, TerminationReason, ToolCall, Trajectory

if TYPE_CHECKING:
    from trace_rl.artifacts.environments import RewardSpec
    from trace_rl.envs.base import ToolkitEnvironment

_ID_LIKE = re.compile(r"^(?=.*\d)(?=.*[A-Za-z#@])[\w#@.\-]{3,}$")


def norm(value: Any) -> Any:
    """Comparison form of an argument value: trimmed lowercase strings without quotes or '$', numbers as floats,
    lists compared as sorted multisets."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return round(float(value), 6)
    if isinstance(value, str):
        text = value.strip().strip("\"'").strip().lower()
        try:
            return round(float(text.lstrip("$")), 6)
        except ValueError:
            return text
    if isinstance(value, (list, tuple)):
        return sorted((norm(v) for v in value), key=repr)
    if isinstance(value, dict):
        return {k: norm(v) for k, v in sorted(value.items())}
    return value


def args_equal(gold: dict[str, Any], got: dict[str, Any]) -> bool:
    return all(norm(v) == norm(got.get(k)) for k, v in gold.items()) and set(got) <= set(gold) | _optional(got)


def _optional(got: dict[str, Any]) -> set[str]:
    return {k for k, v in got.items() if v in (None, "", [])}


def args_overlap(gold: dict[str, Any], got: dict[str, Any]) -> float:
    if not gold:
        return 1.0
    return sum(norm(v) == norm(got.get(k)) for k, v in gold.items()) / len(gold)


@dataclass
class Step:
    """A tool call and its result, from either the gold replay or the agent's trajectory."""

    index: int
    name: str
    arguments: dict[str, Any]
    kind: ToolType | None
    result: str
    error: bool


@dataclass
class GoldReplay:
    steps: list[Step]
    db_hash: str
    errors: list[str] = field(default_factory=list)

    @property
    def reads(self) -> list[Step]:
        return [s for s in self.steps if s.kind != ToolType.WRITE]

    @property
    def writes(self) -> list[Step]:
        return [s for s in self.steps if s.kind == ToolType.WRITE]


def _task_key(task: Task) -> str:
    return hashlib.sha1(task.model_dump_json(exclude={"metadata"}).encode()).hexdigest()


def replay_gold(env: ToolkitEnvironment, task: Task) -> GoldReplay:
    """Reset a fresh environment to the task and run every gold action, keeping results and the final DB hash."""
    gold = env.fresh()
    gold.reset(task)
    steps: list[Step] = []
    errors: list[str] = []
    actions = (task.evaluation_criteria.actions if task.evaluation_criteria else None) or []
    for i, action in enumerate(actions):
        call = ToolCall(id=f"gold_{i}", name=action.name, arguments=action.arguments, requestor=action.requestor)
        result = gold.execute(call)
        if result.error:
            errors.append(f"{action.name}: {result.content}")
        kit = gold.toolkit_for(action.requestor)
        kind = kit.tool_type(action.name) if kit is not None else None
        steps.append(Step(i, action.name, dict(action.arguments), kind, result.content or "", result.error))
    return GoldReplay(steps=steps, db_hash=gold.state_hash(), errors=errors)


def agent_steps(env: ToolkitEnvironment, messages: list[Message]) -> list[Step]:
    """The agent's tool calls in order, each with its result (missing result: an error)."""
    results = {m.tool_call_id: m for m in messages if m.role == "tool"}
    steps: list[Step] = []
    for m in messages:
        if m.role != "assistant":
            continue
        for call in m.tool_calls or []:
            res = results.get(call.id)
            steps.append(
                Step(
                    len(steps),
                    call.name,
                    dict(call.arguments),
                    env.tools.tool_type(call.name),
                    (res.content or "") if res else "",
                    res is None or res.error or call.parse_error is not None,
                )
            )
    return steps


def read_matches(gold: Step, got: Step) -> bool:
    """A read is done when the agent made the same call, or got the same (non-error) result from a read tool."""
    if got.error or got.kind == ToolType.WRITE:
        return False
    if got.name == gold.name and args_equal(gold.arguments, got.arguments):
        return True
    return not gold.error and bool(gold.result) and got.result.strip() == gold.result.strip()


def write_matches(gold: Step, got: Step) -> bool:
    return not got.error and got.name == gold.name and args_equal(gold.arguments, got.arguments)


def _match_all(gold: list[Step], got: list[Step], match: Any) -> list[int | None]:
    """Greedy one-to-one matching in trajectory order: gold step -> index of the agent step, or None."""
    used: set[int] = set()
    out: list[int | None] = []
    for g in gold:
        hit = next((s.index for s in got if s.index not in used and match(g, s)), None)
        if hit is not None:
            used.add(hit)
        out.append(hit)
    return out


# -- the checks ------------------------------------------------------------------------------------------------------
def precondition_reads(gold: GoldReplay, steps: list[int] | None = None) -> list[Step]:
    """The gold reads that come before the first gold write (all reads when nothing is written), restricted to the
    task's `capability_steps` when it names any of them; reads that failed on purpose are not required."""
    first_write = next((s.index for s in gold.writes), None)
    reads = [
        s
        for s in gold.steps
        if s.kind == ToolType.READ and not s.error and (first_write is None or s.index < first_write)
    ]
    if steps:
        reads = [s for s in reads if s.index in steps] or reads
    return reads


def check_verify_before_act(gold: GoldReplay, got: list[Step], steps: list[int] | None) -> float:
    reads = precondition_reads(gold, steps)
    if not reads:
        return 1.0
    first_write = next((s.index for s in got if s.kind == ToolType.WRITE and not s.error), None)
    before = [s for s in got if first_write is None or s.index < first_write]
    return sum(i is not None for i in _match_all(reads, before, read_matches)) / len(reads)


def check_exact_arguments(gold: GoldReplay, got: list[Step], steps: list[int] | None) -> float:
    targets = gold.writes or [s for s in gold.reads if s.kind == ToolType.READ]
    if steps:
        targets = [s for s in targets if s.index in steps] or targets
    if not targets:
        return 1.0
    scores = []
    for g in targets:
        same = [s for s in got if s.name == g.name]
        if g.kind != ToolType.WRITE and any(read_matches(g, s) for s in got):
            scores.append(1.0)
            continue
        scores.append(
            max((args_overlap(g.arguments, s.arguments) * (0.5 if s.error else 1.0) for s in same), default=0)
        )
    return sum(scores) / len(scores)


def _id_values(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value.strip()] if _ID_LIKE.match(value.strip()) else []
    if isinstance(value, (list, tuple)):
        return [v for item in value for v in _id_values(item)]
    if isinstance(value, dict):
        return [v for item in value.values() for v in _id_values(item)]
    return []


def check_grounded_arguments(messages: list[Message]) -> float:
    """Share of id-like argument values (ids, emails, codes) the agent had seen before using them."""
    seen = ""
    total = grounded = 0
    for m in messages:
        if m.role == "assistant":
            for call in m.tool_calls or []:
                for value in _id_values(call.arguments):
                    total += 1
                    grounded += value.lower() in seen
        elif m.role in ("tool", "user") and m.content:
            seen += "\n" + m.content.lower()
    return 1.0 if total == 0 else grounded / total


def check_write_coverage(gold: GoldReplay, got: list[Step]) -> float:
    writes = gold.writes
    if not writes:
        return 0.0 if any(s.kind == ToolType.WRITE and not s.error for s in got) else 1.0
    return sum(i is not None for i in _match_all(writes, got, write_matches)) / len(writes)


def progress(gold: GoldReplay, got: list[Step]) -> float:
    if not gold.steps:
        return 1.0
    reads = _match_all([s for s in gold.steps if s.kind != ToolType.WRITE], got, read_matches)
    writes = _match_all(gold.writes, got, write_matches)
    return (sum(i is not None for i in reads) + sum(i is not None for i in writes)) / len(gold.steps)


def communicate_fraction(task: Task, messages: list[Message]) -> float:
    _, checks = communicate_check(task, messages)
    return 1.0 if not checks else sum(c["met"] for c in checks) / len(checks)


def agent_db_hash(env: ToolkitEnvironment, task: Task, messages: list[Message]) -> str:
    """τ² replay: a fresh environment, the task's initial state, then the agent's successful WRITE calls in order."""
    live = env.fresh()
    live.reset(task)
    results = {m.tool_call_id: m for m in messages if m.role == "tool"}
    for m in messages:
        if m.role != "assistant":
            continue
        for call in m.tool_calls or []:
            res = results.get(call.id)
            if res is None or res.error or call.parse_error is not None:
                continue
            kit = live.toolkit_for(call.requestor)
            if kit is not None and kit.mutates_state(call.name):
                live.execute(call)
    return live.state_hash()


@dataclass
class Score:
    reward: float
    success: bool
    components: dict[str, float]
    checks: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return {"reward": self.reward, "success": self.success, "components": self.components, "checks": self.checks}


class RewardModel:
    """Scores trajectories of one capability environment; caches the gold replay per task."""

    def __init__(self, spec: RewardSpec, env_factory: Any, *, cache_size: int = 256) -> None:
        self.spec = spec
        self.env_factory = env_factory
        self._env: ToolkitEnvironment | None = None
        self._gold: OrderedDict[str, GoldReplay] = OrderedDict()
        self._cache_size = cache_size

    @property
    def env(self) -> ToolkitEnvironment:
        if self._env is None:
            self._env = self.env_factory()
        return self._env

    def gold(self, task: Task) -> GoldReplay:
        key = _task_key(task)
        if key not in self._gold:
            self._gold[key] = replay_gold(self.env, task)
            while len(self._gold) > self._cache_size:
                self._gold.popitem(last=False)
        return self._gold[key]

    def checks(self, task: Task, messages: list[Message], gold: GoldReplay | None = None) -> dict[str, float]:
        gold = gold or self.gold(task)
        got = agent_steps(self.env, messages)
        steps = task.metadata.get("capability_steps") or None
        out: dict[str, float] = {}
        for check in self.spec.checks:
            if check.kind == "verify_before_act":
                out[check.kind] = check_verify_before_act(gold, got, steps)
            elif check.kind == "exact_arguments":
                out[check.kind] = check_exact_arguments(gold, got, steps)
            elif check.kind == "grounded_arguments":
                out[check.kind] = check_grounded_arguments(messages)
            elif check.kind == "write_coverage":
                out[check.kind] = check_write_coverage(gold, got)
            elif check.kind == "communicate":
                out[check.kind] = communicate_fraction(task, messages)
            elif check.kind == "decision":
                from trace_rl.envs.synthetic.library_decisions import judge

                out[check.kind] = judge(task, messages)
        return out

    def score_messages(
        self,
        task: Task,
        messages: list[Message],
        termination: TerminationReason | None = TerminationReason.USER_STOP,
        db: float | None = None,
    ) -> Score:
        gold = self.gold(task)
        got = agent_steps(self.env, messages)
        checks = self.checks(task, messages, gold)
        total_w = sum(c.weight for c in self.spec.checks)
        capability = sum(checks[c.kind] * c.weight for c in self.spec.checks) / total_w if total_w else 1.0
        if db is None:
            db = float(agent_db_hash(self.env, task, messages) == gold.db_hash)
        components = {
            "capability": capability,
            "db": db,
            "communicate": communicate_fraction(task, messages),
            "progress": progress(gold, got),
        }
        prod = 1.0
        for name in self.spec.product:
            prod *= components[name]
        weights = {k: w for k, w in self.spec.weights.items() if w > 0}
        wsum = sum(weights.values())
        mean = sum(components[k] * w for k, w in weights.items()) / wsum if wsum else prod
        shaped = self.spec.alpha * prod + (1 - self.spec.alpha) * mean
        scored = termination in SCORED_TERMINATIONS
        if not scored:
            shaped *= self.spec.unscored_scale
        if self.spec.success == "decision":
            success = checks.get("decision") == 1.0
        else:
            success = scored and db == 1.0 and components["communicate"] == 1.0
        return Score(round(shaped, 6), success, components, checks)

    def score(self, task: Task, trajectory: Trajectory) -> Score:
        db = None
        info = trajectory.reward_info
        if info is not None and "DB" in info.breakdown:
            db = float(info.breakdown["DB"])
        return self.score_messages(task, trajectory.messages, trajectory.termination, db)


__all__ = [
    "GoldReplay",
    "RewardModel",
    "Score",
    "Step",
    "agent_db_hash",
    "agent_steps",
    "args_equal",
    "check_grounded_arguments",
    "norm",
    "precondition_reads",
    "replay_gold",
]
