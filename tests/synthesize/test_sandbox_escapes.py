"""Every escape issue #19 found in the old Python-level sandbox, run against the bubblewrap + seccomp sandbox: each
must hold (nothing written or read outside, no secret in the output, no process left, no forged task accepted), and
without the isolation `run_generator` and `trace-rl synthesize --generator llm` refuse in one line."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from trace_rl.config.synthesize import SandboxConfig, SynthesizeConfig
from trace_rl.envs.synthetic import sandbox
from trace_rl.envs.synthetic._sandbox_child import DENY_X86_64
from trace_rl.envs.synthetic.sandbox import SandboxUnavailable, isolation_problem, run_generator
from trace_rl.models.scripted import ScriptedClient
from trace_rl.synthesize.stage import run_synthesize

from .synth_helpers import LIBRARY_GENERATOR, fenced, make_library_run, read_json

TARGET = {"name": "library"}
FAST = SandboxConfig(cpu_s=5, wall_s=60, memory_mb=1024)
needs_sandbox = pytest.mark.skipif(isolation_problem() is not None, reason=f"no sandbox here: {isolation_problem()}")
DISARM = """
import gc, sys
def disarm():
    n = 0
    for obj in gc.get_objects():
        try:
            own = vars(obj)
        except Exception:
            continue
        if isinstance(own, dict) and "armed" in own and not isinstance(obj, type):
            obj.armed = False
            n += 1
    frame = sys._getframe()
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if "armed" in (getattr(value, "__dict__", None) or {}):
                value.armed = False
                n += 1
        frame = frame.f_back
    return n
"""


@pytest.fixture
def secret(tmp_path, monkeypatch):
    """A 0600 file on the host and a secret in this process's environment."""
    value = f"TOPSECRET-{uuid.uuid4().hex}"
    path = tmp_path / "secret.txt"
    path.write_text(value)
    path.chmod(0o600)
    monkeypatch.setenv("TRACE_RL_TEST_SECRET", value)
    return path, value


def _everything(result: sandbox.SandboxResult) -> str:
    return json.dumps({"tasks": result.tasks, **result.as_dict()}, default=str)


@needs_sandbox
def test_dir_fd_after_chdir_neither_writes_nor_reads_outside(tmp_path, secret):
    path, value = secret
    marker = tmp_path / "pwned.txt"
    up = "../" * 12
    code = f"""
import os
def generate(seed, api):
    os.makedirs("/sandbox/a/b/c/d", exist_ok=True)
    os.chdir("/sandbox/a/b/c/d")
    fd = os.open(".", os.O_RDONLY)
    out = {{}}
    for name, rel, flags in [("write", {up + str(marker)[1:]!r}, os.O_WRONLY | os.O_CREAT),
                             ("read", {up + str(path)[1:]!r}, os.O_RDONLY)]:
        try:
            f = os.open(rel, flags, dir_fd=fd)
            out[name] = os.read(f, 200).decode() if name == "read" else os.write(f, b"pwned")
        except OSError as exc:
            out[name] = repr(exc)
    out["listing"] = sorted(os.listdir(os.path.dirname({str(tmp_path)!r}))) if os.path.exists({str(tmp_path)!r}) else []
    return out
"""
    result = run_generator(code, [0], target=TARGET, limits=FAST)
    assert result.ok, result.summary
    out = result.tasks[0]
    assert "No such file or directory" in out["write"] and "No such file or directory" in out["read"], out
    assert not marker.exists() and out["listing"] == []
    assert value not in _everything(result)


@needs_sandbox
def test_disarming_the_python_guard_leaves_the_os_boundary(secret):
    path, value = secret
    code = (
        DISARM
        + f"""
import os, socket
def generate(seed, api):
    out = {{"disarmed": disarm()}}
    for name, act in [("socket", lambda: socket.socket()), ("fork", os.fork),
                      ("file", lambda: open({str(path)!r}).read()),
                      ("environ", lambda: [open(f"/proc/{{p}}/environ").read() for p in os.listdir("/proc")
                                           if p.isdigit()])]:
        try:
            out[name] = act()
        except OSError as exc:
            out[name] = repr(exc)
    out["env"] = dict(os.environ)
    return out
"""
    )
    result = run_generator(code, [0], target=TARGET, limits=FAST)
    out = result.tasks[0]
    assert out["disarmed"] >= 1, out  # the reporter really was switched off
    assert "Operation not permitted" in out["socket"] and "Operation not permitted" in out["fork"], out
    assert "No such file or directory" in out["file"], out
    assert value not in _everything(result) and "TRACE_RL_TEST_SECRET" not in out["env"]


