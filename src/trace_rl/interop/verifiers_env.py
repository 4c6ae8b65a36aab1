"""A trace-rl environment as a verifiers (0.4.0, `verifiers.v1`) environment: the taskset, the env that plays an
episode, and an in-process chat harness, all over an `EpisodeSession`.

An exported package (`verifiers_export.py`) subclasses these in a few lines, points them at its `source.json` (a
`SourceRef`) and `episode.json` (the episode limits), and exports one of each via `__all__`, which is what verifiers'
loader (`vf.load_environment`, `vf-eval <package>`) looks for: the Taskset, its Env (else `SingleAgentEnv`) and its
default Harness (else `bash`).

- `TraceRLTaskset.load()`: one task per seed of the configured split (`--env.taskset.split train|test`, `num_tasks`
  caps them); the row carries the seed, trace-rl's task id, the tool schemas, and the prompt = the session's messages
  at reset (system prompt, worked examples, the opening user turn).
- `TraceRLEnv.run()`: the OpenEnv-taskset pattern of verifiers (the engine plays the user). It resets an
  `EpisodeSession` on the row's seed, opens the `agent` seat's interaction on the task (the model speaks first),
  hands each assistant message (text or tool calls) to `EpisodeSession.astep`, and sends the session's new messages
  (tool results, the simulated user's reply) back as the next turn, until the session is done. The outcome lands on
  `trace.info["trace_rl"]`; the task's `@vf.reward trace_rl_reward` returns trace-rl's shaped reward
  (`SessionState.reward`) and `@vf.metric success` its success label.
- `TraceRLHarness`: the package's default harness, a chat loop run in process (verifiers allows this as long as every
  model call goes through the rollout's interception endpoint): one model call per segment, with the row's tools
  declared on the request, so tool calls come back to the env unexecuted and trace-rl executes them.

Departures: tools are not MCP servers (trace-rl's environment executes them, inside the episode); with a stock harness
(`--env.agent.harness.id bash|null`) the model gets no tool declarations and its text goes to trace-rl's parser
(`<tool_call>` tags); an exchange that verifiers ends before trace-rl's episode is over (a verifiers turn limit, a
harness failure) scores 0 with termination `unfinished`. The agent seat runs in the local subprocess runtime (nothing
runs in it: trace-rl's environment is in process).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, Literal

import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.dialects import parse_message
from verifiers.v1.dialects.chat import message_to_wire

from trace_rl.engine.episode import EpisodeLimits
from trace_rl.engine.token_driver import EpisodeSource
from trace_rl.errors import UserError
from trace_rl.interop.session import EpisodeSession, SessionState
from trace_rl.interop.sources import SourceRef

SOURCE_FILE = "source.json"
EPISODE_FILE = "episode.json"
OUTCOME_KEY = "trace_rl"


@lru_cache(maxsize=16)
def package_source(root: str) -> tuple[SourceRef, EpisodeSource, dict[str, list[int]]]:
    """The package's source recipe, the source (loaded once per process) and its seeds by split."""
    folder = Path(root)
    path = folder / SOURCE_FILE
    if not path.is_file():
        raise UserError(f"{folder} is not an exported trace-rl environment (no {SOURCE_FILE})")
    ref = SourceRef.model_validate_json(path.read_text(encoding="utf-8"))
    return ref, ref.load(folder), ref.seeds(folder)


def package_limits(root: Path) -> EpisodeLimits:
    path = Path(root) / EPISODE_FILE
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    return EpisodeLimits(max_steps=int(data.get("max_steps", 50)), max_errors=int(data.get("max_errors", 10)))


def outcome(state: SessionState | None) -> dict[str, Any]:
    """What a finished (or unfinished) episode records on the verifiers trace."""
    if state is None or not state.done:
        return {"reward": 0.0, "success": False, "termination": "unfinished", "breakdown": {}}
    return {
        "reward": float(state.reward),
        "success": bool(state.success),
        "termination": state.termination,
        "breakdown": dict(state.breakdown),
        "task_id": state.task_id,
        "seed": state.seed,
    }


class TraceRLData(vf.TaskData):
    """One row: the seed that selects trace-rl's task, and what the agent is shown."""

    seed: int
    split: str = "train"
    task_id: str = ""
    tools: list[dict[str, Any]] = Field(default_factory=list)


class TraceRLTask(vf.Task[TraceRLData]):
    """Scoring reads the outcome `TraceRLEnv.run` recorded from trace-rl's own scorer."""

    @property
    def key(self) -> str:
        return f"{self.data.split}:{self.data.seed}"

    @vf.reward(weight=1.0)
    async def trace_rl_reward(self, trace: vf.Trace) -> float:
        return float(trace.info.get(OUTCOME_KEY, outcome(None))["reward"])

    @vf.metric
    async def success(self, trace: vf.Trace) -> float:
        return float(bool(trace.info.get(OUTCOME_KEY, outcome(None))["success"]))


