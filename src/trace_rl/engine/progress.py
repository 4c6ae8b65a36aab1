"""Live rollout progress: a rich bar on a terminal, plain log lines otherwise (CI logs, pipes, files).

Shown: episodes done of total, success so far (scored episodes only), completion tokens per second, infra errors,
episodes in flight. The plain form prints a line at most every `interval_s` seconds, plus the first and last.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

from trace_rl.stage import ProgressMode
from trace_rl.types import Trajectory


@dataclass
class ProgressState:
    """Counters of one rollout command (episodes resumed from earlier commands count as `resumed`)."""

    label: str = "rollout"
    total: int = 0
    resumed: int = 0
    done: int = 0
    scored: int = 0
    successes: int = 0
    infra: int = 0
    in_flight: int = 0
    completion_tokens: int = 0
    started: float = field(default_factory=time.perf_counter)

    def record(self, traj: Trajectory) -> None:
        self.done += 1
        self.in_flight = max(0, self.in_flight - 1)
        self.completion_tokens += traj.tokens.completion
        if traj.is_infra_failure:
            self.infra += 1
        else:
            self.scored += 1
            self.successes += bool(traj.success)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.elapsed if self.elapsed > 0 else 0.0

    def stats(self) -> str:
        success = f"{self.successes / self.scored:.1%} ({self.successes}/{self.scored})" if self.scored else "-"
        return (
            f"success {success} · {self.tokens_per_s:,.0f} tok/s · infra errors {self.infra} · "
            f"in flight {self.in_flight}"
        )

    def line(self) -> str:
        mins, secs = divmod(int(self.elapsed), 60)
        return (
            f"[{self.label}] {self.resumed + self.done}/{self.resumed + self.total} episodes "
            f"({self.done} this run) · {self.stats()} · {mins:02d}:{secs:02d}"
        )


class Progress(Protocol):
    state: ProgressState

    def start(self, label: str, total: int, resumed: int) -> None: ...

    def episode_started(self) -> None: ...

    def episode_finished(self, traj: Trajectory) -> None: ...

    def note(self, text: str) -> None: ...

    def close(self) -> None: ...


class NullProgress:
    """Counts, shows nothing."""

    def __init__(self) -> None:
        self.state = ProgressState()

    def start(self, label: str, total: int, resumed: int) -> None:
        self.state = ProgressState(label=label, total=total, resumed=resumed)

    def episode_started(self) -> None:
        self.state.in_flight += 1

    def episode_finished(self, traj: Trajectory) -> None:
        self.state.record(traj)

    def note(self, text: str) -> None:
        return None

    def close(self) -> None:
        return None


class PlainProgress(NullProgress):
    """Log lines on a stream, at most one per `interval_s`."""

    def __init__(self, stream: TextIO | None = None, interval_s: float = 10.0) -> None:
        super().__init__()
        self.stream = stream or sys.stderr
        self.interval_s = interval_s
        self._last = 0.0

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def start(self, label: str, total: int, resumed: int) -> None:
        super().start(label, total, resumed)
        self._print(f"[{label}] {total} episodes to run ({resumed} already done)")
        self._last = time.perf_counter()

    def episode_finished(self, traj: Trajectory) -> None:
        super().episode_finished(traj)
        now = time.perf_counter()
        if now - self._last >= self.interval_s:
            self._last = now
            self._print(self.state.line())

    def note(self, text: str) -> None:
        self._print(f"[{self.state.label}] {text}")

    def close(self) -> None:
        self._print(self.state.line())


class _StatsLine:
    """The counters under the bar, re-rendered on every refresh."""

    def __init__(self, owner: NullProgress) -> None:
        self.owner = owner

    def __rich__(self) -> Any:
        from rich.text import Text

        return Text("  " + self.owner.state.stats(), style="dim")


class RichProgress(NullProgress):
    """A rich progress bar on stderr with the live counters on a line below it."""

    def __init__(self) -> None:
        super().__init__()
        from rich.console import Console, Group
        from rich.live import Live
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
        from rich.progress import Progress as RichBar

        self.console = Console(stderr=True)
        self._bar = RichBar(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
        )
        self._live = Live(Group(self._bar, _StatsLine(self)), console=self.console, refresh_per_second=4)
        self._task: Any = None

    def start(self, label: str, total: int, resumed: int) -> None:
        super().start(label, total, resumed)
        self._task = self._bar.add_task(label, total=resumed + total, completed=resumed)
        self._live.start()

    def episode_finished(self, traj: Trajectory) -> None:
        super().episode_finished(traj)
        if self._task is not None:
            self._bar.advance(self._task)

    def note(self, text: str) -> None:
        self.console.print(f"[{self.state.label}] {text}", markup=False, highlight=False)

    def close(self) -> None:
        self._live.refresh()
        self._live.stop()


def make_progress(mode: ProgressMode = "auto", stream: TextIO | None = None) -> Progress:
    """`auto`: rich on a terminal, plain lines otherwise."""
    if mode == "none":
        return NullProgress()
    stream = stream or sys.stderr
    if mode == "rich" or (mode == "auto" and stream.isatty()):
        return RichProgress()
    return PlainProgress(stream)
