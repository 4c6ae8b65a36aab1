"""The generator sandbox's result channel: the pipe the child writes one JSON record per line to, read by the parent.

The parent accepts one record per seed it asked for (`{"seed", "task"|"error"}`), each line at most `MAX_LINE_BYTES`
(a longer one is dropped and the lines after it are still read) and `MAX_RESULT_BYTES` in all. A record for a seed
that was not asked for, a second record for a seed, an unreadable line or an object of no known kind cannot come
from the child's harness: it is reported as `blocked` ("result channel: ...", the generator wrote to the channel),
a seed with two records loses its task, and none of it ever becomes a task or an exception.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from trace_rl.envs.synthetic._sandbox_child import MAX_TASK_BYTES

MAX_RESULT_BYTES = 64 << 20
MAX_LINE_BYTES = MAX_TASK_BYTES + 4096


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
    done: bool = False

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


class ResultReader:
    """Reads the result pipe: whole lines of at most MAX_LINE_BYTES, MAX_RESULT_BYTES in all."""

    def __init__(self, wanted: set[int], result: SandboxResult) -> None:
        self.wanted, self.result = wanted, result
        self.buf = bytearray()
        self.skipping = False
        self.total = 0
        self.seen: set[int] = set()
        self.forged = 0
        self.overflow = False

    def feed(self, chunk: bytes) -> bool:
        """False once the total cap is passed."""
        self.total += len(chunk)
        if self.total > MAX_RESULT_BYTES:
            self.overflow = True
            self.result.fatal = f"result larger than {MAX_RESULT_BYTES >> 20} MiB"
            return False
        *lines, rest = chunk.split(b"\n")
        for piece in lines:
            if self.skipping:
                self.skipping = False  # the end of a line already dropped
            elif len(self.buf) + len(piece) > MAX_LINE_BYTES:
                self.note(f"a result line over {MAX_LINE_BYTES} bytes was dropped")
            else:
                self.buf += piece
                self.record(bytes(self.buf))
            self.buf.clear()
        if not self.skipping:
            self.buf += rest
            if len(self.buf) > MAX_LINE_BYTES:
                self.note(f"a result line over {MAX_LINE_BYTES} bytes was dropped")
                self.buf.clear()
                self.skipping = True
        return True

    def note(self, what: str) -> None:
        self.forged += 1
        if self.forged <= 20:
            self.result.blocked.append(f"result channel: {what} (records the sandbox did not write)")

    def record(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            record = json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError):
            self.note("an unreadable line")
            return
        result = self.result
        if not isinstance(record, dict):
            self.note("a line that is not an object")
        elif "blocked" in record:
            result.blocked.append(str(record["blocked"])[:500])
        elif "fatal" in record:
            result.fatal = str(record["fatal"])[:2000]
        elif "done" in record:
            result.done = True
        elif "seed" in record:
            seed = record["seed"]
            if type(seed) is not int or seed not in self.wanted:
                self.note(f"a record for seed {str(seed)[:40]}, which was not asked for")
            elif seed in self.seen:
                self.note(f"a second record for seed {seed}")
                result.tasks.pop(seed, None)
                result.errors[seed] = "more than one result for this seed: the generator wrote to the result channel"
            else:
                self.seen.add(seed)
                if isinstance(record.get("task"), dict):
                    result.tasks[seed] = record["task"]
                else:
                    result.errors[seed] = str(record.get("error", "no task"))[:2000]
        else:
            self.note("a record of no known kind")


def collect(proc: subprocess.Popen[bytes], reader: ResultReader, deadline: float) -> bool:
    """Read the pipe until EOF, the deadline or the size cap (the process group is then killed at once); True when
    the wall-clock limit was hit."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            if not sel.select(timeout=left):
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            if not reader.feed(chunk):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                break
    try:
        proc.wait(timeout=max(0.5, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return True
    return False


__all__ = ["MAX_LINE_BYTES", "MAX_RESULT_BYTES", "ResultReader", "SandboxResult", "collect"]
