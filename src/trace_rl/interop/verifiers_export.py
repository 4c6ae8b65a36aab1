"""`trace-rl export env <source> --format verifiers --out <dir>`: a trace-rl environment as a verifiers (0.4.0)
environment package, in the layout of verifiers' own scaffold (`vf-init`): `pyproject.toml` (hatchling, one package),
`README.md`, and the package `trace_rl_<name>/` whose `__init__.py` exports, via `__all__`, the Taskset, its Env and
its default Harness -- what verifiers' loader resolves from the id (`vf.load_environment`, `vf-eval trace-rl-<name>`).

The generated `taskset.py` is three thin subclasses of `trace_rl.interop.verifiers_env` (trace-rl is a dependency of
the package); the taskset rebuilds its source from `source.json` (a `SourceRef`) beside it, with the limits in
`episode.json`. A capability environment's folder is copied into the package (`env/`) and referenced relatively.
Departures from the scaffold: the module is prefixed `trace_rl_` (so an id never resolves to one of verifiers' own
tasksets, e.g. `openenv`), the package ships its own in-process harness as the default, and it is written whole to a
temporary sibling folder and renamed into place (never half-written).
"""

from __future__ import annotations

import json
from pathlib import Path
from string import Template

from trace_rl.interop.exporters import ExportRequest
from trace_rl.interop.packaging import ENV_FOLDER, packaged_source, requirement, slug, write_package
from trace_rl.interop.sources import SourceRef
from trace_rl.interop.verifiers_env import EPISODE_FILE, SOURCE_FILE


def package_name(name: str) -> str:
    """The module of the environment `name`: `trace_rl_<slug>` (lower case, `_` for anything else)."""
    return f"trace_rl_{slug(name, 'env')}"


def class_prefix(pkg: str) -> str:
    return "".join(word.capitalize() for word in pkg.removeprefix("trace_rl_").split("_") if word) or "Env"


def _requirements() -> list[str]:
    return [requirement("verifiers", exact=True), requirement("trace-rl")]


_INIT = '''"""$title: a trace-rl environment exported for verifiers (trace-rl export env --format verifiers)."""

from .taskset import ${cls}Env, ${cls}Harness, ${cls}Taskset

__all__ = ["${cls}Env", "${cls}Harness", "${cls}Taskset"]
'''

_TASKSET = '''"""The $title taskset, env and harness: trace-rl's episode behind verifiers' API.

The logic is trace-rl's (trace_rl.interop.verifiers_env).

Source: $source_file beside this file; episode limits: $episode_file.
"""

from pathlib import Path

from trace_rl.interop.verifiers_env import TraceRLEnv, TraceRLHarness, TraceRLTaskset


class ${cls}Taskset(TraceRLTaskset):
    """One task per seed of the split (`--env.taskset.split train|test`, `--env.taskset.num-tasks N`)."""

    PACKAGE_ROOT = Path(__file__).resolve().parent


class ${cls}Env(TraceRLEnv):
    """Each agent turn goes to trace-rl's episode; its tool results and user replies come back as the next turn."""


class ${cls}Harness(TraceRLHarness):
    """The default harness: one model call per turn, the row's tools declared, run in process."""
'''

_PYPROJECT = """[project]
name = "$dash"
version = "0.1.0"
description = "$title: a trace-rl environment for verifiers (trace-rl's reward)"
requires-python = ">=3.11"
dependencies = [$deps]

[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[tool.hatch.build.targets.wheel]
packages = ["$pkg"]
"""

_README = """# $dash

A trace-rl environment (`$kind` `$name`) exported for verifiers by `trace-rl export env --format verifiers`.

- Tasks: one per seed; train $train_seeds, test $test_seeds (`--env.taskset.split test`, `--env.taskset.num-tasks N`).
  Each row's prompt is what trace-rl's agent sees at reset (system prompt, worked examples, the opening user turn),
  and it carries the seed, trace-rl's task id and the tool schemas.
- Episode: the model speaks first; each assistant message (text or tool calls) is one step of trace-rl's episode,
  whose tool results and simulated-user replies come back as the next turn, until the episode is over
  ($max_steps hops, $max_errors tool errors at most).
- Reward: `trace_rl_reward` = trace-rl's reward for the episode; metric `success` = trace-rl's success label.

Install and run (needs trace-rl):

```bash
uv pip install -e .
uv run vf-eval $dash -n 3
```
"""


def _seed_range(seeds: list[int]) -> str:
    if not seeds:
        return "none"
    if seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}..{seeds[-1]} ({len(seeds)})"
    return f"{len(seeds)} seeds from {seeds[0]}"


def _files(request: ExportRequest, ref: SourceRef, pkg: str, seeds: dict[str, list[int]]) -> dict[str, str]:
    values = {
        "pkg": pkg,
        "dash": pkg.replace("_", "-"),
        "cls": class_prefix(pkg),
        "title": ref.name,
        "name": ref.name,
        "kind": ref.kind,
        "source_file": SOURCE_FILE,
        "episode_file": EPISODE_FILE,
        "deps": ", ".join(json.dumps(d) for d in _requirements()),
        "train_seeds": _seed_range(seeds.get("train", [])),
        "test_seeds": _seed_range(seeds.get("test", [])),
        "max_steps": str(request.max_steps),
        "max_errors": str(request.max_errors),
    }
    templates = {
        "pyproject.toml": _PYPROJECT,
        "README.md": _README,
        f"{pkg}/__init__.py": _INIT,
        f"{pkg}/taskset.py": _TASKSET,
    }
    out = {path: Template(text).substitute(values) for path, text in templates.items()}
    out[f"{pkg}/{SOURCE_FILE}"] = ref.model_dump_json(indent=2) + "\n"
    limits = {"max_steps": request.max_steps, "max_errors": request.max_errors}
    out[f"{pkg}/{EPISODE_FILE}"] = json.dumps(limits, indent=2) + "\n"
    return out


def export_verifiers(request: ExportRequest) -> Path:
    """Write `request.source` as a verifiers environment package into `request.out`; the folder written."""
    ref, out = request.source, Path(request.out)
    folder, packaged = packaged_source(ref, out)
    seeds = ref.seeds()  # loads the source: a broken one fails here, before anything is written
    pkg = package_name(ref.name)
    files = _files(request, packaged, pkg, seeds)
    return write_package(out, files, env_folder=folder, env_dest=f"{pkg}/{ENV_FOLDER}")


__all__ = ["class_prefix", "export_verifiers", "package_name"]
