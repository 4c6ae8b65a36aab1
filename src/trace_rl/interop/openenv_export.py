"""`trace-rl export env <source> --format openenv --out <dir>`: a trace-rl environment as an OpenEnv environment
package, in the layout of OpenEnv's own template (`openenv init`): `openenv.yaml`, `pyproject.toml`, `models.py`
(Action / Observation types), `client.py` (an `EnvClient`), `server/<name>_environment.py` (the `Environment`),
`server/app.py` (`create_app`, with `main()` for `uv run server` / `python -m`), `README.md`.

The generated modules are thin subclasses of `trace_rl.interop.openenv_env` (trace-rl is a dependency of the package):
the environment rebuilds its source from `source.json` (a `SourceRef`) beside it, with the limits in `episode.json`.
A capability environment's folder is copied into the package (`env/`) and referenced relatively, so the package is
self-contained apart from trace-rl. Departures from the template: no Dockerfile and no `uv.lock` (the image would
need trace-rl, which `pip install` must supply; `openenv validate` reports the missing lock file), and the package is
written whole to a temporary sibling folder and renamed into place (never half-written).
"""

from __future__ import annotations

import json
from pathlib import Path
from string import Template

from trace_rl.interop.exporters import ExportRequest
from trace_rl.interop.openenv_env import EPISODE_FILE, SOURCE_FILE
from trace_rl.interop.packaging import ENV_FOLDER, packaged_source, requirement, slug, write_package
from trace_rl.interop.sources import SourceRef

OPENENV_REQUIREMENT = "openenv-core[core]==0.3.0"


def package_name(name: str) -> str:
    """A Python package name for the environment `name` (lower case, `_` for anything else, never a leading digit)."""
    name = slug(name, "trace_rl_env")
    return f"env_{name}" if name[0].isdigit() else name


def class_prefix(pkg: str) -> str:
    """OpenEnv's naming convention (AutoEnv infers `<Pascal>Env`, `<Pascal>Action`, `<Pascal>Observation`)."""
    return "".join(word.capitalize() for word in pkg.removesuffix("_env").split("_") if word)


_MODELS = '''"""Action and observation types of the $title environment (trace-rl export: interop.openenv_env)."""

from trace_rl.interop.openenv_env import TraceRLAction, TraceRLObservation, TraceRLState


class ${cls}Action(TraceRLAction):
    """The agent's assistant message: `content` (text) or `tool_calls` (OpenAI format)."""


class ${cls}Observation(TraceRLObservation):
    """OpenAI-format messages and tools; `reward` is trace-rl's reward once `done` (0.0 before)."""


${cls}State = TraceRLState
'''

_ENVIRONMENT = '''"""The $title environment: a trace-rl episode behind OpenEnv's Environment API (trace-rl export)."""

from pathlib import Path

from trace_rl.interop.openenv_env import TraceRLEnvironment


class ${cls}Environment(TraceRLEnvironment):
    """reset(seed) picks the task of that seed; step(action) plays the agent's turn. Source: ../$source_file."""

    PACKAGE_ROOT = Path(__file__).resolve().parent.parent
    ENV_NAME = "$pkg"
'''

_SERVER_INIT = '''"""$title environment server components."""

from .${pkg}_environment import ${cls}Environment

__all__ = ["${cls}Environment"]
'''

_APP = '''"""FastAPI application of the $title environment (OpenEnv's create_app: /reset, /step, /state, /schema, /ws).

    uvicorn server.app:app --host 0.0.0.0 --port 8000
    uv run --project . server          # or: python -m ${pkg}.server.app
"""

from openenv.core.env_server.http_server import create_app

try:
    from ..models import ${cls}Action, ${cls}Observation
    from .${pkg}_environment import ${cls}Environment
except ImportError:
    from models import ${cls}Action, ${cls}Observation
    from server.${pkg}_environment import ${cls}Environment

app = create_app(
    ${cls}Environment,
    ${cls}Action,
    ${cls}Observation,
    env_name="$pkg",
    max_concurrent_envs=$sessions,  # each WebSocket session gets its own environment instance
)


def main(host: str = "0.0.0.0", port: int = 8000) -> None:
    import uvicorn

    uvicorn.run(app, host=host, port=port)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8000)
    main(port=parser.parse_args().port)
'''

