"""A toy target for the evaluate tests, a run directory over it, and a policy whose outcome per episode the test picks.

Domain `evaltoy`: task `<split>-<i>` asks (first user message "[<id>] please add N to a", N = i % 3 + 1) to add N to
counter `a`. `AdapterPolicy(outcome)` plays it: `outcome(task_id, trial, adapter, system_prompt)` is "ok" (the right
call), "fail" (a wrong amount) or "infra" (InfraError). `make_run` writes a run as the earlier stages would: manifest,
capability adapters (fake PEFT folders with train_config.json, done.json and logged training trajectories) and
diagnose/capabilities.json. `FakeBackend` "trains" baseline adapters the same way, recording what it was asked.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.artifacts.builders import write_capabilities_file
from tests.rollout.toy import CounterDB, CounterTools, amount  # the same toy world as the rollout tests

from trace_rl.artifacts.environments import EnvSpec, GeneratorSpec, HintSpec, RewardSpec, write_env_spec
from trace_rl.artifacts.store import RunDir, atomic_write_json
from trace_rl.config import EnvConfig, ModelConfig, TraceConfig
from trace_rl.engine.plan import trial_seeds
from trace_rl.envs.base import ToolkitEnvironment
from trace_rl.envs.registry import register_domain
from trace_rl.envs.users import ScriptedUser
from trace_rl.errors import InfraError
from trace_rl.models.base import ModelResponse, SamplingParams
from trace_rl.types import Action, EvaluationCriteria, Message, Task, ToolCall

SEED = 300


class EvalToy:
    name = "evaltoy"

    def __init__(self, n_test: int = 6, n_train: int = 12, *, families: bool = False) -> None:
        self.sizes = {"train": n_train, "test": n_test}
        self.families = families  # task metadata family "add<N>"

    def splits(self) -> list[str]:
        return ["train", "test"]

    def tasks(self, split: str) -> list[Task]:
        out = []
        for i in range(self.sizes[split]):
            tid = f"{split}-{i}"
            n = amount(tid)
            criteria = EvaluationCriteria(
                actions=[Action(action_id="0", name="increment", arguments={"name": "a", "by": n})],
                communicate_info=[str(1 + n)],
            )
            metadata = {"family": f"add{n}"} if self.families else {}
            out.append(Task(id=tid, user_scenario=f"add {n} to a", evaluation_criteria=criteria, metadata=metadata))
        return out

    def make_env(self) -> ToolkitEnvironment:
        return ToolkitEnvironment(toolkit_cls=CounterTools, db=CounterDB(counts={"a": 1}), policy="Count well.")

    def system_prompt(self) -> str:
        return "You are a counter clerk."

    def scripted_user(self, task: Task) -> ScriptedUser:
        return ScriptedUser([f"[{task.id}] please add {amount(task.id)} to a", "thanks ###STOP###"])

    def guidelines(self) -> str:
        return "You are a customer."


def register(n_test: int = 6, n_train: int = 12, *, families: bool = False) -> EvalToy:
    domain = EvalToy(n_test, n_train, families=families)
    register_domain("evaltoy", lambda rest, cfg: domain)
    return domain


Outcome = Callable[[str, int, str | None, str], str]


class AdapterPolicy:
    """Plays evaltoy; records (task_id, trial, adapter) per call."""

    def __init__(self, outcome: Outcome, *, trials: int = 8) -> None:
        self.name = "policy"
        self.outcome = outcome
        self.trial_of_seed = {s: t for t, s in enumerate(trial_seeds(SEED, trials))}
        self.calls: list[tuple[str, int, str | None]] = []

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        *,
        adapter: str | None = None,
        sampling: SamplingParams | None = None,
    ) -> ModelResponse:
        first = next(m.text for m in messages if m.role == "user")
        task_id = re.match(r"\[(\S+)\]", first).group(1)
        seed = (sampling.seed or 0) // 1000 if sampling else 0
        trial = self.trial_of_seed.get(seed, -1)
        self.calls.append((task_id, trial, adapter))
        what = self.outcome(task_id, trial, adapter, messages[0].text)
        if what == "infra":
            raise InfraError("connection", "connection refused")
        if messages[-1].role == "tool":
            message = Message(role="assistant", content=f"Done, a is now {messages[-1].text}.")
        else:
            n = amount(task_id) + (0 if what == "ok" else 1)
            call = ToolCall(id=f"c{len(messages)}", name="increment", arguments={"name": "a", "by": n})
            message = Message(role="assistant", tool_calls=[call])
        return ModelResponse(message=message, prompt_tokens=3, completion_tokens=2)

    async def aclose(self) -> None:
        return None


def write_adapter(
    folder: Path, work: Path, name: str, *, steps: int = 3, k: int = 4, g: int = 2, logged: int | None = None
) -> None:
    """A fake finished adapter: PEFT-looking files, train_config.json, done.json and `logged` training trajectories
    (default steps·G·K) in `work/trajectories.jsonl`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4}))
    (folder / "adapter_model.safetensors").write_bytes(b"fake")
    cfg = {"model": "tiny", "num_generations": k, "groups_per_step": g, "max_steps": steps}
    atomic_write_json(folder / "train_config.json", {"config": cfg, "capability": name})
    atomic_write_json(folder / "done.json", {"capability": name, "finished_at": time.time(), "steps": steps})
    n = steps * g * k if logged is None else logged
    work.mkdir(parents=True, exist_ok=True)
    with (work / "trajectories.jsonl").open("w") as fh:
        for i in range(n):
            step = i // (g * k)
            within = i % (g * k)
            fh.write(json.dumps({"id": f"{name}/train/step{step}/call{step}/g{within // k}/{within % k}", "tok": [1]}))
            fh.write("\n")


