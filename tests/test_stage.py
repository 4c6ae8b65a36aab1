"""`run_stage`: a Ctrl-C or a SIGTERM ends a stage as an interruption (exit status 130) after its `finally` blocks
ran, so the clients it opened close and a model server it started stops with it."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from trace_rl.artifacts.store import RunDir
from trace_rl.config import TraceConfig
from trace_rl.stage import StageContext, StageFailed, run_stage


@dataclass
class Terminated:
    """A stage that is sent SIGTERM in the middle of its event loop, as `kill <pid>` would."""

    closed: list[str] = field(default_factory=list)
    name: ClassVar[str] = "terminated"

    def section(self, config: TraceConfig) -> None:
        return None

    def run(self, ctx: StageContext, section: None) -> None:
        async def work() -> None:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                await asyncio.sleep(30)  # never reached: the signal ends the stage first
                self.closed.append("finished")
            finally:
                self.closed.append("clients closed")

        try:
            asyncio.run(work())
        finally:
            self.closed.append("server stopped")


def test_sigterm_interrupts_a_stage_after_its_finally_blocks_and_restores_the_handler(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    stage = Terminated()
    ctx = StageContext(config=TraceConfig(), run=RunDir(tmp_path / "run"))
    with pytest.raises(StageFailed) as failed:
        run_stage(stage, ctx)
    assert failed.value.exit_code == 130 and "rerun the same command to resume" in failed.value.message
    assert stage.closed == ["clients closed", "server stopped"]
    assert signal.getsignal(signal.SIGTERM) is before  # the process's own handler is back after the stage
