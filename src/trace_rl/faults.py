"""Deterministic crash points, for the fault-tolerance tests (`tests/faults/`).

`TRACE_RL_FAULT_AT=<event>:<path glob>:<n>` makes the process SIGKILL itself the n-th time it reaches `<event>` for a
file whose path matches the glob (`fnmatch`, `*` crosses `/`). Events, both in `trace_rl.artifacts.store`:

- `append`: a `JsonlStore` append, right after its lines are written and fsynced (the records are on disk, whatever
  comes after them is not);
- `write`: an atomic write, after the temp file is written and fsynced and before it is renamed over the target
  (the kill leaves the old file, or none, and a stray `.<name>.*.tmp`).

Example: `TRACE_RL_FAULT_AT='append:*/rollout/trajectories.jsonl:2'` kills `trace-rl run` right after the second batch
of rollout trajectories is on disk. Counts are per process, so a rerun with another point continues and dies there.
Nothing in trace-rl sets the variable; unset, a fault point costs one environment lookup.
"""

from __future__ import annotations

import fnmatch
import os
import signal
import threading

ENV_VAR = "TRACE_RL_FAULT_AT"
EVENTS = ("append", "write")

_hits: dict[str, int] = {}
_lock = threading.Lock()


def parse(spec: str) -> tuple[str, str, int]:
    """`<event>:<glob>:<n>` -> (event, glob, n); a malformed spec is a ValueError (a test's mistake, said loudly)."""
    event, _, rest = spec.partition(":")
    pattern, _, count = rest.rpartition(":")
    if event not in EVENTS or not pattern or not count.isdigit() or int(count) < 1:
        raise ValueError(f"{ENV_VAR}={spec!r}: expected <{'|'.join(EVENTS)}>:<path glob>:<n ≥ 1>")
    return event, pattern, int(count)


def fault_point(event: str, path: os.PathLike[str] | str) -> None:
    """SIGKILL this process when `TRACE_RL_FAULT_AT` names this event and path and this is its n-th hit."""
    spec = os.environ.get(ENV_VAR)
    if not spec:
        return
    want, pattern, count = parse(spec)
    if event != want or not fnmatch.fnmatchcase(str(path), pattern):
        return
    with _lock:
        _hits[spec] = hit = _hits.get(spec, 0) + 1
    if hit == count:
        os.kill(os.getpid(), signal.SIGKILL)
