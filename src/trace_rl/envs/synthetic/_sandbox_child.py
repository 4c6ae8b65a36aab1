"""The sandbox child: load the environment API, arm the guards, run `generate(seed, api)` per seed.

Run only by `sandbox.run_generator` as `python -s -P -m trace_rl.envs.synthetic._sandbox_child <tmp>` (resource limits
are already set by the parent). Output: `<tmp>/result.jsonl`, one line per seed, per refusal and per fatal error.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import sysconfig
import traceback
from pathlib import Path
from typing import Any

from trace_rl.artifacts.layout import SANDBOX_CODE_FILE, SANDBOX_JOB_FILE, SANDBOX_RESULT_FILE

CODE_SUFFIXES = (".py", ".pyc", ".so", ".pyd")
BLOCKED_PREFIXES = (
    "socket.", "ctypes.", "subprocess.", "os.exec", "os.spawn", "os.posix_spawn", "os.fork", "os.forkpty", "pty.",
    "os.system", "os.kill", "os.killpg", "signal.pthread_kill", "resource.setrlimit", "resource.prlimit",
    "sys.addaudithook", "gc.get_objects", "gc.get_referrers", "gc.get_referents", "urllib.Request",
    "http.client.", "ftplib.", "smtplib.", "poplib.", "imaplib.", "nntplib.", "telnetlib.", "webbrowser.",
    "winreg.", "_winapi.", "msvcrt.", "os.startfile", "sys.remote_exec",
)  # fmt: skip  # word list: packed, not one per line
# event -> index of the path argument that must stay inside the temp dir (-1: always allowed)
PATH_EVENTS = {
    "os.remove": 0, "os.rename": 0, "os.replace": 0, "os.rmdir": 0, "os.mkdir": 0, "os.link": 0, "os.symlink": 0,
    "os.truncate": 0, "os.chmod": 0, "os.chown": 0, "os.utime": 0, "os.chdir": 0, "os.chroot": 0, "os.mkfifo": 0,
    "os.mknod": 0, "shutil.copyfile": 1, "shutil.copymode": 1, "shutil.copystat": 1, "shutil.copytree": 1,
    "shutil.move": 1, "shutil.rmtree": 0, "shutil.chown": 0, "shutil.make_archive": 0, "shutil.unpack_archive": 1,
    "tempfile.mkstemp": -1, "tempfile.mkdtemp": -1,
}  # fmt: skip  # data: packed, not one key per line


class Guard:
    """The audit hook: refusals are recorded (written to the result file) and raise PermissionError."""

    def __init__(self, tmp: Path, out: Any) -> None:
        self.tmp = os.path.realpath(tmp)
        self.out = out
        roots = {sys.prefix, sys.base_prefix, sys.exec_prefix}
        for key in ("stdlib", "platstdlib", "purelib", "platlib"):
            path = sysconfig.get_paths().get(key)
            if path:
                roots.add(path)
        roots.update(p for p in sys.path if p and os.path.isdir(p) and os.path.realpath(p) != self.tmp)
        self.read_roots = tuple(sorted({os.path.realpath(r) for r in roots}))
        self.armed = False
        self.busy = False

    def inside(self, path: Any, roots: tuple[str, ...]) -> bool:
        try:
            real = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots)

    def refuse(self, what: str) -> None:
        try:
            self.out.write(json.dumps({"blocked": what}) + "\n")
            self.out.flush()
        except Exception:
            pass
        raise PermissionError(f"sandbox: {what} is not allowed")

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.armed or self.busy:
            return
        self.busy = True
        try:
            self.check(event, args)
        finally:
            self.busy = False

    def check(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, mode, flags = [*args, None, None, None][:3]
            if path is None or isinstance(path, int):
                return
            writing = bool(mode and any(c in str(mode) for c in "wax+")) or bool(
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC)
            )
            if self.inside(path, (self.tmp,)):
                return
            if not writing and str(path).endswith(CODE_SUFFIXES) and self.inside(path, self.read_roots):
                return
            self.refuse(f"{'writing' if writing else 'reading'} {os.fsdecode(path)} (outside the sandbox directory)")
        if event.startswith(BLOCKED_PREFIXES):
            self.refuse(f"{event} (network, processes and native code are blocked)")
        index = PATH_EVENTS.get(event)
        if index is not None and index >= 0:
            paths = [args[index]] if event != "os.rename" and event != "os.replace" else list(args[:2])
            for path in paths:
                if isinstance(path, int) or not self.inside(path, (self.tmp,)):
                    self.refuse(f"{event} on {path!r} (outside the sandbox directory)")


def _disable_network(guard: Guard) -> None:
    """Replace the socket module's constructors (the audit hook refuses the rest, `_socket` included)."""

    class BlockedSocket(socket.socket):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            guard.refuse("socket creation (network access)")

    def blocked(*args: Any, **kwargs: Any) -> Any:
        guard.refuse("network access")

    socket.socket = BlockedSocket  # type: ignore[misc]
    for name in ("create_connection", "create_server", "socketpair", "fromfd", "getaddrinfo", "gethostbyname"):
        setattr(socket, name, blocked)


def main(tmp_arg: str) -> int:
    tmp = Path(tmp_arg)
    out = open(tmp / SANDBOX_RESULT_FILE, "a", buffering=1)  # noqa: SIM115 - kept open across the guarded phase
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write raises OSError instead of killing
    try:
        job = json.loads((tmp / SANDBOX_JOB_FILE).read_text())
        code = (tmp / SANDBOX_CODE_FILE).read_text()
        from trace_rl.envs.synthetic.gen_api import GeneratorAPI

        api = GeneratorAPI(job["target"], difficulty=job.get("difficulty", 1), exclude=job.get("exclude"))
        api.warm_up()
        import collections  # noqa: F401 - preload what generators commonly import
        import datetime  # noqa: F401
        import decimal  # noqa: F401
        import fractions  # noqa: F401
        import itertools  # noqa: F401
        import math  # noqa: F401
        import statistics  # noqa: F401
        import string  # noqa: F401
    except Exception as exc:
        out.write(json.dumps({"fatal": f"sandbox setup failed: {exc!r}"}) + "\n")
        return 2

    guard = Guard(tmp, out)
    sys.addaudithook(guard)
    _disable_network(guard)
    guard.armed = True

    namespace: dict[str, Any] = {"__name__": "generator", "__builtins__": __builtins__}
    try:
        exec(compile(code, SANDBOX_CODE_FILE, "exec"), namespace)
        generate = namespace.get("generate")
        if not callable(generate):
            raise TypeError("the code defines no function generate(seed, api)")
    except BaseException as exc:
        out.write(json.dumps({"fatal": f"loading the generator failed: {_short(exc)}"}) + "\n")
        return 0
    for seed in job["seeds"]:
        try:
            task = generate(int(seed), api)
            line = json.dumps({"seed": seed, "task": task})
        except MemoryError:
            line = json.dumps({"seed": seed, "error": "MemoryError: the memory limit was hit"})
        except BaseException as exc:
            line = json.dumps({"seed": seed, "error": _short(exc)})
        try:
            out.write(line + "\n")
        except OSError as exc:
            out.write(json.dumps({"seed": seed, "error": f"result too large: {exc}"}) + "\n")
    return 0


def _short(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = next((f"line {f.lineno}" for f in reversed(tb) if f.filename == SANDBOX_CODE_FILE), "")
    text = f"{type(exc).__name__}: {exc}"
    return f"{text} ({where})" if where else text


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
