"""`trace-rl export env --format openenv`: the package has OpenEnv's layout, OpenEnv's own server (create_app, served
through FastAPI's TestClient over the /ws session protocol) runs it, its generated client parses the replies, and an
episode played through it earns exactly the reward trace-rl's `EpisodeSession` gives the same actions on the same
seed (a gold agent and a wrong one, whose rewards differ)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("openenv")
from fastapi.testclient import TestClient

from trace_rl.cli.app import main
from trace_rl.engine.episode import EpisodeLimits
from trace_rl.errors import UserError
from trace_rl.interop.openenv_env import TraceRLAction, TraceRLEnvironment
from trace_rl.interop.session import EpisodeSession
from trace_rl.interop.sources import SourceRef, resolve_source
from trace_rl.types import Task

MAX_TURNS = 40


def export(source: str, out: Path, *extra: str) -> None:
    assert main(["export", "env", source, "--format", "openenv", "--out", str(out), *extra]) == 0


def load_package(out: Path) -> ModuleType:
    """The exported folder imported as a package under a name of its own (as an installed package would be)."""
    name = f"exported_{out.parent.name}_{out.name}".replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, out / "__init__.py", submodule_search_locations=[str(out)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def tool_call(i: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def gold_script(task: Task) -> list[dict[str, Any]]:
    """The task's gold actions, one tool call a turn, then a reply saying the gold values."""
    criteria = task.evaluation_criteria
    assert criteria is not None and criteria.actions
    script = [{"tool_calls": [tool_call(i, a.name, a.arguments)]} for i, a in enumerate(criteria.actions)]
    return [*script, {"content": " ".join(criteria.communicate_info or []) or "Done: all set."}]


WRONG = [{"content": "Sorry, I cannot help with that."}]


def session_outcome(ref: SourceRef, seed: int, script: list[dict[str, Any]], base: Path | None = None):
    """trace-rl's own reward for `script` on `seed` (the last script item repeats until the episode ends)."""
    session = EpisodeSession(ref.load(base), limits=EpisodeLimits())
    state = session.reset(seed)
    for turn in range(MAX_TURNS):
        if state.done:
            break
        state = session.step(script[min(turn, len(script) - 1)])
    assert state.done
    return state


def served_outcome(pkg: ModuleType, seed: int | None, script: list[dict[str, Any]]):
    """The same through the exported package: OpenEnv's server app over its /ws protocol, parsed by its client."""
    prefix = next(n.removesuffix("Env") for n in pkg.__all__ if n.endswith("Env"))
    action_cls, client = getattr(pkg, f"{prefix}Action"), getattr(pkg, f"{prefix}Env")(base_url="http://unused")
    app = importlib.import_module(f"{pkg.__name__}.server.app").app
    with TestClient(app) as http, http.websocket_connect("/ws") as ws:
        assert http.get("/health").json()["status"] == "healthy"
        schema = http.get("/schema").json()
        assert {"content", "tool_calls"} <= set(schema["action"]["properties"])

        def send(message: dict[str, Any]) -> dict[str, Any]:
            ws.send_text(json.dumps(message))
            reply = json.loads(ws.receive_text())
            assert reply["type"] != "error", reply
            return reply["data"]

        result = client._parse_result(send({"type": "reset", "data": {} if seed is None else {"seed": seed}}))
        first = result
        for turn in range(MAX_TURNS):
            if result.done:
                break
            assert result.reward == 0.0  # nothing is paid before the end
            action = action_cls(**script[min(turn, len(script) - 1)])
            result = client._parse_result(send({"type": "step", "data": client._step_payload(action)}))
        state = send({"type": "state"})
    assert result.done
    return first, result, state


