"""Running author-written generator code behind an operating-system boundary (bubblewrap + seccomp).

The code never runs in the trace-rl process. `run_generator(code, seeds, ...)` starts
`bwrap ... python -s -P -m trace_rl.envs.synthetic._sandbox_child /job` with:

- new user, mount, PID, network, IPC, UTS and cgroup namespaces (`--unshare-all --unshare-user --disable-userns`),
  uid/gid 65534 inside, no capabilities, a new session, and `--die-with-parent`: when the wall-clock limit kills
  bubblewrap, its init (PID 1 of the namespace) dies and the kernel kills every process of the namespace, `setsid`
  grandchildren included;
- a root that holds only, read-only: the system libraries (`/usr/lib*`), the interpreter's installation, the
  virtual environment, the `trace_rl` package and `/job` (the code, the job and, for τ², a train-side copy of the
  domain files: no task or split files, and the database without the users, orders and reservations the test split
  refers to); a private `/proc`, a minimal `/dev`, and one writable directory, `/sandbox`, a tmpfs of `disk_mb`;
- an empty environment but PATH, HOME, TMPDIR, LANG and PYTHONHASHSEED=0 (bubblewrap itself also gets no secrets);
- RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_CORE = 0 set before bubblewrap starts, and the child's own seccomp
  filter (`_sandbox_child.install_filter`: no new processes, sockets, mounts, namespaces, ptrace, ...).

Results come back on a pipe (the child's stdout), never through a file the child could rewrite or link; the parent
reads it with `sandbox_channel` (one record per seed asked for, per-line and total size caps, forged records
reported, never accepted). The child's stderr goes to an unlinked file of the parent. A killed or crashed child
becomes a `SandboxResult` with the reason, never an exception in the caller.

Where this isolation cannot be had (no bubblewrap, namespaces refused, not x86_64 Linux) `run_generator` raises
`SandboxUnavailable`, a `UserError` of one line saying what is missing: there is no weaker fallback.
Departure: for the library domain the held-out tasks are a function of the public code the API needs to replay
tasks; they are not hidden from the generator but caught by the leak guard on every task it returns.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from trace_rl.artifacts.layout import SANDBOX_CODE_FILE, SANDBOX_JOB_FILE
from trace_rl.config.synthesize import SandboxConfig
from trace_rl.envs.synthetic.sandbox_channel import (
    MAX_LINE_BYTES,
    MAX_RESULT_BYTES,
    ResultReader,
    SandboxResult,
    collect,
)
from trace_rl.errors import UserError

BWRAP_ENV = "TRACE_RL_BWRAP"
JOB_MOUNT, WORK_DIR = "/job", "/sandbox"
TAU2_HIDDEN = ("tasks", "split_tasks")  # file-name prefixes of the τ² data kept out of the sandbox
CHILD_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": WORK_DIR,
    "TMPDIR": WORK_DIR,
    "LANG": "C.UTF-8",
    "PYTHONHASHSEED": "0",
    "PYTHONDONTWRITEBYTECODE": "1",
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
}


class SandboxUnavailable(UserError):
    """The operating-system isolation the generator sandbox needs is not available here."""


# -- the isolation ---------------------------------------------------------------------------------------------------
def bwrap_binary(cfg: SandboxConfig) -> str | None:
    """The bubblewrap binary: `sandbox.bwrap`, else $TRACE_RL_BWRAP, else `bwrap` on PATH (None: not found)."""
    name = cfg.bwrap or os.environ.get(BWRAP_ENV) or "bwrap"
    return shutil.which(name)


def _read_only_roots() -> list[str]:
    """Directories the child needs, read-only: the interpreter's installation, the venv, the trace_rl package."""
    import trace_rl

    roots = {sys.base_prefix, sys.prefix, sys.exec_prefix, sys.base_exec_prefix}
    roots.add(str(Path(trace_rl.__file__).resolve().parent))
    roots.add(str(Path(os.path.realpath(sys.executable)).parent.parent))
    real = sorted({os.path.realpath(r) for r in roots} | {os.path.abspath(r) for r in roots})
    return [r for r in real if os.path.isdir(r) and not any(r != o and r.startswith(o.rstrip("/") + "/") for o in real)]


