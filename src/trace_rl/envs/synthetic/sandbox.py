"""Running author-written generator code in a separate, limited process.

The code never runs in the trace-rl process. `run_generator(code, seeds, ...)` starts
`python -s -P -m trace_rl.envs.synthetic._sandbox_child <tmp>` with:

- a private temporary directory as cwd, HOME and TMPDIR (removed afterwards) and a clean environment (no proxies,
  keys or PYTHONPATH; only PATH, LANG and PYTHONHASHSEED=0 so generators are reproducible);
- resource limits set before exec: RLIMIT_CPU (the kernel sends SIGXCPU), RLIMIT_AS (allocations fail with
  MemoryError), RLIMIT_FSIZE (no file over the limit), RLIMIT_NPROC = 0 (no new processes or threads; not enforced for
  a root user with CAP_SYS_RESOURCE, hence also the audit hook below), RLIMIT_CORE = 0; a new session, so the whole
  process group is killed at the wall-clock limit; when started as root, the child drops to uid/gid 65534;
- inside the child, after the project's environment API is loaded and before the code is compiled, an audit hook
  (PEP 578) that refuses: socket creation and every other `socket.*` event (and `socket.socket` is replaced),
  opening any path outside the temp dir for writing, and for reading anything but Python sources and extension
  modules of the interpreter and site-packages, process creation (`subprocess.Popen`, `os.system`, `os.exec*`,
  `os.spawn*`, `os.posix_spawn`, `os.fork`), signals to other processes, `ctypes`, `resource.setrlimit`, file
  system changes outside the temp dir, new audit hooks and `gc` object walks. Every refusal is recorded and raises
  `PermissionError` in the generator.

The generator sees only `generate(seed, api)` and the `api` object (`GeneratorAPI` in the child): the target's tool
schemas and policy, a starting world per seed, and a replay of a candidate task's gold actions. The parent reads the
child's JSON result (size-capped); a killed or crashed child becomes a `SandboxResult` with the reason, never an
exception in the caller. Audit hooks are defence in depth, not a security boundary against a determined attacker:
run untrusted authors in a container as well.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trace_rl.artifacts.layout import (
    SANDBOX_CODE_FILE,
    SANDBOX_JOB_FILE,
    SANDBOX_RESULT_FILE,
    SANDBOX_STDERR_FILE,
    SANDBOX_STDOUT_FILE,
)
from trace_rl.config.synthesize import SandboxConfig

MAX_RESULT_BYTES = 64 << 20
NOBODY = 65534


@dataclass
class SandboxResult:
    """What came back from one sandboxed run."""

    tasks: dict[int, dict[str, Any]] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    blocked: list[str] = field(default_factory=list)
    fatal: str | None = None
    killed: str | None = None
    returncode: int | None = None
    stderr_tail: str = ""
    wall_s: float = 0.0
    privileges: str = ""

    @property
    def ok(self) -> bool:
        return self.fatal is None and self.killed is None and self.returncode == 0

    @property
    def summary(self) -> str:
        parts = []
        if self.killed:
            parts.append(f"killed: {self.killed}")
        if self.fatal:
            parts.append(f"fatal: {self.fatal}")
        if self.blocked:
            parts.append(f"blocked: {'; '.join(sorted(set(self.blocked))[:5])}")
        if self.errors:
            first = next(iter(self.errors.items()))
            parts.append(f"{len(self.errors)} seed errors (seed {first[0]}: {first[1][:200]})")
        if not parts:
            parts.append(f"ok: {len(self.tasks)} tasks")
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "n_tasks": len(self.tasks),
            "errors": {str(k): v for k, v in self.errors.items()},
            "blocked": self.blocked,
            "fatal": self.fatal,
            "killed": self.killed,
            "returncode": self.returncode,
            "stderr_tail": self.stderr_tail,
            "wall_s": round(self.wall_s, 3),
            "privileges": self.privileges,
        }


def _limits(cfg: SandboxConfig, drop_to_nobody: bool):  # pragma: no cover - runs in the forked child
    import resource

    def apply() -> None:
        mem = cfg.memory_mb << 20
        resource.setrlimit(resource.RLIMIT_CPU, (cfg.cpu_s, cfg.cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (cfg.file_mb << 20, cfg.file_mb << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if drop_to_nobody:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))

    return apply


def _clean_env(tmp: Path) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp),
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "NO_PROXY": "*",
    }


def _killed_reason(returncode: int, wall_hit: bool) -> str | None:
    if wall_hit:
        return "wall-clock limit"
    if returncode >= 0:
        return None
    sig = -returncode
    if sig == signal.SIGXCPU:
        return "CPU-time limit (SIGXCPU)"
    if sig == signal.SIGKILL:
        return "killed (SIGKILL: CPU hard limit or out of memory)"
    if sig == signal.SIGXFSZ:
        return "file-size limit (SIGXFSZ)"
    if sig == signal.SIGSEGV:
        return "crashed (SIGSEGV, e.g. the memory limit hit native code)"
    return f"signal {signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else sig}"


def _spawn(cmd: list[str], tmp: Path, limits: SandboxConfig, drop: bool) -> tuple[subprocess.Popen[bytes], bool]:
    with open(tmp / SANDBOX_STDOUT_FILE, "wb") as out, open(tmp / SANDBOX_STDERR_FILE, "wb") as err:
        proc = subprocess.Popen(
            cmd,
            cwd=tmp,
            env=_clean_env(tmp),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            preexec_fn=_limits(limits, drop),
            start_new_session=True,
            close_fds=True,
        )
    wall_hit = False
    try:
        proc.wait(timeout=limits.wall_s)
    except subprocess.TimeoutExpired:
        wall_hit = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return proc, wall_hit


def run_generator(
    code: str,
    seeds: list[int],
    *,
    target: dict[str, Any],
    difficulty: int = 1,
    limits: SandboxConfig | None = None,
    capability: str = "",
    exclude: dict[str, list[str]] | None = None,
    drop_privileges: bool | None = None,
) -> SandboxResult:
    """Run `generate(seed, api)` of `code` for every seed in a sandboxed child process."""
    limits = limits or SandboxConfig()
    tmp = Path(tempfile.mkdtemp(prefix="trace-rl-sandbox-"))
    started = time.monotonic()
    result = SandboxResult()
    root = os.geteuid() == 0 if hasattr(os, "geteuid") else False
    drop = root if drop_privileges is None else (drop_privileges and root)
    try:
        (tmp / SANDBOX_CODE_FILE).write_text(code)
        job = {
            "seeds": list(seeds),
            "target": target,
            "difficulty": difficulty,
            "capability": capability,
            "exclude": exclude or {},
        }
        (tmp / SANDBOX_JOB_FILE).write_text(json.dumps(job, default=str))
        for name in (SANDBOX_STDOUT_FILE, SANDBOX_STDERR_FILE, SANDBOX_RESULT_FILE):
            (tmp / name).touch()
        if drop:
            for path in (tmp, *tmp.iterdir()):
                os.chown(path, NOBODY, NOBODY)
        cmd = [sys.executable, "-s", "-P", "-m", "trace_rl.envs.synthetic._sandbox_child", str(tmp)]
        try:
            proc, wall_hit = _spawn(cmd, tmp, limits, drop)
        except PermissionError:
            if not drop:
                raise
            drop = False  # the interpreter is not reachable as nobody (e.g. under /root): keep the uid
            proc, wall_hit = _spawn(cmd, tmp, limits, drop)
        result.privileges = "uid 65534" if drop else f"uid {os.geteuid()}"
        result.returncode = proc.returncode
        result.killed = _killed_reason(proc.returncode, wall_hit)
        result.stderr_tail = _tail(tmp / SANDBOX_STDERR_FILE)
        _read_result(tmp / SANDBOX_RESULT_FILE, result)
        if result.returncode not in (0, None) and result.fatal is None and result.killed is None:
            result.fatal = f"exit status {result.returncode}"
    finally:
        result.wall_s = time.monotonic() - started
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def _tail(path: Path, n: int = 2000) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - n))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def _read_result(path: Path, result: SandboxResult) -> None:
    """The child appends one JSON line per seed ({"seed", "task"|"error"}), per refusal ({"blocked"}) and on a
    fatal error ({"fatal"}), so a child killed half-way still reports what it did."""
    if not path.exists() or path.stat().st_size == 0:
        if result.killed is None:
            result.fatal = result.fatal or "the child wrote no result"
        return
    if path.stat().st_size > MAX_RESULT_BYTES:
        result.fatal = f"result larger than {MAX_RESULT_BYTES >> 20} MiB"
        return
    for line in path.read_bytes().decode(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a kill
        if not isinstance(record, dict):
            continue
        if "blocked" in record:
            result.blocked.append(str(record["blocked"]))
        elif "fatal" in record:
            result.fatal = str(record["fatal"])
        elif "seed" in record:
            seed = int(record["seed"])
            if isinstance(record.get("task"), dict):
                result.tasks[seed] = record["task"]
                result.errors.pop(seed, None)
            else:
                result.errors[seed] = str(record.get("error", "no task"))


__all__ = ["SandboxResult", "run_generator"]