def test_library_family_exports_as_an_openenv_package_with_trace_rl_rewards(tmp_path):
    from openenv.cli._validation import validate_multi_mode_deployment

    out = tmp_path / "pkgs" / "lookup"
    export("library:lookup_answer", out)
    for rel in ("openenv.yaml", "pyproject.toml", "models.py", "client.py", "server/app.py", "source.json"):
        assert (out / rel).is_file(), rel
    assert (out / "server" / "lookup_answer_environment.py").is_file()
    _, issues = validate_multi_mode_deployment(out)  # OpenEnv's own check of the layout
    assert [i for i in issues if "uv.lock" not in i] == [], issues

    ref = SourceRef.model_validate_json((out / "source.json").read_text())
    assert ref == resolve_source("library:lookup_answer")
    seeds = ref.seeds()["train"]
    pkg = load_package(out)
    seed = seeds[3]
    task = ref.load().make_task(seed)
    gold, wrong = (session_outcome(ref, seed, s) for s in (gold_script(task), WRONG))
    assert gold.reward != wrong.reward and gold.success and not wrong.success

    first, result, state = served_outcome(pkg, seed, gold_script(task))
    assert first.observation.task_id == task.id and first.observation.messages[-1]["role"] == "user"
    assert result.reward == gold.reward and result.observation.success is gold.success
    assert result.observation.termination == gold.termination and result.observation.breakdown == gold.breakdown
    assert result.observation.metadata["success"] is gold.success
    assert state["done"] and state["reward"] == gold.reward and state["task_id"] == task.id

    _, result, _ = served_outcome(pkg, seed, WRONG)
    assert result.reward == wrong.reward and result.observation.termination == wrong.termination

    default, _, _ = served_outcome(pkg, None, WRONG)  # no seed: the first train seed's task
    assert default.observation.task_id == ref.load().make_task(seeds[0]).id


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


def test_a_capability_env_is_copied_into_a_self_contained_package(tmp_path, capability_env):
    original = resolve_source(str(capability_env))
    seed = original.seeds()["train"][2]
    task = original.load().make_task(seed)
    gold, wrong = (session_outcome(original, seed, s) for s in (gold_script(task), WRONG))
    assert gold.reward != wrong.reward

    out = tmp_path / "pkgs" / "cap"
    export(str(capability_env), out, "--max-steps", "40")
    ref = SourceRef.model_validate_json((out / "source.json").read_text())
    assert ref.kind == "capability" and ref.folder == "env" and (out / "env" / "spec.json").is_file()
    assert json.loads((out / "episode.json").read_text()) == {"max_steps": 40, "max_errors": 10}
    shutil.rmtree(capability_env.parent.parent)  # the run is gone: the package must not need it

    pkg = load_package(out)
    for script, expected in ((gold_script(task), gold), (WRONG, wrong)):
        _, result, _ = served_outcome(pkg, seed, script)
        assert result.reward == expected.reward and result.observation.success is expected.success


def test_the_environment_class_refuses_steps_outside_an_episode():
    env = TraceRLEnvironment(resolve_source("library:lookup_answer").load(), default_seed=5)
    with pytest.raises(UserError, match="reset"):
        env.step(TraceRLAction(content="hello"))
    obs = env.reset()
    assert obs.seed == 5 and obs.reward == 0.0 and not obs.done and env.state.task_id == obs.task_id
    for _ in range(MAX_TURNS):
        obs = env.step(TraceRLAction(content="I do not know."))
        if obs.done:
            break
    assert obs.done and env.state.done and env.state.step_count >= 1
    with pytest.raises(UserError, match="over"):
        env.step(TraceRLAction(content="again"))


def test_bad_exports_exit_2_with_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    assert main(["export", "env", "library:lookup_answer", "--format", "openenv", "--out", str(out)]) == 2
    assert (out / "keep.txt").is_file()  # nothing replaced
    (tmp_path / "plain").mkdir()
    assert main(["export", "env", str(tmp_path / "plain"), "--format", "openenv", "--out", str(tmp_path / "o")]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 2 and "not empty" in lines[0] and "not a capability environment" in lines[1]
    assert not (tmp_path / "o").exists()
