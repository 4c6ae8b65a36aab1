"""Shared fixtures for the synthesize tests: a library run directory, an oracle policy, an author's generator."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trace_rl.artifacts.store import RunDir, atomic_write_json
from trace_rl.envs.synthetic import load_capability_env
from trace_rl.models.base import ModelResponse, SamplingParams
from trace_rl.types import Capability, Message, Task, ToolCall

LIBRARY_CAPABILITIES = {
    "precondition_verification": (
        "precondition_refusal",
        "Checking the member's record and the copy records against the policy before acting, and refusing with the "
        "blocking value when a rule forbids the request.",
    ),
    "tool_calling_precision": (
        "authenticated_write",
        "Calling the right tool with exact arguments copied from the records and the member's words.",
    ),
    "multi_step_completion": (
        "multi_step",
        "Completing every one of several requested changes in one conversation before ending it.",
    ),
    "structured_data_reasoning": (
        "copy_selection",
        "Comparing copy records field by field to pick the one copy that satisfies every stated condition.",
    ),
}


def make_library_run(root: Path, names: list[str], *, n_train: int = 40, n_test: int = 20) -> RunDir:
    """A run after rollout + diagnose on the library: manifest, failed train trajectories, capabilities.json."""
    from trace_rl.config import EnvConfig
    from trace_rl.envs.registry import load_domain
    from trace_rl.types import Trajectory

    run = RunDir(root)
    env_cfg = EnvConfig(name="library", options={"n_train": n_train, "n_test": n_test})
    run.ensure(config={"env": env_cfg.model_dump(mode="json")})
    domain = load_domain("library", env_cfg)
    train = domain.tasks("train")
    trajectories = []
    selected = []
    for name in names:
        family, definition = LIBRARY_CAPABILITIES[name]
        tasks = [t for t in train if t.metadata["family"] == family][:3]
        ids = [f"library/train/{t.id}/0" for t in tasks]
        for t, tid in zip(tasks, ids, strict=True):
            trajectories.append(
                Trajectory(
                    id=tid,
                    env="library",
                    split="train",
                    task_id=t.id,
                    trial=0,
                    seed=0,
                    reward=0.0,
                    success=False,
                    messages=[Message(role="user", content="hi")],
                )
            )
        # a test-split id in the evidence must be dropped, never used
        ids.append("library/test/lookup_answer-1000000/0")
        stats = {"example_failed_trajectory_ids": ids, "lacking_failed_runs": dict.fromkeys(ids, 8)}
        selected.append(
            Capability(
                name=name, definition=definition, example_task_ids=[t.id for t in tasks], stats=stats, status="selected"
            )
        )
    run.jsonl("rollout/trajectories.jsonl").append(trajectories)
    atomic_write_json(
        run.root / "diagnose" / "capabilities.json",
        {
            "selected": [c.model_dump(mode="json") for c in selected],
            "candidates": [],
            "splits": ["train"],
            "params": {"rho": 0.1, "delta": 0.2, "n_runs": 10, "k": 8},
            "n_trajectories": {},
            "analyst": "scripted",
            "created_at": time.time(),
        },
    )
    return run


def _unit(text: str) -> float:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


_WRITES = {"check_out", "return_copy", "renew_loan", "place_hold", "cancel_hold", "pay_fine"}


def decision_move(task: Task, messages: list[Message], solve: bool) -> Message:
    from trace_rl.envs.synthetic.library_decisions import Case, moves

    case = Case.of(task)
    episode = [m for m in messages if m.role != "system" and not m.example]
    if any(m.role == "assistant" for m in episode[case.history :]):
        return Message(role="assistant", content="Thank you, goodbye.")
    right, wrong = moves(case)
    return (right if solve else wrong)[0]


class OraclePolicy:
    """A scripted policy: on seed s, sample k it plays the gold solution with probability `p(s)` (decided by a hash,
    so deterministic); otherwise it does the gold reads, skips every write and apologises.

    It reads the episode's seed from `sampling.seed` (= (seed * 1000 + k) * 1000 + step, as calibration sets it) and
    reloads the capability environment from `folder` (its spec may change between calibration attempts)."""

    def __init__(self, folder: Callable[[], Path], p: float | Callable[[int], float], target: Any = None) -> None:
        self.name = "oracle"
        self.folder = folder
        self.p = p if callable(p) else (lambda _s, _p=p: _p)
        self.target = target
        self.calls = 0
        self._envs: dict[tuple[str, int], Any] = {}

    def env(self) -> Any:
        folder = self.folder()
        key = (str(folder), (folder / "spec.json").stat().st_mtime_ns)
        if key not in self._envs:
            self._envs[key] = load_capability_env(folder, target=self.target)
        return self._envs[key]

    async def chat(
        self, messages: list[Message], tools: Any = None, *, adapter: Any = None, sampling: SamplingParams | None = None
    ) -> ModelResponse:
        self.calls += 1
        code = (sampling.seed if sampling and sampling.seed is not None else 0) // 1000
        seed, k = divmod(code, 1000)
        env = self.env()
        task = env.make_task(seed)
        gold = task.evaluation_criteria.actions or []
        solve = _unit(f"{seed}/{k}") < self.p(seed)
        if "decision" in task.metadata:  # a decision task: the right move or one without the capability, once
            return ModelResponse(message=decision_move(task, messages, solve))
        # tool results of this episode (the worked-example turns before the conversation are not the episode's)
        done = sum(m.role == "tool" and not (m.tool_call_id or "").startswith("example_") for m in messages)
        writes = {a.name for a in gold if a.name in _WRITES}
        plan = gold if solve else [a for a in gold if a.name not in writes]
        if done < len(plan):
            a = plan[done]
            call = ToolCall(id=f"o{done}", name=a.name, arguments=dict(a.arguments))
            return ModelResponse(message=Message(role="assistant", tool_calls=[call]))
        info = task.evaluation_criteria.communicate_info or []
        text = ("Done: " + " ".join(f"{v}." for v in info)) if solve else "Sorry, I could not do that."
        return ModelResponse(message=Message(role="assistant", content=text))

    async def aclose(self) -> None:
        return None


LIBRARY_GENERATOR = '''
import json


def generate(seed, api):
    """Borrow a book: allowed when the card is active and fines are under 10.00, else refused quoting the fines."""
    rng = api.rng(seed)
    start = api.start(seed)
    db = start["db"]
    member_id = rng.choice(sorted(db["members"]))
    member = db["members"][member_id]
    lendable = {}
    for copy in db["copies"].values():
        if copy["status"] == "available" and not copy["reference_only"]:
            lendable.setdefault(copy["book_id"], []).append(copy)
    book_id = rng.choice(sorted(lendable))
    book = db["books"][book_id]
    copy, *others = sorted(lendable[book_id], key=lambda c: c["copy_id"])
    blocked = rng.random() < 0.5
    fines = rng.choice([10.0, 11.25, 12.5, 14.75]) if blocked else 0.0
    patch = {
        "members": {member_id: {"card_status": "active", "fines": fines}},
        # one lendable copy only, so the right copy is unambiguous
        "copies": {c["copy_id"]: {"reference_only": True} for c in others},
    }
    reads = [
        {"name": "find_member_by_email", "arguments": {"email": member["email"]}},
        {"name": "get_member_details", "arguments": {"member_id": member_id}},
        {"name": "search_catalog", "arguments": {"query": book["title"]}},
        {"name": "get_book_copies", "arguments": {"book_id": book_id}},
    ]
    task = {
        "request": f"Hi! I'd like to borrow \\"{book['title']}\\". My email is {member['email']}.",
        "reason_for_call": f"You want to borrow {book['title']}.",
        "known_info": f"Your email is {member['email']}.",
        "facts": {"email": member["email"]},
        "world": start["world"],
        "data_patch": patch,
        "gold_actions": reads,
        "communicate_info": [f"{fines:.2f}"],
        "capability_steps": [1, 3],
        "difficulty": api.difficulty,
    }
    if not blocked:
        task["gold_actions"] = reads + [
            {"name": "check_out", "arguments": {"member_id": member_id, "copy_id": copy["copy_id"]}}
        ]
        result = api.replay(task)
        task["communicate_info"] = [json.loads(result["results"][-1]["content"])["due"]]
    return task
'''

BROKEN_GENERATOR = """
def generate(seed, api):
    start = api.start(seed)
    member_id = sorted(start["db"]["members"])[0]
    return {"request": "Hi", "world": start["world"],
            "gold_actions": [{"name": "lend_book", "arguments": {"member_id": member_id}}]}
"""


def fenced(code: str) -> str:
    return f"Here is the module.\n\n```python\n{code.strip()}\n```\n"


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())