def _system_args() -> list[str]:
    args: list[str] = []
    for name in ("usr/lib", "usr/lib64", "usr/lib32"):
        if os.path.isdir(f"/{name}"):
            args += ["--ro-bind", f"/{name}", f"/{name}"]
    for name in ("lib", "lib64", "lib32", "bin"):
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path) and name != "bin":
            args += ["--ro-bind", path, path]
    if os.path.isfile("/etc/ld.so.cache"):
        args += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    return args


def bwrap_command(bwrap: str, job_dir: Path, cfg: SandboxConfig, argv: list[str]) -> list[str]:
    cmd = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session"]
    cmd += ["--uid", "65534", "--gid", "65534", "--clearenv"]
    for key, value in CHILD_ENV.items():
        cmd += ["--setenv", key, value]
    cmd += _system_args()
    for root in _read_only_roots():
        cmd += ["--ro-bind", root, root]
    cmd += ["--ro-bind", str(job_dir), JOB_MOUNT, "--proc", "/proc", "--dev", "/dev"]
    cmd += ["--size", str(cfg.disk_mb << 20), "--tmpfs", WORK_DIR, "--chdir", WORK_DIR]
    # the root and /dev tmpfs bubblewrap builds are not further writable dirs
    return [*cmd, "--remount-ro", "/dev", "--remount-ro", "/", "--", *argv]


PROBE = "from trace_rl.envs.synthetic._sandbox_child import install_filter; install_filter(); print('sandbox-ok')"