DEFINITIONS = {
    "cap_a": "Adding exactly one to the counter the user names.",
    "cap_b": "Adding exactly two to the counter the user names.",
}


def make_run(
    root: Path,
    adapters: dict[str, int] | None = None,
    *,
    n_test: int = 6,
    n_train: int = 12,
    evidence: dict[str, list[str]] | None = None,
) -> RunDir:
    """A run over evaltoy with capability adapters `name -> logged training rollouts`; with `evidence` (capability ->
    train task ids) the tasks carry families and each capability gets an environment spec naming its evidence."""
    register(n_test, n_train, families=evidence is not None)
    run = RunDir(root)
    cfg = TraceConfig(env=EnvConfig(name="evaltoy"), models={"policy": ModelConfig(kind="scripted")})
    run.ensure(config=cfg.model_dump(mode="json"))
    for name, logged in (adapters or {}).items():
        write_adapter(run.root / "adapters" / name, run.root / "train" / name, name, logged=logged)
    selected = [{"name": n, "definition": DEFINITIONS.get(n, f"The {n} capability.")} for n in (adapters or {})]
    write_capabilities_file(run, selected)
    for name, task_ids in (evidence or {}).items():
        spec = EnvSpec(
            name=name,
            definition=DEFINITIONS.get(name, name),
            target={"name": "evaltoy"},
            tools=["increment"],
            generator=GeneratorSpec(kind="library_variants"),
            reward=RewardSpec(),
            hint=HintSpec(text="Count well."),
            intro="",
            evidence={"task_ids": task_ids},
        )
        write_env_spec(run.env(name), spec)
    return run


def trace_config(run: RunDir) -> TraceConfig:
    return TraceConfig.model_validate(run.manifest().config)


class FakeBackend:
    """A `TrainerBackend` that writes a finished fake adapter (and kept checkpoints) without training."""

    name = "fake"

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def train(self, env: Any, cfg: Any, *, adapter_dir: Path, work_dir: Path) -> Any:
        task = env.make_task(0)
        self.calls.append(
            {
                "env": env.name,
                "max_steps": cfg.max_steps,
                "kept_steps": cfg.kept_steps(),
                "eval": cfg.eval,
                "first_task": task.id,
                "adapter_dir": adapter_dir,
            }
        )
        write_adapter(
            adapter_dir, work_dir, env.name, steps=cfg.max_steps, k=cfg.num_generations, g=cfg.groups_per_step
        )
        keep = Path(work_dir) / "kept"  # where the TRL backend keeps them (TrainConfig.keep_fractions)
        for step in cfg.kept_steps():
            (keep / f"step-{step}").mkdir(parents=True, exist_ok=True)
            (keep / f"step-{step}" / "adapter_config.json").write_text("{}")
            (keep / f"step-{step}" / "adapter_model.safetensors").write_bytes(b"fake")
        return None
