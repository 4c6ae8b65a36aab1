"""GRPO training cost on CPU: seconds per optimizer step and peak memory, trace-rl's loop vs TRL's own agent loop.

Two loops on the same environment, model, LoRA, K, G, token limits, temperature and GRPOConfig
(`trl_setup.grpo_args`):

- `ours`: TRL GRPOTrainer fed by trace-rl's `rollout_func` (token-in/token-out multi-turn episodes with the scripted
  user, env_mask, group-by-seed; `TRLBackend` with evaluation off);
- `trl_env`: TRL GRPOTrainer with `environment_factory` (TRL parses tool calls itself and loops tool calls, at most
  `max_turns` iterations). The environment class wraps the same toolkit; its reward is the DB check (TRL gives the
  environment no transcript). TRL parses tool calls only for chat templates it recognises, so this loop's tokenizer
  wears TRL's bundled Qwen2.5 template (ChatML with `<tool_call>` tags and the tool schemas in the system message —
  a longer prompt than ours on the library, whose system prompt already lists the tools).

Models: the tiny random model on a toy colour-picking environment (the tiny model's 2,048-position window cannot hold
the library prompt), and SmolLM2-135M on the library family `lookup_answer`. Each (model, loop) runs in its own
subprocess, so the peak RSS is that loop's alone; the first optimizer step (warm-up) is excluded from s/step.

    .venv/bin/python benchmarks/bench_train.py                              # both models, 1 + 3 steps each
    .venv/bin/python benchmarks/bench_train.py --models tiny --steps 5 --out bench_train.json
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

for _key, _value in (
    ("OMP_WAIT_POLICY", "PASSIVE"),
    ("HF_HUB_OFFLINE", "1"),
    ("TRANSFORMERS_OFFLINE", "1"),
    ("TRL_EXPERIMENTAL_SILENCE", "1"),
    ("TOKENIZERS_PARALLELISM", "false"),
):
    os.environ.setdefault(_key, _value)

SETTINGS = {
    "tiny": {
        "env": "toy",
        "k": 4,
        "g": 2,
        "max_turn_tokens": 32,
        "max_episode_tokens": 256,
        "max_turns": 2,
        "micro": 4,
    },
    "smollm2-135m": {
        "env": "library:lookup_answer",
        "k": 4,
        "g": 2,
        "max_turn_tokens": 32,
        "max_episode_tokens": 320,
        "max_turns": 2,
        "micro": 2,
    },
}


# -- environments ---------------------------------------------------------------------------------------------------


def toy_env() -> Any:
    """Pick a colour with a tool; red succeeds."""
    from trace_rl.envs.base import ToolkitEnvironment
    from trace_rl.envs.toolkit import DB, ToolKit, ToolType, tool
    from trace_rl.envs.users import ScriptedUser
    from trace_rl.training.envs import DomainTrainEnv
    from trace_rl.types import Action, EvaluationCriteria, RewardType, Task

    class ColorDB(DB):
        picked: str | None = None

    class ColorTools(ToolKit):
        @tool(ToolType.WRITE)
        def pick(self, color: str) -> str:
            """Pick a color.

            Args:
                color: The color to pick.
            """
            self.db.picked = color
            return f"picked {color}"

    class ColorDomain:
        name = "toy"

        def splits(self) -> list[str]:
            return ["train"]

        def tasks(self, split: str) -> list[Task]:
            return []

        def make_env(self) -> ToolkitEnvironment:
            return ToolkitEnvironment(toolkit_cls=ColorTools, db=ColorDB(), policy="Pick colors.")

        def system_prompt(self) -> str:
            return "You pick colors with the pick tool."

        def scripted_user(self, task: Task) -> ScriptedUser:
            return ScriptedUser([f"Request {task.metadata['seed']}: please pick a color.", "###STOP###"])

    def make_task(seed: int) -> Task:
        criteria = EvaluationCriteria(
            actions=[Action(action_id="0", name="pick", arguments={"color": "red"})], reward_basis=[RewardType.DB]
        )
        return Task(id=f"toy-{seed}", evaluation_criteria=criteria, metadata={"seed": seed})

    return DomainTrainEnv("toy", ColorDomain(), make_task)


def make_env(spec: str) -> Any:
    from trace_rl.training.selection import env_from_spec

    return toy_env() if spec == "toy" else env_from_spec(spec)


def trl_environment_class(train_env: Any) -> type:
    """A TRL `environment_factory` class over a TrainEnv: reset(seed) builds the episode's world; every toolkit tool
    becomes a public method with the same signature and docstring; get_reward() is the DB check."""
    from trace_rl.envs.evaluator import db_check
    from trace_rl.types import ToolCall

    probe = train_env.make_env(train_env.make_task(0))
    namespace: dict[str, Any] = {}

    def reset(self: Any, **row: Any) -> None:
        self.task = train_env.make_task(int(row["seed"]))
        self.env = train_env.make_env(self.task)
        self.env.reset(self.task)

    def get_reward(self: Any) -> float:
        return db_check(self.env, self.task)[0]

    namespace["reset"] = reset
    namespace["get_reward"] = get_reward
    for name, fn in type(probe.tools).tool_methods().items():

        def method(self: Any, /, _name: str = name, **kwargs: Any) -> str:
            return self.env.execute(ToolCall(id="c", name=_name, arguments=kwargs)).content or ""

        namespace[name] = functools.update_wrapper(_bind_name(name, method), fn)
    return type("TraceEnv", (), namespace)


def _bind_name(name: str, method: Any) -> Any:
    def call(self: Any, **kwargs: Any) -> str:
        return method(self, _name=name, **kwargs)

    return call


# -- one loop in one process ------------------------------------------------------------------------------------------


class StepTimer:
    """Wall time of every optimizer step (rollout included)."""

    def __init__(self) -> None:
        from transformers import TrainerCallback

        timer = self

        class Callback(TrainerCallback):
            def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                timer.started = time.perf_counter()

            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                timer.times.append(time.perf_counter() - timer.started)

        self.started = 0.0
        self.times: list[float] = []
        self.callback = Callback()


def worker(model: str, loop: str, steps: int, warmup: int) -> dict[str, Any]:
    import torch

    from trace_rl.config.train import TrainConfig
    from trace_rl.training.trl_backend import TRLBackend
    from trace_rl.training.trl_setup import build_dataset, grpo_args, limits_of, load_policy, lora_config

    s = SETTINGS[model]
    cfg = TrainConfig(
        model=model,
        device="cpu",
        max_steps=warmup + steps,
        num_generations=s["k"],
        groups_per_step=s["g"],
        max_turn_tokens=s["max_turn_tokens"],
        max_episode_tokens=s["max_episode_tokens"],
        max_turns=s["max_turns"],
        learning_rate=1e-4,
        eval=False,
        resample_attempts=0,
        filter_on="none",
        save_steps=1000,
        log_trajectories=False,
        lora_r=16,
        lora_alpha=16,
        micro_batch_size=s["micro"],
    )
    env = make_env(s["env"])
    timer = StepTimer()
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-train-{loop}-"))
    started = time.perf_counter()
    tokens: dict[str, float] = {}
    if loop == "ours":
        result = TRLBackend(callbacks=[timer.callback]).train(env, cfg, adapter_dir=tmp / "adapter", work_dir=tmp)
        lines = [json.loads(x) for x in (tmp / "adapter" / "metrics.jsonl").read_text().splitlines()]
        rows = [r for r in lines if isinstance(r["step"], int)]
        tokens["model_tokens_per_step"] = sum(r["tokens/model"] for r in rows) / max(1, len(rows))
        tokens["prompt_tokens_per_step"] = sum(r["tokens/prompt"] for r in rows) / max(1, len(rows))
        tokens["env_tokens_per_step"] = sum(r["tokens/env"] for r in rows) / max(1, len(rows))
        steps_done = result.steps
    else:
        from trl import GRPOTrainer

        from trace_rl.training.trl_setup import resolve_bf16

        bf16 = resolve_bf16(cfg, "cpu")
        policy, tokenizer, _ = load_policy(cfg, "cpu", bf16)
        # TRL parses tool calls only for chat templates it recognises: wear its bundled Qwen2.5 (ChatML + <tool_call>)
        import trl

        tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
        dataset, _, _ = build_dataset(env, cfg, limits_of(cfg))
        args = grpo_args(cfg, tmp / "checkpoints", device="cpu", bf16=bf16)
        args.max_completion_length = s["max_turn_tokens"] * s["max_turns"]
        args.max_tool_calling_iterations = s["max_turns"] - 1
        args.save_strategy = "no"
        trainer = GRPOTrainer(
            model=policy,
            reward_funcs=[],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=lora_config(cfg, policy),
            environment_factory=trl_environment_class(env),
            callbacks=[timer.callback],
        )
        trainer.train()
        steps_done = trainer.state.global_step
        history = trainer.state.log_history
        lengths = [h["completions/mean_length"] for h in history if "completions/mean_length" in h]
        calls = [h["tools/call_frequency"] for h in history if "tools/call_frequency" in h]
        tokens["model_tokens_per_step"] = (sum(lengths) / max(1, len(lengths))) * s["k"] * s["g"]
        seen = [h["num_tokens"] for h in history if "num_tokens" in h]
        if seen:  # TRL counts prompt + model tokens
            tokens["prompt_tokens_per_step"] = seen[-1] / len(seen) - tokens["model_tokens_per_step"]
        tokens["tool_call_frequency"] = sum(calls) / max(1, len(calls)) if calls else 0.0
    measured = timer.times[warmup:] or timer.times
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "model": model,
        "loop": loop,
        "env": s["env"],
        "settings": s,
        "steps": steps_done,
        "s_per_step": sum(measured) / max(1, len(measured)),
        "step_times": [round(t, 3) for t in timer.times],
        "peak_rss_gb": peak_kb / 1024 / 1024,
        "wall_s": time.perf_counter() - started,
        "torch_threads": torch.get_num_threads(),
        **tokens,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "smollm2-135m"], choices=sorted(SETTINGS))
    parser.add_argument("--loops", nargs="+", default=["ours", "trl_env"], choices=["ours", "trl_env"])
    parser.add_argument("--steps", type=int, default=3, help="Measured optimizer steps (after the warm-up).")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="Write the results as JSON here.")
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "LOOP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(worker(args.worker[0], args.worker[1], args.steps, args.warmup)), flush=True)
        return
    results = []
    for model in args.models:
        for loop in args.loops:
            cmd = [sys.executable, __file__, "--worker", model, loop, "--steps", str(args.steps),
                   "--warmup", str(args.warmup)]  # fmt: skip  # argv: each flag beside its value
            proc = subprocess.run(cmd, capture_output=True, text=True)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                tail = (proc.stderr or proc.stdout)[-1500:]
                results.append({"model": model, "loop": loop, "returncode": proc.returncode, "error": tail})
            else:
                results.append(json.loads(line[len("RESULT ") :]))
            print(json.dumps(results[-1]), flush=True)
    print("\nmodel           loop      s/step   peak RSS (GB)   model tokens/step   prompt tokens/step")
    by = {(r["model"], r["loop"]): r for r in results}
    for r in results:
        if "error" in r:
            print(f"{r['model']:<15} {r['loop']:<9} error")
            continue
        print(
            f"{r['model']:<15} {r['loop']:<9} {r['s_per_step']:7.2f}   {r['peak_rss_gb']:13.2f}   "
            f"{r.get('model_tokens_per_step', 0):17.0f}   {r.get('prompt_tokens_per_step', 0):18.0f}"
        )
    for model in args.models:
        ours, theirs = by.get((model, "ours")), by.get((model, "trl_env"))
        if ours and theirs and "error" not in ours and "error" not in theirs:
            print(f"{model}: ours / trl_env s/step = {ours['s_per_step'] / theirs['s_per_step']:.2f}")
    if args.out:
        meta = {"platform": platform.platform(), "cpus": os.cpu_count(), "results": results}
        args.out.write_text(json.dumps(meta, indent=2) + "\n")


if __name__ == "__main__":
    main()