_CLIENT = '''"""Client of the $title environment: a persistent WebSocket session (OpenEnv EnvClient)."""

from trace_rl.interop.openenv_env import TraceRLClient

from .models import ${cls}Action  # noqa: F401  (the action type a step sends)


class ${cls}Env(TraceRLClient):
    """A WebSocket session with a running server:

    async with ${cls}Env(base_url="http://localhost:8000") as env:
        result = await env.reset(seed=...)
        result = await env.step(${cls}Action(content="..."))
    """
'''

_INIT = '''"""$title: a trace-rl environment exported for OpenEnv."""

from .client import ${cls}Env
from .models import ${cls}Action, ${cls}Observation

__all__ = ["${cls}Action", "${cls}Env", "${cls}Observation"]
'''

_PYPROJECT = """[build-system]
requires = ["setuptools>=45", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "openenv-$pkg"
version = "0.1.0"
description = "$title: a trace-rl environment for OpenEnv"
requires-python = ">=3.11"
dependencies = [$deps]

[project.scripts]
server = "$pkg.server.app:main"

[tool.setuptools]
include-package-data = true
packages = ["$pkg", "$pkg.server"]
package-dir = { "$pkg" = ".", "$pkg.server" = "server" }

[tool.setuptools.package-data]
"$pkg" = ["openenv.yaml", "$source_file", "$episode_file", "$env_folder/**/*"]
"""

_YAML = """spec_version: 1
name: $pkg
description: "$title: a trace-rl environment (tool-using conversation, trace-rl's reward)"
type: space
runtime: fastapi
app: server.app:app
port: 8000
"""

_README = """# $title

A trace-rl environment (`$kind` `$name`) exported for OpenEnv by `trace-rl export env --format openenv`.

- `reset(seed=...)`: the task of that seed (default: the first train seed, $first_seed); the observation carries the
  OpenAI-format `messages` the agent sees and its `tools`.
- `step(${cls}Action(content=...) | ${cls}Action(tool_calls=[...]))`: the agent's turn; the observation carries
  `new_messages`, `done`, and `reward` = trace-rl's reward at the end (0.0 before), with `success`, `termination` and
  `breakdown`.
- Seeds: train $train_seeds; test $test_seeds. Episode limits: $max_steps hops, $max_errors tool errors.

Run: `pip install -e .` (needs trace-rl), then `uvicorn server.app:app --port 8000`.
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
        "cls": class_prefix(pkg),
        "title": ref.name,
        "name": ref.name,
        "kind": ref.kind,
        "sessions": "8",
        "source_file": SOURCE_FILE,
        "episode_file": EPISODE_FILE,
        "env_folder": ENV_FOLDER,
        "deps": ", ".join(json.dumps(d) for d in (OPENENV_REQUIREMENT, requirement("trace-rl"))),
        "first_seed": str((seeds.get("train") or [0])[0]),
        "train_seeds": _seed_range(seeds.get("train", [])),
        "test_seeds": _seed_range(seeds.get("test", [])),
        "max_steps": str(request.max_steps),
        "max_errors": str(request.max_errors),
    }
    templates = {
        "__init__.py": _INIT,
        "models.py": _MODELS,
        "client.py": _CLIENT,
        "server/__init__.py": _SERVER_INIT,
        f"server/{pkg}_environment.py": _ENVIRONMENT,
        "server/app.py": _APP,
        "server/requirements.txt": "$deps_lines\n",
        "pyproject.toml": _PYPROJECT,
        "openenv.yaml": _YAML,
        "README.md": _README,
    }
    values["deps_lines"] = "\n".join((OPENENV_REQUIREMENT, requirement("trace-rl")))
    out = {path: Template(text).substitute(values) for path, text in templates.items()}
    out[SOURCE_FILE] = ref.model_dump_json(indent=2) + "\n"
    out[EPISODE_FILE] = json.dumps({"max_steps": request.max_steps, "max_errors": request.max_errors}, indent=2) + "\n"
    return out


def export_openenv(request: ExportRequest) -> Path:
    """Write `request.source` as an OpenEnv environment package into `request.out`; the folder written."""
    ref, out = request.source, Path(request.out)
    folder, packaged = packaged_source(ref, out)
    seeds = ref.seeds()  # loads the source: a broken one fails here, before anything is written
    pkg = package_name(ref.name)
    return write_package(out, _files(request, packaged, pkg, seeds), env_folder=folder, env_dest=ENV_FOLDER)


__all__ = ["class_prefix", "export_openenv", "package_name"]
