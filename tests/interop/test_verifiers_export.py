"""`trace-rl export env --format verifiers`: the package has verifiers' layout, verifiers' own loader
(`vf.resolve_env_config` + `vf.load_environment`, what `vf-eval <id>` does) builds its Env, Taskset and default Harness
from the id, and an episode rolled out by verifiers' own machinery (`Env.serving` + `Env.run_episode`: interception
server, EvalClient, trace graph, task scoring) against a scripted OpenAI-compatible endpoint on localhost earns exactly
the reward trace-rl's `EpisodeSession` gives the same actions on the same seed (a gold agent and a wrong one)."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verifiers")
import verifiers.v1 as vf

from trace_rl.cli.app import main
from trace_rl.engine.episode import EpisodeLimits
from trace_rl.interop.session import EpisodeSession, SessionState
from trace_rl.interop.sources import SourceRef, resolve_source
from trace_rl.types import Task

MAX_TURNS = 40


class ScriptedEndpoint:
    """A chat-completions endpoint on localhost answering with a script (its last item repeats); records requests."""

    def __init__(self) -> None:
        self.script: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append(body)
                reply = endpoint.script[min(len(endpoint.requests) - 1, len(endpoint.script) - 1)]
                finish = "tool_calls" if reply.get("tool_calls") else "stop"
                data = json.dumps(
                    {
                        "id": f"r{len(endpoint.requests)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body["model"],
                        "choices": [{"index": 0, "message": {"role": "assistant", **reply}, "finish_reason": finish}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def play(self, script: list[dict[str, Any]]) -> None:
        self.script, self.requests = list(script), []


@pytest.fixture
def endpoint() -> Iterator[ScriptedEndpoint]:
    server = ScriptedEndpoint()
    yield server
    server.server.shutdown()


def export(source: str, out: Path, *extra: str) -> None:
    assert main(["export", "env", source, "--format", "verifiers", "--out", str(out), *extra]) == 0


def tool_call(i: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def gold_script(task: Task) -> list[dict[str, Any]]:
    """The task's gold actions, one tool call a turn, then a reply saying the gold values."""
    criteria = task.evaluation_criteria
    assert criteria is not None and criteria.actions
    script = [
        {"content": None, "tool_calls": [tool_call(i, a.name, a.arguments)]} for i, a in enumerate(criteria.actions)
    ]
    return [*script, {"content": " ".join(criteria.communicate_info or []) or "Done: all set."}]


WRONG = [{"content": "Sorry, I cannot help with that."}]


def session_outcome(ref: SourceRef, seed: int, script: list[dict[str, Any]], base: Path | None = None) -> SessionState:
    """trace-rl's own reward for `script` on `seed` (the last script item repeats until the episode ends)."""
    session = EpisodeSession(ref.load(base), limits=EpisodeLimits())
    state = session.reset(seed)
    for turn in range(MAX_TURNS):
        if state.done:
            break
        state = session.step({"role": "assistant", **script[min(turn, len(script) - 1)]})
    assert state.done
    return state


def load_env(out: Path, pkg: str, monkeypatch: pytest.MonkeyPatch, **taskset: Any) -> vf.Env:
    """The exported package through verifiers' own loader, by its hub-style id (the folder on sys.path stands in for
    `uv pip install -e`)."""
    monkeypatch.syspath_prepend(str(out))
    config = vf.resolve_env_config({"taskset": {"id": pkg.replace("_", "-"), **taskset}})
    return vf.load_environment(config)


def rollout(env: vf.Env, endpoint: ScriptedEndpoint, seed: int, script: list[dict[str, Any]]) -> vf.Trace:
    (task,) = [t for t in env.taskset if t.data.seed == seed]
    endpoint.play(script)
    ctx = vf.ModelContext(model="scripted", client=vf.EvalClientConfig(base_url=endpoint.url, api_key_var="NO_KEY"))

    async def run() -> vf.Episode:
        async with env.serving():
            return await env.run_episode(task, ctx)

    episode = asyncio.run(run())
    assert episode.ok and not episode.errors, episode.errors
    (trace,) = episode.traces
    return trace


