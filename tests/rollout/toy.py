"""A toy counter domain and a policy client whose outcome per (task, trial) the test chooses.

Task `<split>-<i>` asks to add `i % 3 + 1` to counter `a`; the policy calls `increment` with the right amount ("ok"),
a wrong one ("fail"), raises `InfraError` ("infra") or a bug ("crash"). It can sleep to simulate a server, and it
records how many calls were in flight at once.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

from trace_rl.engine.plan import trial_seeds
from trace_rl.envs.base import ToolkitEnvironment
from trace_rl.envs.registry import register_domain
from trace_rl.envs.toolkit import DB, ToolKit, ToolType, tool
from trace_rl.envs.users import ScriptedUser
from trace_rl.errors import InfraError
from trace_rl.models.base import ModelResponse, SamplingParams
from trace_rl.types import Action, EvaluationCriteria, Message, SampledTokens, Task, ToolCall


class CounterDB(DB):
    counts: dict[str, int]


class CounterTools(ToolKit):
    db: CounterDB

    @tool(ToolType.WRITE)
    def increment(self, name: str, by: int = 1) -> int:
        """Increment a counter.

        Args:
            name: The counter's name.
            by: Amount to add.
        """
        self.db.counts[name] = self.db.counts.get(name, 0) + by
        return self.db.counts[name]


def amount(task_id: str) -> int:
    return int(task_id.rsplit("-", 1)[1]) % 3 + 1


class ToyDomain:
    name = "toy"

    def __init__(self, n_tasks: int = 6, *, scripted: bool = True) -> None:
        self.n_tasks = n_tasks
        self.scripted = scripted

    def splits(self) -> list[str]:
        return ["train", "test"]

    def tasks(self, split: str) -> list[Task]:
        out = []
        for i in range(self.n_tasks):
            tid = f"{split}-{i}"
            n = amount(tid)
            out.append(
                Task(
                    id=tid,
                    user_scenario=f"add {n} to a",
                    evaluation_criteria=EvaluationCriteria(
                        actions=[Action(action_id="0", name="increment", arguments={"name": "a", "by": n})],
                        communicate_info=[str(1 + n)],
                    ),
                )
            )
        return out

    def make_env(self) -> ToolkitEnvironment:
        return ToolkitEnvironment(toolkit_cls=CounterTools, db=CounterDB(counts={"a": 1}), policy="Count well.")

    def system_prompt(self) -> str:
        return "You are a counter clerk. Count well."

    def scripted_user(self, task: Task) -> ScriptedUser | None:
        if not self.scripted:
            return None
        return ScriptedUser([f"[{task.id}] please add {amount(task.id)} to a", "thanks ###STOP###"])

    def guidelines(self) -> str:
        return "You are a customer. Say ###STOP### when done."


def register_toy(n_tasks: int = 6, **kw: Any) -> ToyDomain:
    domain = ToyDomain(n_tasks, **kw)
    register_domain("toy", lambda rest, cfg: domain)
    return domain


Outcome = Callable[[str, int], str]


class ToyPolicy:
    """Plays the toy domain; `outcome(task_id, trial)` is "ok", "fail", "infra" or "crash"."""

    def __init__(
        self, outcome: Outcome | None = None, *, delay_s: float = 0.0, seed: int = 300, trials: int = 8
    ) -> None:
        self.name = "toy-policy"
        self.outcome = outcome or (lambda task_id, trial: "ok")
        self.delay_s = delay_s
        self.trial_of_seed = {s: t for t, s in enumerate(trial_seeds(seed, trials))}
        self.in_flight = 0
        self.max_in_flight = 0
        self.calls: list[tuple[str, int, str | None]] = []

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        *,
        adapter: str | None = None,
        sampling: SamplingParams | None = None,
    ) -> ModelResponse:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
        finally:
            self.in_flight -= 1
        first = next(m.text for m in messages if m.role == "user")
        task_id = re.match(r"\[(\S+)\]", first).group(1)
        seed = (sampling.seed or 0) // 1000 if sampling else 0
        trial = self.trial_of_seed.get(seed, -1)
        self.calls.append((task_id, trial, adapter))
        what = self.outcome(task_id, trial)
        if what == "infra":
            raise InfraError("connection", "connection refused")
        if what == "crash":
            raise RuntimeError("bug in a tool")
        tokens = SampledTokens(prompt_ids=[1, 2, 3], completion_ids=[4, 5], logprobs=[-0.1, -0.2])
        if messages[-1].role == "tool":
            message = Message(role="assistant", content=f"Done, a is now {messages[-1].text}.", sampled=tokens)
        else:
            n = amount(task_id) + (0 if what == "ok" else 1)
            call = ToolCall(id=f"c{len(messages)}", name="increment", arguments={"name": "a", "by": n})
            message = Message(role="assistant", tool_calls=[call], sampled=tokens)
        return ModelResponse(message=message, prompt_tokens=3, completion_tokens=2)

    async def aclose(self) -> None:
        return None
