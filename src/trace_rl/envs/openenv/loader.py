"""Finding an OpenEnv environment's classes in process: a package folder (with `openenv.yaml`) or an importable module.

- A folder: `openenv.yaml` names the server app (`app: server.app:app`, OpenEnv's default); the folder is imported as
  a package under a private name (so its relative imports work without installing it) and the app module loaded;
  the environment and action classes are the ones that module uses (defined in the package, preferred over ones it
  imports from elsewhere).
- A module: `package.module` or `package.module:EnvironmentClass`.

The environment class is the one concrete `Environment` subclass found (or `env_class` by name); the action class
is its `Environment[Action, ...]` type argument, else the one `Action` subclass found. An MCP environment
(`MCPEnvironment`) needs none: its actions are OpenEnv's `CallToolAction`. Nothing here starts a server, a container
or a network connection.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, get_args

from trace_rl.errors import UserError

MANIFEST = "openenv.yaml"


def _openenv() -> Any:
    try:
        from openenv.core.env_server import interfaces, mcp_environment, types
    except ImportError:
        raise UserError("openenv environments need openenv-core: pip install 'trace-rl[formats]'") from None
    return interfaces, mcp_environment, types


@dataclass
class OpenEnvClasses:
    """What trace-rl needs to run an OpenEnv environment in process."""

    name: str
    env_cls: type
    action_cls: type | None  # None for an MCP environment
    is_mcp: bool
    description: str = ""


def _is_path(text: str) -> bool:
    return "/" in text or text.startswith((".", "~")) or Path(text).expanduser().exists()


def _import_folder(folder: Path) -> tuple[str, dict[str, Any]]:
    """Import `folder` as a package; (its private name, the manifest)."""
    import yaml

    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise UserError(f"{folder} is not an OpenEnv environment (no {MANIFEST})")
    try:
        manifest = yaml.safe_load(manifest_path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"{manifest_path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(manifest, dict):
        raise UserError(f"{manifest_path}: expected a mapping of OpenEnv settings")
    resolved = folder.resolve()
    pkg = "_trace_rl_openenv_" + hashlib.sha1(str(resolved).encode()).hexdigest()[:12]
    if pkg not in sys.modules:
        init = resolved / "__init__.py"
        spec = importlib.util.spec_from_file_location(
            pkg, init if init.is_file() else None, submodule_search_locations=[str(resolved)]
        )
        if spec is None:
            raise UserError(f"{folder}: cannot import it as a Python package")
        module = importlib.util.module_from_spec(spec)
        sys.modules[pkg] = module
        try:
            if spec.loader is not None and init.is_file():
                spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(pkg, None)
            raise UserError(f"{folder}: importing the package failed: {type(exc).__name__}: {exc}") from None
    return pkg, manifest


def _import(name: str, what: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except UserError:
        raise
    except Exception as exc:  # an environment's import error is the user's to fix: one line
        raise UserError(f"{what}: import failed: {type(exc).__name__}: {exc}") from None


def _classes(modules: list[ModuleType], base: type, prefix: str) -> list[type]:
    """Subclasses of `base` visible in `modules`, those defined under `prefix` first, each once."""
    seen: dict[type, None] = {}
    for module in modules:
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, base) and value is not base:
                seen[value] = None
    found = list(seen)
    return sorted(found, key=lambda c: not c.__module__.startswith(prefix))


def _action_arg(env_cls: type, action_base: type) -> type | None:
    for klass in env_cls.__mro__:
        for orig in getattr(klass, "__orig_bases__", ()):
            for arg in get_args(orig):
                if inspect.isclass(arg) and issubclass(arg, action_base) and arg is not action_base:
                    return arg
    return None


def find_classes(rest: str, env_class: str | None = None) -> OpenEnvClasses:
    """The OpenEnv environment `rest` names (a folder or `module[:Class]`)."""
    interfaces, mcp_environment, types = _openenv()
    if not rest:
        raise UserError("openenv: name a package folder or a module, e.g. openenv:./my_env or openenv:pkg.module")
    if _is_path(rest):
        folder = Path(rest).expanduser()
        if not folder.is_dir():
            raise UserError(f"{rest} is not an OpenEnv environment (no such folder)")
        pkg, manifest = _import_folder(folder)
        app = str(manifest.get("app") or "server.app:app").partition(":")[0]
        modules = [_import(f"{pkg}.{app}", str(folder))]
        modules += [m for n, m in list(sys.modules.items()) if n.startswith(pkg) and m is not None]
        prefix, name = pkg, str(manifest.get("name") or folder.resolve().name)
        description = str(manifest.get("description") or "")
    else:
        module_name, _, cls_name = rest.partition(":")
        env_class = env_class or cls_name or None
        modules = [_import(module_name, f"openenv:{rest}")]
        prefix, name, description = module_name, module_name.rsplit(".", 1)[-1], ""
    envs = [c for c in _classes(modules, interfaces.Environment, prefix) if not inspect.isabstract(c)]
    if env_class:
        envs = [c for c in envs if c.__name__ == env_class]
        if not envs:
            raise UserError(f"openenv:{rest}: no Environment class named '{env_class}'")
    if not envs:
        raise UserError(f"openenv:{rest}: no OpenEnv Environment class found")
    own = [c for c in envs if c.__module__.startswith(prefix)]
    if len(own or envs) > 1 and not env_class:
        names = ", ".join(sorted(c.__name__ for c in own or envs))
        raise UserError(f"openenv:{rest}: several Environment classes ({names}); choose one with env.options.env_class")
    env_cls = (own or envs)[0]
    is_mcp = issubclass(env_cls, mcp_environment.MCPEnvironment)
    action_cls = None
    if not is_mcp:
        action_cls = _action_arg(env_cls, types.Action)
        if action_cls is None:
            actions = [c for c in _classes(modules, types.Action, prefix) if c.__module__.startswith(prefix)]
            if len(actions) != 1:
                raise UserError(f"openenv:{rest}: cannot tell the action class of {env_cls.__name__}")
            action_cls = actions[0]
    return OpenEnvClasses(
        name=name, env_cls=env_cls, action_cls=action_cls, is_mcp=is_mcp, description=description.strip()
    )


__all__ = ["MANIFEST", "OpenEnvClasses", "find_classes"]
