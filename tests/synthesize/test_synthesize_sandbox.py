"""The sandbox runs author code behind bubblewrap + seccomp: a good generator works; hostile code (network, files
outside its directory, processes, raised limits, infinite loops, sleeping, huge allocations) is stopped and reported,
and this process carries on. The escapes of issue #19 are in test_sandbox_escapes.py."""

from __future__ import annotations

import os

import pytest

from trace_rl.config.synthesize import SandboxConfig
from trace_rl.envs.synthetic.sandbox import isolation_problem, run_generator

from .synth_helpers import LIBRARY_GENERATOR

TARGET = {"name": "library"}
FAST = SandboxConfig(cpu_s=3, wall_s=60, memory_mb=1024)
pytestmark = pytest.mark.skipif(isolation_problem() is not None, reason=f"no sandbox here: {isolation_problem()}")


def test_good_generator_runs_and_is_deterministic():
    a = run_generator(LIBRARY_GENERATOR, [0, 1, 2], target=TARGET, limits=FAST)
    b = run_generator(LIBRARY_GENERATOR, [2], target=TARGET, limits=FAST)
    assert a.ok and not a.errors and not a.blocked, a.summary
    assert sorted(a.tasks) == [0, 1, 2] and a.tasks[2] == b.tasks[2]
    assert a.tasks[0]["gold_actions"][0]["name"] == "find_member_by_email"


# one hostile act per seed, all in one child (each raises in its own seed); the error each must meet
HOSTILE = {
    0: ("socket.create_connection(('93.184.216.34', 80), timeout=2)", "PermissionError"),
    1: ("_socket.socket()", "PermissionError"),
    2: ("urllib.request.urlopen('http://10.0.0.1/', timeout=2)", "PermissionError"),
    3: ("open(MARKER, 'w').write('pwned')", "FileNotFoundError"),  # the host's /tmp is not in the sandbox
    4: ("open(os.path.join(os.getcwd(), '..', os.path.basename(MARKER)), 'w')", "Read-only file system"),
    5: ("open('/etc/hostname').read()", "FileNotFoundError"),
    6: ("os.system('touch ' + MARKER)", "PermissionError"),
    7: ("subprocess.run(['true'])", "PermissionError"),
    8: ("resource.setrlimit(resource.RLIMIT_CPU, (9999, 9999))", "PermissionError"),
    9: ("shutil.rmtree(os.path.dirname(MARKER))", "FileNotFoundError"),
}


def test_hostile_code_is_blocked_and_reported(tmp_path):
    marker = tmp_path / "pwned.txt"
    lines = [
        "import os, shutil, socket, _socket, subprocess, resource, urllib.request",
        f"MARKER = {str(marker)!r}",
        "def generate(seed, api):",
        *[f"    if seed == {seed}:\n        {act}" for seed, (act, _) in HOSTILE.items()],
        "    return {'seed': seed}",
    ]
    result = run_generator("\n".join(lines) + "\n", sorted(HOSTILE), target=TARGET, limits=FAST)
    assert result.ok and not result.tasks, result.summary  # the child finished; every seed was refused
    for seed, (_, expect) in HOSTILE.items():
        assert expect in result.errors[seed], (seed, result.errors[seed])
    assert len(result.blocked) >= 5  # network, process and rlimit attempts are reported for the author's feedback
    assert not marker.exists() and tmp_path.exists() and not os.path.exists(f"/tmp/{marker.name}")


def test_huge_allocation_hits_the_memory_limit():
    code = "def generate(seed, api):\n    blob = bytearray(64 * 1024 ** 3)\n    return {'n': len(blob)}\n"
    result = run_generator(code, [0, 1], target=TARGET, limits=FAST)
    assert result.errors and all("MemoryError" in e for e in result.errors.values()), result.summary
    assert not result.tasks


def test_infinite_loop_hits_the_cpu_limit():
    code = "def generate(seed, api):\n    while True:\n        pass\n"
    result = run_generator(code, [0, 1], target=TARGET, limits=SandboxConfig(cpu_s=1, wall_s=60))
    assert not result.ok and result.killed and "CPU" in result.killed and not result.tasks


def test_sleeping_code_hits_the_wall_clock_limit():
    code = "import time\ndef generate(seed, api):\n    time.sleep(600)\n"
    result = run_generator(code, [0], target=TARGET, limits=SandboxConfig(wall_s=3))
    assert result.killed == "wall-clock limit" and result.wall_s < 30


def test_clean_environment_and_broken_module(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    code = "import os\ndef generate(seed, api):\n    return {'env': sorted(os.environ), 'cwd': os.getcwd()}\n"
    result = run_generator(code, [0], target=TARGET, limits=FAST)
    env, cwd = result.tasks[0]["env"], result.tasks[0]["cwd"]
    assert "OPENAI_API_KEY" not in env and cwd == "/sandbox" and set(env) <= {*SANDBOX_ENV, "LC_CTYPE"}
    broken = run_generator("def generate(seed, api) return 1\n", [0], target=TARGET, limits=FAST)
    assert broken.fatal and "SyntaxError" in broken.fatal


SANDBOX_ENV = {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "OMP_NUM_THREADS"}
SANDBOX_ENV |= {"HF_HUB_OFFLINE", "PWD"}  # PWD: set by bubblewrap's --chdir