class TraceRLTasksetConfig(vf.TasksetConfig):
    split: Literal["train", "test"] = "train"
    """Which of the source's seed ranges the tasks are."""
    num_tasks: int | None = None
    """At most this many tasks (the first seeds of the split)."""


class TraceRLTaskset(vf.Taskset[TraceRLTask, TraceRLTasksetConfig]):
    """The seeds of a trace-rl source as verifiers tasks; subclasses set `PACKAGE_ROOT` (the folder of source.json)."""

    PACKAGE_ROOT: ClassVar[Path | None] = None

    @property
    def root(self) -> Path:
        if self.PACKAGE_ROOT is None:
            raise UserError(f"{type(self).__name__} has no PACKAGE_ROOT (the folder holding {SOURCE_FILE})")
        return Path(self.PACKAGE_ROOT).resolve()

    @property
    def source(self) -> EpisodeSource:
        return package_source(str(self.root))[1]

    @property
    def limits(self) -> EpisodeLimits:
        return package_limits(self.root)

    def seeds(self) -> list[int]:
        split = self.config.split
        seeds = package_source(str(self.root))[2].get(split) or []
        if not seeds:
            raise UserError(f"this trace-rl environment has no '{split}' seeds")
        return seeds if self.config.num_tasks is None else seeds[: self.config.num_tasks]

    def load(self):
        ref = package_source(str(self.root))[0]
        for seed in self.seeds():
            state = EpisodeSession(self.source, limits=self.limits).reset(seed)
            system = [m for m in state.messages if m["role"] == "system"]
            rest = [m for m in state.messages if m["role"] != "system"]
            yield TraceRLTask(
                TraceRLData(
                    id=f"{ref.name}-{self.config.split}-{seed}",
                    name=state.task_id,
                    prompt=[parse_message(m) for m in rest],
                    system_prompt="\n\n".join(str(m.get("content") or "") for m in system) or None,
                    seed=seed,
                    split=self.config.split,
                    task_id=state.task_id,
                    tools=state.tools,
                ),
                self.config.task,
            )


class TraceRLEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())
    """The one seat: the policy playing trace-rl's agent (`--env.agent.*`)."""


def assistant_wire(segment: vf.Segment) -> dict[str, Any]:
    """The segment's last assistant message in OpenAI format (what `EpisodeSession.astep` takes)."""
    for message in reversed(segment.messages):
        if message.role == "assistant":
            return message_to_wire(message)
    return {"role": "assistant", "content": segment.last_reply}


class TraceRLEnv(vf.Env[TraceRLEnvConfig]):
    """One trace-rl episode per verifiers episode: trace-rl's environment and user answer every agent turn."""

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        taskset = self.taskset
        if not isinstance(taskset, TraceRLTaskset):
            raise TypeError(f"{type(self).__name__} plays a TraceRLTaskset, not {type(taskset).__name__}")
        session = EpisodeSession(taskset.source, limits=taskset.limits)
        state: SessionState | None = await session.areset(int(task.data.seed))
        async with agents.agent.interaction(task) as interaction:
            segment = await interaction.turn()
            while not segment.terminated:
                state = await session.astep(assistant_wire(segment))
                if state.done or not state.new_messages:
                    break
                segment = await interaction.turn([parse_message(m) for m in state.new_messages])
            interaction.trace.info[OUTCOME_KEY] = outcome(state)


class TraceRLHarnessConfig(vf.HarnessConfig):
    pass


class TraceRLHarness(vf.Harness[TraceRLHarnessConfig]):
    """An in-process chat harness: one model call per segment through the interception endpoint, the row's tools
    declared, tool calls left to the env (trace-rl executes them)."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data) -> vf.ProgramResult:  # type: ignore[override]
        from openai import AsyncOpenAI

        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages.extend(message_to_wire(m) for m in prompt or [])
        tools = list(getattr(data, "tools", None) or [])
        client = AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0)
        try:
            await client.chat.completions.create(
                model=ctx.model, messages=messages, **({"tools": tools} if tools else {})
            )
        except Exception as exc:  # the interception stashes a model failure; the exit code reports it
            return vf.ProgramResult(exit_code=1, stdout="", stderr=f"{type(exc).__name__}: {exc}")
        finally:
            await client.close()
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


__all__ = [
    "EPISODE_FILE",
    "OUTCOME_KEY",
    "SOURCE_FILE",
    "TraceRLData",
    "TraceRLEnv",
    "TraceRLEnvConfig",
    "TraceRLHarness",
    "TraceRLHarnessConfig",
    "TraceRLTask",
    "TraceRLTaskset",
    "TraceRLTasksetConfig",
    "outcome",
    "package_limits",
    "package_source",
]
