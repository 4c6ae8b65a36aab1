"""The registry of environment export formats: `trace-rl export env <source> --format <name>`.

Each format is a function `(request) -> Path` in its own module (imported lazily: its package is an optional extra),
writing a self-contained package under `request.out` that rebuilds the source through `SourceRef` and scores an
episode with trace-rl's own scorer.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trace_rl.errors import UserError
from trace_rl.interop.sources import SourceRef


@dataclass(frozen=True)
class ExportRequest:
    """What to export (`source`), where (`out`, a folder that must not exist unless `overwrite`), and the episode
    limits the exported environment applies (trace-rl's defaults: 50 hops, 10 tool errors)."""

    source: SourceRef
    out: Path
    max_steps: int = 50
    max_errors: int = 10
    overwrite: bool = False


Exporter = Callable[[ExportRequest], Path]

_BUILTIN = {
    "openenv": "trace_rl.interop.openenv_export:export_openenv",
    "verifiers": "trace_rl.interop.verifiers_export:export_verifiers",
}
_REGISTRY: dict[str, Exporter] = {}


def register_exporter(name: str, exporter: Exporter) -> None:
    _REGISTRY[name] = exporter


def formats() -> list[str]:
    return sorted({*_BUILTIN, *_REGISTRY})


def exporter(name: str) -> Exporter:
    if name in _REGISTRY:
        return _REGISTRY[name]
    target = _BUILTIN.get(name)
    if target is None:
        raise UserError(f"unknown export format '{name}' (known: {', '.join(formats())})")
    module, attr = target.split(":")
    try:
        fn: Exporter = getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise UserError(
            f"export format '{name}' needs its package ({exc.name}): pip install 'trace-rl[formats]'"
        ) from None
    return fn


def export_env(request: ExportRequest, fmt: str) -> Path:
    """Write `request.source` as a `fmt` environment; the folder written."""
    out = Path(request.out)
    if out.exists() and any(out.iterdir()) and not request.overwrite:
        raise UserError(f"{out} exists and is not empty (pass --overwrite to replace it)")
    return exporter(fmt)(request)


__all__ = ["ExportRequest", "Exporter", "export_env", "exporter", "formats", "register_exporter"]
