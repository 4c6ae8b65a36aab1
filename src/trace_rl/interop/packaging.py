"""What both environment exports share: names, requirements, the source as the package holds it, and writing the
package whole (a temporary sibling folder renamed into place, so an export is never half-written)."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import tempfile
from pathlib import Path

from trace_rl.artifacts.store import atomic_write_text
from trace_rl.errors import UserError
from trace_rl.interop.sources import SourceRef

ENV_FOLDER = "env"  # a capability environment's copy inside the package


def slug(name: str, empty: str) -> str:
    """`name` in lower case with `_` for anything else (`empty` when nothing is left)."""
    return re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower() or empty


def requirement(package: str, *, exact: bool = False) -> str:
    """`package` pinned to (`exact`) or at least the installed version; unpinned when it is not installed."""
    try:
        return f"{package}{'==' if exact else '>='}{importlib.metadata.version(package)}"
    except importlib.metadata.PackageNotFoundError:
        return package


def packaged_source(ref: SourceRef, out: Path) -> tuple[Path | None, SourceRef]:
    """The capability folder to copy into the package (None for other sources) and the `SourceRef` the package
    stores (pointing at its own copy)."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a folder")
    if ref.kind != "capability":
        return None, ref
    assert ref.folder is not None
    folder = Path(ref.folder)
    if not folder.is_dir():
        raise UserError(f"capability environment folder not found: {folder}")
    return folder, ref.model_copy(update={"folder": ENV_FOLDER})


def write_package(out: Path, files: dict[str, str], *, env_folder: Path | None, env_dest: str) -> Path:
    """Write `files` (relative path -> text) and a copy of `env_folder` at `env_dest` as the folder `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        if env_folder is not None:
            shutil.copytree(env_folder, staging / env_dest)
        for rel, text in files.items():
            atomic_write_text(staging / rel, text)
        os.chmod(staging, 0o755)
        if out.exists():
            shutil.rmtree(out)  # export_env refused a non-empty folder unless --overwrite
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out


__all__ = ["ENV_FOLDER", "packaged_source", "requirement", "slug", "write_package"]