@functools.lru_cache(maxsize=8)
def _probe(bwrap: str | None, disk_mb: int) -> str | None:
    if sys.platform != "linux":
        return f"the generator sandbox needs Linux namespaces (this is {sys.platform})"
    if bwrap is None:
        return "bubblewrap (bwrap) not found: install it (apt-get install bubblewrap) or set sandbox.bwrap"
    with tempfile.TemporaryDirectory(prefix="trace-rl-sandbox-probe-") as tmp:
        cmd = bwrap_command(bwrap, Path(tmp), SandboxConfig(disk_mb=disk_mb), [sys.executable, "-s", "-P", "-c", PROBE])
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=60, env={"PATH": CHILD_ENV["PATH"]}, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bubblewrap ({bwrap}) could not be run: {exc}"
    if b"sandbox-ok" in done.stdout:
        return None
    why = (done.stderr.decode(errors="replace").strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    return f"bubblewrap ({bwrap}) cannot isolate the generator here: {why[:300]}"


def isolation_problem(cfg: SandboxConfig | None = None) -> str | None:
    """None when namespaces and the seccomp filter work here, else one line saying what is missing."""
    cfg = cfg or SandboxConfig()
    return _probe(bwrap_binary(cfg), cfg.disk_mb)


def require_isolation(cfg: SandboxConfig | None = None) -> str:
    """The bubblewrap binary, or `SandboxUnavailable` (one line) when the isolation cannot be had."""
    cfg = cfg or SandboxConfig()
    problem = isolation_problem(cfg)
    if problem is not None:
        raise SandboxUnavailable(f"synthesize: refusing to run author code without isolation: {problem}")
    binary = bwrap_binary(cfg)
    assert binary is not None
    return binary


# -- the job ---------------------------------------------------------------------------------------------------------
def _stage_target(target: dict[str, Any], job_dir: Path, exclude: dict[str, list[str]]) -> dict[str, Any]:
    """The target as the child sees it; for τ²: a train-side copy of the domain's files under /job/data."""
    from trace_rl.config import EnvConfig

    cfg = EnvConfig.model_validate(target)
    if not cfg.name.startswith("tau2:"):
        return target
    from trace_rl.envs.tau2 import data

    domain = cfg.name.split(":", 1)[1]
    source = data.domain_dir(data.resolve_data_dir(cfg.data_dir), domain)
    dest = job_dir / "data" / domain
    dest.mkdir(parents=True)
    for path in sorted(source.iterdir()):
        if path.is_file() and not path.is_symlink() and not path.name.startswith(TAU2_HIDDEN):
            shutil.copyfile(path, dest / path.name)
    db = json.loads((source / "db.json").read_text(encoding="utf-8"))
    for key, gone in exclude.items():
        if isinstance(db.get(key), dict):
            for record in gone:
                db[key].pop(record, None)
    (dest / "db.json").write_text(json.dumps(db))
    return {**cfg.model_dump(mode="json"), "data_dir": f"{JOB_MOUNT}/data"}


def _limits(cfg: SandboxConfig):  # pragma: no cover - runs in the forked child
    import resource

    def apply() -> None:
        mem = cfg.memory_mb << 20
        resource.setrlimit(resource.RLIMIT_CPU, (cfg.cpu_s, cfg.cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (cfg.file_mb << 20, cfg.file_mb << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def _killed_reason(returncode: int, wall_hit: bool) -> str | None:
    """bubblewrap exits 128 + N when the child died of signal N; -N is bubblewrap itself killed by N."""
    if wall_hit:
        return "wall-clock limit"
    sig = -returncode if returncode < 0 else (returncode - 128 if returncode > 128 else 0)
    if not sig:
        return None
    if sig == signal.SIGXCPU:
        return "CPU-time limit (SIGXCPU)"
    if sig == signal.SIGKILL:
        return "killed (SIGKILL: CPU hard limit or out of memory)"
    if sig == signal.SIGXFSZ:
        return "file-size limit (SIGXFSZ)"
    if sig == signal.SIGSYS:
        return "killed by the seccomp filter (SIGSYS)"
    if sig == signal.SIGSEGV:
        return "crashed (SIGSEGV, e.g. the memory limit hit native code)"
    return f"signal {signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else sig}"


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run_generator(
    code: str,
    seeds: list[int],
    *,
    target: dict[str, Any],
    difficulty: int = 1,
    limits: SandboxConfig | None = None,
    capability: str = "",
    exclude: dict[str, list[str]] | None = None,
    seccomp: bool = True,
) -> SandboxResult:
    """Run `generate(seed, api)` of `code` for every seed in the sandbox (`SandboxUnavailable` when it cannot be
    had). `seccomp=False` leaves the filter off so tests can check the namespaces alone."""
    limits = limits or SandboxConfig()
    bwrap = require_isolation(limits)
    started = time.monotonic()
    result = SandboxResult(privileges="uid 65534 in new user/mount/pid/net namespaces" + (", seccomp" * seccomp))
    job_dir = Path(tempfile.mkdtemp(prefix="trace-rl-sandbox-"))
    try:
        (job_dir / SANDBOX_CODE_FILE).write_text(code)
        job = {
            "seeds": [int(s) for s in seeds],
            "target": _stage_target(target, job_dir, exclude or {}),
            "difficulty": difficulty,
            "capability": capability,  # no `exclude`: those are test-split ids; the staged DB already lacks them
            "seccomp": seccomp,
        }
        (job_dir / SANDBOX_JOB_FILE).write_text(json.dumps(job, default=str))
        argv = [sys.executable, "-s", "-P", "-m", "trace_rl.envs.synthetic._sandbox_child", JOB_MOUNT]
        reader = ResultReader(set(job["seeds"]), result)
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(
                bwrap_command(bwrap, job_dir, limits, argv),
                env={"PATH": CHILD_ENV["PATH"]},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                preexec_fn=_limits(limits),
                start_new_session=True,
                close_fds=True,
            )
            try:
                wall_hit = collect(proc, reader, started + limits.wall_s)
            finally:
                _kill(proc)
                assert proc.stdout is not None
                proc.stdout.close()
            result.stderr_tail = _tail(err)
        result.returncode = proc.returncode if not wall_hit else -signal.SIGKILL
        result.killed = "result-size limit" if reader.overflow else _killed_reason(result.returncode, wall_hit)
        if result.returncode not in (0, None) and result.fatal is None and result.killed is None:
            result.fatal = f"exit status {result.returncode}: {result.stderr_tail.strip()[-300:]}"
        if result.fatal is None and result.killed is None and not result.done:
            result.fatal = "the child stopped before reporting every seed"
    finally:
        result.wall_s = time.monotonic() - started
        shutil.rmtree(job_dir, ignore_errors=True)
    return result


def _tail(fh: IO[bytes], n: int = 2000) -> str:
    fh.seek(0, os.SEEK_END)
    size = fh.tell()
    fh.seek(max(0, size - n))
    return fh.read().decode(errors="replace")


__all__ = [
    "MAX_LINE_BYTES",
    "MAX_RESULT_BYTES",
    "SandboxResult",
    "SandboxUnavailable",
    "bwrap_binary",
    "isolation_problem",
    "require_isolation",
    "run_generator",
]
