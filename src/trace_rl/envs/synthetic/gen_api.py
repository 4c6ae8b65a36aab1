"""`GeneratorAPI`: the one object author-written generator code may use (`generate(seed, api)`).

It exposes the target domain and nothing else: its tool schemas and policy, a starting world for a seed (library: a
fresh world from a seed range disjoint from the target's train and test splits; τ²: the domain DB without the users
and orders the test split refers to), a seeded random generator, and `replay(task)`, which runs a candidate task's
gold actions on a fresh environment and reports each result. It keeps the environment only, not the domain (no task
list); in the sandbox the τ² files it loads are a train-side copy (no task or split files, the test split's users,
orders and reservations removed from the database). It is built in the sandbox child before the seccomp filter is
installed, and can also be used in-process (tests, the prompt's examples).
"""

from __future__ import annotations

import contextlib
import copy
import json
import random
from typing import Any

from trace_rl.config import EnvConfig
from trace_rl.envs.base import Domain, ToolkitEnvironment
from trace_rl.envs.synthetic.generated import GeneratedTask
from trace_rl.envs.synthetic.generators import generated_task
from trace_rl.types import ToolCall

LIBRARY_WORLD_OFFSET = 5_000_000  # inside the library's fresh seed range, away from library_variants' seeds

API_DOC = """\
api.domain -> str                 the target domain ("library", "tau2:retail", ...)
api.difficulty -> int             difficulty knob 0 (easiest) .. 4 (hardest); make tasks harder as it grows
api.rng(seed) -> random.Random    a seeded random generator (use it for every random choice)
api.tool_schemas() -> list[dict]  the target's tools (OpenAI function schemas)
api.policy() -> str               the target's policy text
api.start(seed) -> {"world": {...}, "db": {...}}
                                  the starting state for this seed: put "world" unchanged into your task's
                                  "world" field; "db" is a plain-dict copy of the database you may read
api.replay(task: dict) -> {"ok": bool, "results": [{"name", "content", "error"}], "db_changed": bool}
                                  run the task's gold_actions on a fresh environment (world + data_patch) and
                                  return each tool result; use it to read values your task must state"""


class GeneratorAPI:
    """The target domain, as generator code sees it."""

    def __init__(self, target: dict[str, Any], *, difficulty: int = 1, exclude: dict[str, list[str]] | None = None):
        from trace_rl.envs.registry import load_domain

        self.config = EnvConfig.model_validate(target)
        self.domain: str = self.config.name
        self.difficulty = int(difficulty)
        domain: Domain = load_domain(self.config.name, self.config)  # not kept: the API holds no task list
        self._env = domain.make_env()
        if not isinstance(self._env, ToolkitEnvironment):
            raise TypeError(f"target '{self.domain}' has no toolkit environment")
        self._exclude = {k: set(v) for k, v in (exclude or {}).items()}
        self._db_cache: dict[str, Any] | None = None

    # -- reading the target ----------------------------------------------------------------------------------------
    def tool_schemas(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self._env.tool_schemas())

    def policy(self) -> str:
        return self._env.policy()

    def rng(self, seed: int) -> random.Random:
        return random.Random(f"trace-rl/generated/{self.domain}/{seed}")

    def start(self, seed: int) -> dict[str, Any]:
        if self.domain == "library":
            from trace_rl.envs.library.splits import fresh_train_seeds
            from trace_rl.envs.library.world import world

            world_seed = fresh_train_seeds(1, start=LIBRARY_WORLD_OFFSET + int(seed) % 1_000_000)[0]
            return {"world": {"world_seed": world_seed}, "db": world(world_seed).model_dump(mode="json")}
        if self._db_cache is None:
            db = self._env.tools.db.model_dump(mode="json") if self._env.tools.db is not None else {}
            for key in ("users", "orders", "reservations"):
                if isinstance(db.get(key), dict):
                    for gone in self._exclude.get(key, ()):
                        db[key].pop(gone, None)
            self._db_cache = db
        return {"world": {}, "db": json.loads(json.dumps(self._db_cache))}

    # -- checking a candidate --------------------------------------------------------------------------------------
    def replay(self, task: dict[str, Any]) -> dict[str, Any]:
        gen = GeneratedTask.model_validate(task)
        t = generated_task(gen, "candidate", self.domain)
        env = self._env.fresh()
        env.reset(t)
        before = env.state_hash()
        results = []
        for i, action in enumerate(gen.gold_actions):
            msg = env.execute(ToolCall(id=f"r{i}", name=action.name, arguments=action.arguments))
            results.append({"name": action.name, "content": msg.content, "error": msg.error})
        return {
            "ok": not any(r["error"] for r in results),
            "results": results,
            "db_changed": env.state_hash() != before,
        }

    def warm_up(self) -> None:
        """Touch every lazily loaded piece (files, caches) before the sandbox's guards are armed."""
        self.tool_schemas()
        self.policy()
        start = self.start(0)
        schemas = self._env.tool_schemas()
        name = schemas[0]["function"]["name"] if schemas else "noop"
        with contextlib.suppress(Exception):
            self.replay({"request": "warm up", "world": start["world"], "gold_actions": [{"name": name}]})


__all__ = ["API_DOC", "LIBRARY_WORLD_OFFSET", "GeneratorAPI"]
