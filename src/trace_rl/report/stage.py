"""The report as the pipeline's last stage (`trace-rl report`): the run's tables, then the self-contained report.html.

The rollout tables (pass^k with 95% intervals, terminations, tokens, infrastructure failures) when the run has
rollouts, the selected capabilities when diagnose has run, and `report.html`. With `as_json`, only the rollout
numbers, as JSON (for machines). The report has no config section: its options are the stage object's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from trace_rl.artifacts.capabilities import read_capabilities
from trace_rl.config import TraceConfig
from trace_rl.stage import StageContext


@dataclass(frozen=True)
class ReportStage:
    """`k`: the largest k of pass^k (None: the planned trials); `samples` / `seed`: the bootstrap's."""

    k: int | None = None
    samples: int = 1000
    seed: int = 0
    as_json: bool = False
    html: bool = True
    name: ClassVar[str] = "report"

    def section(self, config: TraceConfig) -> None:
        return None

    def run(self, ctx: StageContext, section: None) -> Path | None:
        """Print the tables; returns the report.html written (None with `as_json` or `html=False`)."""
        run = ctx.run
        run.manifest()  # a one-line error when this is not a run
        if run.trajectories.exists():
            from trace_rl.report.rollout_tables import report

            report(run, k_max=self.k, samples=self.samples, seed=self.seed, as_json=self.as_json)
        if self.as_json:
            return None
        if run.capabilities.exists():
            from rich.console import Console

            from trace_rl.report.capabilities import render

            render(read_capabilities(run), Console())
        if not self.html:
            return None
        from trace_rl.report.html import write_html_report

        path = write_html_report(run)
        ctx.echo(f"report: {path}")
        return path


REPORT = ReportStage()


__all__ = ["REPORT", "ReportStage"]