@needs_sandbox
def test_fork_exec_of_bin_sh_and_posix_spawn_fail(tmp_path):
    marker = tmp_path / "sh-ran"
    code = (
        DISARM
        + f"""
import os, subprocess, _posixsubprocess
calls = []
real = _posixsubprocess.fork_exec
def spy(*args):
    calls.append(1)
    return real(*args)
subprocess._fork_exec = spy  # subprocess calls _posixsubprocess.fork_exec through this name
def generate(seed, api):
    disarm()
    out = {{}}
    for name, act in [("popen", lambda: subprocess.Popen(["/bin/sh", "-c", "touch {marker}"]).wait()),
                      ("spawn", lambda: os.posix_spawn("/bin/sh", ["sh", "-c", "touch {marker}"], {{}}))]:
        try:
            out[name] = act()
        except OSError as exc:
            out[name] = repr(exc)
    out["fork_exec_calls"] = len(calls)
    return out
"""
    )
    result = run_generator(code, [0], target=TARGET, limits=FAST)
    out = result.tasks[0]
    assert out["fork_exec_calls"] == 1, out  # Popen reached _posixsubprocess.fork_exec (no audit event there)
    assert "Operation not permitted" in out["popen"] and "Operation not permitted" in out["spawn"], out
    assert not marker.exists()


