"""The sandbox child: load the environment API, lock the process down with seccomp, run `generate(seed, api)`.

Run only by `sandbox.run_generator`, inside bubblewrap, as
`python -s -P -m trace_rl.envs.synthetic._sandbox_child /job` (namespaces, read-only mounts, the tmpfs quota and the
resource limits are already in place). It reads `/job/job.json` and `/job/generator.py` and writes one JSON line per
seed (`{"seed", "task"|"error"}`), per reported refusal (`{"blocked"}`), on a fatal error (`{"fatal"}`) and at the
end (`{"done"}`) to the pipe it got as stdout; its own fd 1 is then pointed at stderr, so `print` in a generator does
not reach the channel.

The seccomp filter is a classic BPF program written here (x86_64 only; other architectures make `install_filter`
fail and the parent refuse): after it is installed, process creation (fork, vfork, clone without CLONE_THREAD,
clone3, execve, execveat), sockets, ptrace and cross-process memory access, mounts and namespaces, keyrings, bpf,
perf events, userfaultfd, io_uring, module and kexec loading, handle-based opens and rlimit changes fail with EPERM
(clone3 with ENOSYS, so libc falls back to clone) and the x32 ABI kills the process. A filter cannot be removed, so
nothing the generator does in Python (ctypes included) undoes it. The audit hook that follows is only a reporter:
it records attempts at network, process and native-code events for the author's feedback; the boundary is the
operating system.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import sys
import traceback
from pathlib import Path
from typing import Any

from trace_rl.artifacts.layout import SANDBOX_CODE_FILE, SANDBOX_JOB_FILE

MAX_TASK_BYTES = 4 << 20  # one seed's JSON line, at most (the parent applies the same cap)

# -- seccomp (linux/seccomp.h, linux/filter.h, linux/audit.h) ----------------------------------------------------
AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
CLONE_THREAD = 0x00010000
RET_KILL_PROCESS = 0x80000000
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
EPERM, ENOSYS = 1, 38
LD_ABS_W, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
# x86_64 syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl), checked against libseccomp by the tests
DENY_X86_64 = {
    "socket": 41, "socketpair": 53, "fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "ptrace": 101,
    "process_vm_readv": 310, "process_vm_writev": 311, "mount": 165, "umount2": 166, "pivot_root": 155,
    "chroot": 161, "unshare": 272, "setns": 308, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321,
    "perf_event_open": 298, "userfaultfd": 323, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
    "finit_module": 313, "delete_module": 176, "setrlimit": 160, "prlimit64": 302, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "name_to_handle_at": 303, "open_by_handle_at": 304,
    "personality": 135, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "mount_setattr": 442, "acct": 163, "swapon": 167, "swapoff": 168, "reboot": 169,
}  # fmt: skip  # data: packed, not one key per line
CLONE_X86_64, CLONE3_X86_64 = 56, 435


def _insn(code: int, jt: int, jf: int, k: int) -> tuple[int, int, int, int]:
    return (code, jt, jf, k)


def bpf_program() -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions: arch check, x32 check, deny list, clone flags."""
    deny = sorted(DENY_X86_64.values())
    prog = [
        _insn(LD_ABS_W, 0, 0, 4),  # seccomp_data.arch
        _insn(JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        _insn(RET_K, 0, 0, RET_KILL_PROCESS),
        _insn(LD_ABS_W, 0, 0, 0),  # seccomp_data.nr
        _insn(JGE_K, 0, 1, X32_SYSCALL_BIT),
        _insn(RET_K, 0, 0, RET_KILL_PROCESS),
    ]
    n = len(deny)
    # every deny entry jumps over the rest of the list and the clone checks to the EPERM return
    for i, nr in enumerate(deny):
        prog.append(_insn(JEQ_K, (n - i - 1) + 4, 0, nr))
    prog += [
        _insn(JEQ_K, 4, 0, CLONE3_X86_64),  # -> ENOSYS
        _insn(JEQ_K, 0, 4, CLONE_X86_64),  # not clone -> allow
        _insn(LD_ABS_W, 0, 0, 16),  # low 32 bits of args[0] (clone flags)
        _insn(JSET_K, 2, 0, CLONE_THREAD),  # a thread -> allow
        _insn(RET_K, 0, 0, RET_ERRNO | EPERM),  # a denied call, or clone of a new process
        _insn(RET_K, 0, 0, RET_ERRNO | ENOSYS),
        _insn(RET_K, 0, 0, RET_ALLOW),
    ]
    return prog


def install_filter() -> None:
    """Install the seccomp filter on this process (irrevocable); OSError when the kernel or architecture refuses."""
    machine = platform.machine()
    if sys.platform != "linux" or machine not in ("x86_64", "AMD64"):
        raise OSError(f"seccomp filter: unsupported platform {sys.platform}/{machine} (x86_64 Linux only)")

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    prog = bpf_program()
    array = (SockFilter * len(prog))(*[SockFilter(*insn) for insn in prog])
    fprog = SockFprog(len(prog), array)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")


# -- reporting audit hook --------------------------------------------------------------------------------------------
REPORTED = (
    "socket.", "subprocess.", "os.exec", "os.spawn", "os.posix_spawn", "os.fork", "os.forkpty", "pty.",
    "os.system", "ctypes.", "resource.setrlimit", "resource.prlimit", "urllib.Request", "http.client.",
)  # fmt: skip  # word list: packed, not one per line


class Reporter:
    """Audit hook (PEP 578): records an attempt at a reported event and raises PermissionError. Not a boundary:
    code that switches it off still meets the seccomp filter and the namespaces."""

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        self.armed = False

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if self.armed and event.startswith(REPORTED):
            self.armed = False  # writing the record must not re-enter
            try:
                send(self.channel, {"blocked": f"{event} (network, processes and native code are blocked)"})
            finally:
                self.armed = True
            raise PermissionError(f"sandbox: {event} is not allowed")


def send(channel: Any, record: dict[str, Any]) -> None:
    channel.write(json.dumps(record) + "\n")
    channel.flush()


def _open_channel() -> Any:
    """The result pipe (fd 1 from the parent), moved to a new fd; fd 1 and sys.stdout then go to stderr."""
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(fd, "w", buffering=1)


def main(job_dir: str) -> int:
    channel = _open_channel()
    try:
        job = json.loads((Path(job_dir) / SANDBOX_JOB_FILE).read_text())
        code = (Path(job_dir) / SANDBOX_CODE_FILE).read_text()
        from trace_rl.envs.synthetic.gen_api import GeneratorAPI

        api = GeneratorAPI(job["target"], difficulty=job.get("difficulty", 1))
        api.warm_up()
        import collections  # noqa: F401 - preload what generators commonly import
        import datetime  # noqa: F401
        import decimal  # noqa: F401
        import fractions  # noqa: F401
        import itertools  # noqa: F401
        import math  # noqa: F401
        import statistics  # noqa: F401
        import string  # noqa: F401

        if job.get("seccomp", True):
            install_filter()
    except Exception as exc:
        send(channel, {"fatal": f"sandbox setup failed: {exc!r}"})
        return 2

    reporter = Reporter(channel)
    sys.addaudithook(reporter)
    reporter.armed = True
    namespace: dict[str, Any] = {"__name__": "generator", "__builtins__": __builtins__}
    try:
        exec(compile(code, SANDBOX_CODE_FILE, "exec"), namespace)
        generate = namespace.get("generate")
        if not callable(generate):
            raise TypeError("the code defines no function generate(seed, api)")
    except BaseException as exc:
        send(channel, {"fatal": f"loading the generator failed: {_short(exc)}"})
        return 0
    for seed in job["seeds"]:
        try:
            line = json.dumps({"seed": seed, "task": generate(int(seed), api)})
        except MemoryError:
            line = json.dumps({"seed": seed, "error": "MemoryError: the memory limit was hit"})
        except BaseException as exc:
            line = json.dumps({"seed": seed, "error": _short(exc)})
        if len(line) > MAX_TASK_BYTES:
            line = json.dumps({"seed": seed, "error": f"result too large ({len(line)} bytes > {MAX_TASK_BYTES})"})
        channel.write(line + "\n")
        channel.flush()
    send(channel, {"done": len(job["seeds"])})
    return 0


def _short(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = next((f"line {f.lineno}" for f in reversed(tb) if f.filename == SANDBOX_CODE_FILE), "")
    text = f"{type(exc).__name__}: {exc}"
    return f"{text} ({where})" if where else text


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