def test_library_family_exports_as_a_verifiers_package_scored_by_trace_rl(tmp_path, endpoint, monkeypatch):
    out = tmp_path / "pkgs" / "lookup"
    export("library:lookup_answer", out)
    pkg = "trace_rl_lookup_answer"
    for rel in ("pyproject.toml", "README.md", f"{pkg}/__init__.py", f"{pkg}/taskset.py", f"{pkg}/source.json"):
        assert (out / rel).is_file(), rel
    assert f'packages = ["{pkg}"]' in (out / "pyproject.toml").read_text()
    ref = SourceRef.model_validate_json((out / pkg / "source.json").read_text())
    assert ref == resolve_source("library:lookup_answer")

    env = load_env(out, pkg, monkeypatch, num_tasks=6)
    assert type(env).__name__ == "LookupAnswerEnv" and type(env.taskset).__name__ == "LookupAnswerTaskset"
    assert env.config.agent_harnesses()["agent"].id == "trace-rl-lookup-answer"  # the package's own harness
    seeds = ref.seeds()["train"]
    tasks = list(env.taskset)
    assert [t.data.seed for t in tasks] == seeds[:6]
    seed = seeds[3]
    task = ref.load().make_task(seed)
    reset = EpisodeSession(ref.load()).reset(seed)
    row = tasks[3].data
    assert row.task_id == task.id and row.tools == reset.tools
    assert [m.role for m in row.prompt] == [m["role"] for m in reset.messages if m["role"] != "system"]

    gold, wrong = (session_outcome(ref, seed, s) for s in (gold_script(task), WRONG))
    assert gold.reward != wrong.reward and gold.success and not wrong.success

    trace = rollout(env, endpoint, seed, gold_script(task))
    assert trace.reward == gold.reward and trace.rewards["trace_rl_reward"].score == gold.reward
    assert trace.metrics["success"] == 1.0 and trace.info["trace_rl"]["termination"] == gold.termination
    assert trace.num_turns == len(gold_script(task)) == len(endpoint.requests)
    tool_results = [m for m in endpoint.requests[-1]["messages"] if m["role"] == "tool"]
    assert tool_results and tool_results[-1]["tool_call_id"] == f"c{len(task.evaluation_criteria.actions) - 1}"

    trace = rollout(env, endpoint, seed, WRONG)
    assert trace.reward == wrong.reward and trace.metrics["success"] == 0.0
    assert trace.info["trace_rl"]["termination"] == wrong.termination


@pytest.fixture
def capability_env(tmp_path: Path) -> Path:
    """A synthesized capability environment folder (`envs/<capability>/`), built as the synthesize stage does."""
    from trace_rl.artifacts.environments import write_env_spec
    from trace_rl.artifacts.layout import EnvLayout
    from trace_rl.config import EnvConfig
    from trace_rl.config.synthesize import SynthesizeConfig
    from trace_rl.envs.registry import load_domain
    from trace_rl.synthesize.evidence import Evidence
    from trace_rl.synthesize.from_target import target_spec
    from trace_rl.types import Capability

    cfg = EnvConfig(name="library", options={"n_train": 20, "n_test": 10})
    domain = load_domain("library", cfg)
    kind = "tool_calling_precision"
    cap = Capability(name=kind, definition="Calling the right tool with exactly the right arguments.")
    tasks = [t for t in domain.tasks("train") if t.metadata["family"] == "authenticated_write"][:2]
    spec, why = target_spec(
        Evidence(cap, tasks=tasks), kind, cfg, domain, SynthesizeConfig(train_seeds=6, test_seeds=3)
    )
    assert spec is not None, why
    folder = tmp_path / "run" / "envs" / kind
    write_env_spec(EnvLayout(folder), spec)
    return folder


def test_a_capability_env_is_copied_into_a_self_contained_package(tmp_path, endpoint, monkeypatch, capability_env):
    original = resolve_source(str(capability_env))
    seeds = original.seeds()
    seed = seeds["test"][1]
    task = original.load().make_task(seed)
    gold, wrong = (session_outcome(original, seed, s) for s in (gold_script(task), WRONG))
    assert gold.reward != wrong.reward

    out = tmp_path / "pkgs" / "cap"
    export(str(capability_env), out, "--max-steps", "40")
    pkg = "trace_rl_tool_calling_precision"
    ref = SourceRef.model_validate_json((out / pkg / "source.json").read_text())
    assert ref.kind == "capability" and ref.folder == "env" and (out / pkg / "env" / "spec.json").is_file()
    assert json.loads((out / pkg / "episode.json").read_text()) == {"max_steps": 40, "max_errors": 10}
    shutil.rmtree(capability_env.parent.parent)  # the run is gone: the package must not need it

    env = load_env(out, pkg, monkeypatch, split="test")
    assert [t.data.seed for t in env.taskset] == seeds["test"]
    for script, expected in ((gold_script(task), gold), (WRONG, wrong)):
        trace = rollout(env, endpoint, seed, script)
        assert trace.reward == expected.reward and trace.metrics["success"] == float(expected.success)


def test_bad_exports_exit_2_with_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    assert main(["export", "env", "library:lookup_answer", "--format", "verifiers", "--out", str(out)]) == 2
    assert (out / "keep.txt").is_file()  # nothing replaced
    assert main(["export", "env", "library:no_such_family", "--format", "verifiers", "--out", str(tmp_path / "o")]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 2 and "not empty" in lines[0] and "no_such_family" in lines[1]
    assert not (tmp_path / "o").exists()
