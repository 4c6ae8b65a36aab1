"""The `Stage` protocol: how the pipeline and the CLI run one TRACE stage over a run directory.

Every stage package exposes one object implementing it (`trace_rl.rollout.stage.ROLLOUT`, ...,
`trace_rl.report.stage.REPORT`). `Stage.run(ctx, section)` takes a `StageContext` — the whole `TraceConfig`, the
`RunDir`, the command line the user typed (recorded in the manifest), where output goes — and the stage's own typed
config section; it prints its summary through `ctx.echo` and returns its result. A stage that ran but left work to
retry raises `StageFailed` (exit status 1); bad input is a `UserError` (exit status 2).

The CLI command of a stage maps its flags onto the stage's section and calls `run_stage`; `trace-rl run` calls the
same objects in order with one context per stage (pipeline.py). This module sits at the core level: it imports only
the config and the artifacts, never a stage.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from trace_rl.artifacts.store import RunDir
from trace_rl.config import ExecutorConfig, TraceConfig, config_from_record, load_config

ProgressMode = Literal["auto", "rich", "plain", "none"]
SectionT = TypeVar("SectionT", contravariant=True)
ResultT = TypeVar("ResultT", covariant=True)


class Echo(Protocol):
    """Where a stage's lines go (`typer.echo` fits): stdout, or stderr with `err=True`."""

    def __call__(self, message: str, *, err: bool = False) -> None: ...


def print_echo(message: str, *, err: bool = False) -> None:
    print(message, file=sys.stderr if err else sys.stdout, flush=True)


@dataclass
class StageContext:
    """What every stage gets besides its own section."""

    config: TraceConfig
    run: RunDir
    command: str | None = None  # the command line the user typed, as it could be retyped (`trace-rl run ...` too)
    echo: Echo = print_echo
    progress: ProgressMode = "auto"  # rollout's live progress display

    @property
    def executor(self) -> ExecutorConfig:
        """Where rollout, train and evaluate run (the config's executor section, --executor applied)."""
        return self.config.executor


class Stage(Protocol[SectionT, ResultT]):
    """One stage of TRACE."""

    @property
    def name(self) -> str:
        """The stage's CLI command and its key in `manifest.stages`."""
        ...

    def section(self, config: TraceConfig) -> SectionT:
        """The stage's typed section of `config`."""
        ...

    def run(self, ctx: StageContext, section: SectionT) -> ResultT:
        """Run the stage (resuming what is done), print its summary, return its result."""
        ...


class StageFailed(Exception):
    """The stage ran but did not finish (work left to retry, or interrupted); `message` says what to do."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt while the block runs (main thread only), as Ctrl-C does: the stage's
    `finally` blocks close its clients, so a model server it started stops with it instead of outliving it (measured:
    a killed `synthesize` left its vLLM server running). Stages that cancel their event loop on SIGTERM themselves
    (rollout, diagnose) override it while their loop runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_stage(stage: Stage[SectionT, ResultT], ctx: StageContext) -> ResultT:
    """`stage.run` with the config's section for it, a Ctrl-C or SIGTERM turned into `StageFailed` (exit status
    130)."""
    try:
        with sigterm_interrupts():
            return stage.run(ctx, stage.section(ctx.config))
    except KeyboardInterrupt:
        raise StageFailed("interrupted; rerun the same command to resume", exit_code=130) from None


def load_run_config(run: RunDir, path: Path | None, overrides: dict[str, Any] | None = None) -> TraceConfig:
    """`--config` when given, else the config recorded in the run's manifest (an old run's `stages:` lifted), with
    dotted flag overrides (`{"evaluate.trials": 3}`); validated once, one line per problem."""
    if path is not None:
        return load_config(path, overrides)
    return config_from_record(run.manifest().config, overrides, source=f"{run.manifest_path} (recorded config)")


def command_line(click_ctx: Any) -> str:
    """The command being run as it could be retyped: `trace-rl <command>` and every parameter whose value is not its
    default, under its own flag (from a click/typer context: `ctx.command.params`, `ctx.params`)."""
    words = ["trace-rl", str(click_ctx.info_name).split()[-1]]
    for param in click_ctx.command.params:
        value = click_ctx.params.get(param.name)
        if value is None or value == param.default or (isinstance(value, list | tuple) and not value):
            continue
        if param.param_type_name == "argument":
            words += [str(v) for v in value] if isinstance(value, list | tuple) else [str(value)]
            continue
        flags = param.opts if value is not False else param.secondary_opts
        if not flags:
            continue
        flag = next((f for f in flags if f.startswith("--")), flags[0])
        if isinstance(value, bool):
            words.append(flag)
        elif isinstance(value, list | tuple):
            for item in value:
                words += [flag, str(item)]
        else:
            words += [flag, str(value)]
    return shlex.join(words)


__all__ = [
    "Echo",
    "ProgressMode",
    "Stage",
    "StageContext",
    "StageFailed",
    "command_line",
    "load_run_config",
    "print_echo",
    "run_stage",
]