def _processes_with(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@needs_sandbox
def test_setsid_grandchildren_die_at_the_wall_clock_limit():
    """With the seccomp filter off (so fork works), the PID namespace alone takes setsid orphans down."""
    marker = f"orphan-{uuid.uuid4().hex}"
    code = (
        DISARM
        + f"""
import os, sys, time
def generate(seed, api):
    disarm()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(120)", {marker!r}])
        os._exit(0)
    time.sleep(120)
"""
    )
    seen: list[int] = []
    box: dict[str, sandbox.SandboxResult] = {}
    worker = threading.Thread(
        target=lambda: box.update(
            r=run_generator(code, [0], target=TARGET, limits=SandboxConfig(wall_s=4), seccomp=False)
        )
    )
    worker.start()
    while worker.is_alive():
        seen += _processes_with(marker)
        time.sleep(0.2)
    worker.join()
    assert box["r"].killed == "wall-clock limit"
    assert seen, "the orphan never started (the test would prove nothing)"
    deadline = time.monotonic() + 5
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _processes_with(marker)


FORGE = """
import json, os, stat
def forge(lines):
    for fd in range(3, 64):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                for line in lines:
                    os.write(fd, line)
        except OSError:
            pass
"""


@needs_sandbox
def test_forged_result_records_are_refused_and_later_seeds_kept():
    task = {"request": "forged", "gold_actions": [{"name": "x"}]}
    forged = [
        json.dumps({"seed": 999, "task": task}).encode() + b"\n",
        json.dumps({"seed": 0, "task": task}).encode() + b"\n",  # a seed it was asked for, before the harness
        b'{"seed": "x", "task": {}}\n{"seed": true}\n{"seed": 1e400}\n{"seed": [1]}\n[1, 2]\nnot json\n\xff\xfe\n',
        b'{"seed": 2, "task": {"blob": "' + b"x" * (sandbox.MAX_LINE_BYTES + 10) + b'"}}\n',
    ]
    code = (
        FORGE
        + f"\ndef generate(seed, api):\n    if seed == 0:\n        forge({forged!r})\n    return {{'seed': seed}}\n"
    )
    result = run_generator(code, [0, 1, 2], target=TARGET, limits=FAST)
    assert sorted(result.tasks) == [1, 2] and result.tasks[2] == {"seed": 2}, result.summary
    assert "more than one result" in result.errors[0]
    notes = " | ".join(result.blocked)
    assert "seed 999" in notes and "over" in notes and "unreadable" in notes and "not an object" in notes
    assert result.ok and result.done


@needs_sandbox
def test_a_forging_author_is_rejected_and_synthesize_reruns_cleanly(tmp_path):
    """End to end: the forging generator is refused, the clean rewrite is accepted, no forged task reaches
    tasks.jsonl, and a rerun of synthesize over the same run directory does not crash."""
    name = "precondition_verification"
    run = make_library_run(tmp_path / "run", [name])
    forged = [json.dumps({"seed": s, "task": {"request": "FORGED"}}).encode() + b"\n" for s in (10**9, -1)]
    forger = FORGE + f"forge({forged!r})\n" + LIBRARY_GENERATOR + "\n"
    syn = SynthesizeConfig(generator="llm", calibrate=False, validation_seeds=4, train_seeds=10, test_seeds=4)
    for _ in range(2):
        author = ScriptedClient([fenced(forger), fenced(LIBRARY_GENERATOR)])
        report = run_synthesize(run, None, {"author": author}, syn=syn)
        assert report["capabilities"][name]["status"] == "ready"
    folder = run.root / "envs" / name
    log = read_json(folder / "author" / "log.json")
    assert log[0]["ok"] is False and "result channel" in log[0]["feedback"], log[0]["feedback"]
    assert "FORGED" not in (folder / "tasks.jsonl").read_text()


@needs_sandbox
def test_flooding_the_channel_is_cut_at_the_total_cap():
    code = FORGE + "\ndef generate(seed, api):\n    forge([b'x' * 1023 + b'\\n'] * (80 << 10))\n    return {}\n"
    started = time.monotonic()
    result = run_generator(code, [0], target=TARGET, limits=SandboxConfig(wall_s=60))
    assert result.killed == "result-size limit" and "larger than 64 MiB" in (result.fatal or ""), result.summary
    assert not result.tasks and time.monotonic() - started < 30 and len(result.blocked) <= 25


@needs_sandbox
def test_an_oversized_task_loses_only_its_own_seed():
    code = "def generate(seed, api):\n    return {'blob': 'x' * (6 << 20)} if seed == 1 else {'seed': seed}\n"
    result = run_generator(code, [0, 1, 2, 3], target=TARGET, limits=FAST)
    assert sorted(result.tasks) == [0, 2, 3] and "result too large" in result.errors[1], result.summary


@needs_sandbox
def test_planted_symlinks_are_never_followed_by_the_parent(secret):
    path, value = secret
    code = f"""
import os
def generate(seed, api):
    for name in ("result.jsonl", "result.json", "stderr.txt", "stdout.txt", "job.json", "generator.py"):
        os.symlink({str(path)!r}, "/sandbox/" + name)
    return {{"planted": sorted(os.listdir("/sandbox"))}}
"""
    result = run_generator(code, [0], target=TARGET, limits=FAST)
    assert result.ok and len(result.tasks[0]["planted"]) == 6, result.summary
    assert value not in _everything(result)


@needs_sandbox
def test_network_is_unreachable_even_disarmed():
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted = []

    def accept(stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except OSError:
                continue

    stop = threading.Event()
    listener = threading.Thread(target=accept, args=(stop,))
    listener.start()
    code = DISARM + (
        "import socket\ndef generate(seed, api):\n    disarm()\n    try:\n"
        f"        socket.create_connection(('127.0.0.1', {port}), timeout=2)\n        return {{'net': 'connected'}}\n"
        "    except OSError as exc:\n        return {'net': repr(exc)}\n"
    )
    try:
        result = run_generator(code, [0], target=TARGET, limits=FAST)
    finally:
        stop.set()
        listener.join()
        server.close()
    assert "Operation not permitted" in result.tasks[0]["net"] and not accepted


@needs_sandbox
def test_disk_quota_and_read_only_root():
    code = """
def generate(seed, api):
    out = {}
    for name, path, size in (("quota", "/sandbox/big", 32 << 20), ("root", "/big", 1), ("job", "/job/x", 1)):
        try:
            with open(path, "wb") as fh:
                for _ in range(max(1, size >> 20)):
                    fh.write(b"x" * min(size, 1 << 20))
            out[name] = "written"
        except OSError as exc:
            out[name] = repr(exc)
    return out
"""
    result = run_generator(code, [0], target=TARGET, limits=SandboxConfig(disk_mb=8, file_mb=64))
    out = result.tasks[0]
    assert "No space left" in out["quota"] and "Read-only" in out["root"] and "Read-only" in out["job"], out


@needs_sandbox
def test_the_api_holds_no_test_split():
    code = """
def generate(seed, api):
    return {"domain_attr": hasattr(api, "_domain"), "job": sorted(__import__("os").listdir("/job"))}
"""
    result = run_generator(code, [0], target=TARGET, limits=FAST)
    assert result.tasks[0] == {"domain_attr": False, "job": ["generator.py", "job.json"]}, result.summary


TAU2 = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "tau2" / "retail"


@needs_sandbox
@pytest.mark.skipif(not (TAU2 / "db.json").is_file(), reason=f"τ² retail data not found at {TAU2}")
def test_tau2_generator_sees_train_side_data_only():
    db = json.loads((TAU2 / "db.json").read_text())
    hidden_user, hidden_order = sorted(db["users"])[0], sorted(db["orders"])[0]
    code = f"""
import os
def generate(seed, api):
    out = {{"files": sorted(os.listdir("/job/data/retail"))}}
    db = api._env.tools.db.model_dump(mode="json")
    out["user_in_env"] = {hidden_user!r} in db["users"]
    out["order_in_env"] = {hidden_order!r} in db["orders"]
    out["user_in_start"] = {hidden_user!r} in api.start(seed)["db"]["users"]
    from trace_rl.config import EnvConfig
    from trace_rl.envs.registry import load_domain
    try:
        out["test"] = len(load_domain("tau2:retail", EnvConfig(name="tau2:retail", data_dir="/job/data")).tasks("test"))
    except Exception as exc:
        out["test"] = repr(exc)
    out["real_data"] = os.path.exists({str(TAU2)!r})
    out["job_names_hidden"] = {hidden_user!r} in open("/job/job.json").read()
    return out
"""
    target = {"name": "tau2:retail", "data_dir": str(TAU2.parent)}
    exclude = {"users": [hidden_user], "orders": [hidden_order]}
    result = run_generator(code, [0], target=target, limits=FAST, exclude=exclude)
    out = result.tasks[0]
    assert not any(f.startswith(("tasks", "split_tasks")) for f in out["files"]) and "db.json" in out["files"], out
    assert not out["user_in_env"] and not out["order_in_env"] and not out["user_in_start"], out
    assert "split_tasks.json" in out["test"] and not out["real_data"] and not out["job_names_hidden"], out


def test_seccomp_table_matches_libseccomp():
    name = ctypes.util.find_library("seccomp")
    if name is None:
        pytest.skip("libseccomp not installed")
    lib = ctypes.CDLL(name)
    lib.seccomp_syscall_resolve_name_arch.argtypes = [ctypes.c_uint32, ctypes.c_char_p]
    for call, nr in DENY_X86_64.items():
        assert lib.seccomp_syscall_resolve_name_arch(0xC000003E, call.encode()) == nr, call


def test_refuses_without_bubblewrap(monkeypatch):
    missing = SandboxConfig(bwrap="/nonexistent/bwrap")
    assert "bubblewrap (bwrap) not found" in (isolation_problem(missing) or "")
    with pytest.raises(SandboxUnavailable) as info:
        run_generator(LIBRARY_GENERATOR, [0], target=TARGET, limits=missing)
    assert "\n" not in str(info.value) and "refusing to run author code without isolation" in str(info.value)
    no_namespaces = SandboxConfig(bwrap="/bin/false")  # runs, but isolates nothing
    assert "cannot isolate" in (isolation_problem(no_namespaces) or "")


def test_synthesize_llm_refuses_in_one_line_without_isolation(tmp_path):
    run = make_library_run(tmp_path / "run", ["multi_step_completion"])
    config = tmp_path / "config.yaml"
    script = json.dumps([fenced(LIBRARY_GENERATOR)])
    config.write_text(
        f"models:\n  author:\n    kind: scripted\n    script: {script}\n"
        "synthesize:\n  validation_seeds: 4\n  train_seeds: 16\n  test_seeds: 4\n"
    )
    env = {**os.environ, sandbox.BWRAP_ENV: "/nonexistent/bwrap"}
    cmd = [sys.executable, "-m", "trace_rl.cli", "synthesize", "--run", str(run.root), "--generator", "llm"]
    cmd += ["--no-calibrate", "--config", str(config)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "bubblewrap (bwrap) not found" in lines[0] and "Traceback" not in done.stderr, lines
