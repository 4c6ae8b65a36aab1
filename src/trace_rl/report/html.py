"""`report.html`: one self-contained page telling a run's story, stage by stage.

Rollouts and their failures → capabilities selected with their evidence → each environment's calibration → each
adapter's training curve → the router and its accuracy → the final comparison and score vs rollout budget (TRACE
Fig. 4) → the trajectories the page links to. A section whose artefacts do not exist says "not run yet"; a section
whose artefacts cannot be read (a stage writing concurrently, a drifted format) says so and the rest still renders.

Self-contained: inline CSS, figures as base64 PNGs, no scripts, no external resources — it opens offline. Written
atomically next to the run's manifest: `runs/<name>/report.html`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trace_rl.artifacts.store import RunDir, atomic_write_text
from trace_rl.report.comparison import comparison_section
from trace_rl.report.markup import badge, esc, kv_table, table
from trace_rl.report.sections import (
    Context,
    adapters_section,
    appendix_section,
    capabilities_section,
    environments_section,
    rollout_section,
    routing_section,
)

log = logging.getLogger(__name__)

NOT_RUN = "not run yet"


@dataclass(frozen=True)
class SectionSpec:
    key: str
    title: str
    command: str
    render: Callable[[Context], str | None]


SECTIONS = (
    SectionSpec("rollouts", "1. Rollouts and failures", "trace-rl rollout", rollout_section),
    SectionSpec("capabilities", "2. Capabilities", "trace-rl diagnose", capabilities_section),
    SectionSpec("environments", "3. Capability environments", "trace-rl synthesize", environments_section),
    SectionSpec("adapters", "4. Adapters", "trace-rl train", adapters_section),
    SectionSpec("routing", "5. Routing", "trace-rl route", routing_section),
    SectionSpec("comparison", "6. Comparison", "trace-rl evaluate", comparison_section),
)

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#222;margin:0;background:#fafafa}
header{background:#1f2d3a;color:#fff;padding:18px 28px}header h1{margin:0 0 4px;font-size:22px}
header .sub{color:#c9d4de;font-size:13px}nav{padding:8px 28px;background:#eef1f4;border-bottom:1px solid #d9dee3}
nav a{margin-right:14px;color:#1f4e79;text-decoration:none}main{padding:8px 28px 40px;max-width:1180px}
section{background:#fff;border:1px solid #e1e4e8;border-radius:6px;padding:6px 18px 16px;margin:16px 0}
h2{font-size:18px;border-bottom:1px solid #eee;padding-bottom:4px}h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}th,td{border:1px solid #e1e4e8;padding:4px 8px;
text-align:left;vertical-align:top}thead th{background:#f3f5f7}table.kv th{background:#f8f9fa;width:150px}
td .def{color:#555;font-size:12px;max-width:520px}td .ci{color:#777;font-size:11px}
.missing{color:#8a8a8a;font-style:italic}.note{color:#666;font-size:12px}.warn{color:#8a5a00}
.badge{display:inline-block;border-radius:3px;padding:0 6px;font-size:11px;font-weight:600}
.badge.ok{background:#d7f0dd;color:#176b2c}.badge.bad{background:#f8d7d7;color:#8b1a1a}
.badge.muted{background:#eceff1;color:#666}img.plot{max-width:100%;display:block;margin:8px 0;
border:1px solid #eee}details.traj{border:1px solid #e1e4e8;border-radius:4px;margin:6px 0;padding:4px 8px}
details.traj summary{cursor:pointer}.msg{margin:6px 0 6px 8px;padding:4px 8px;border-left:3px solid #ccc}
.msg.user{border-color:#2e8b57}.msg.assistant{border-color:#1f6fb2}.msg.tool{border-color:#8e44ad}
.msg.tool.error{border-color:#c0392b;background:#fdf1f0}.msg .role{font-weight:600;font-size:12px;color:#555}
.msg pre{white-space:pre-wrap;margin:2px 0;font:12px/1.4 ui-monospace,Menlo,Consolas,monospace}
.msg pre.thought{color:#777}.call{font:12px ui-monospace,Menlo,Consolas,monospace;color:#1f4e79}
.turn{color:#999;font-size:11px}.err{color:#c0392b}.errors{color:#8b1a1a;font-size:12px}code{font-size:12px}
"""


def _header(run: RunDir) -> tuple[str, str]:
    title = f"trace-rl report — {esc(run.name)}"
    sub = f"generated {time.strftime('%Y-%m-%d %H:%M:%S')} from <code>{esc(run.root)}</code>"
    body = ""
    if run.exists():
        try:
            m = run.manifest()
            sub += f" · trace-rl {esc(m.trace_rl_version)}"
            if m.git_sha:
                sub += f" · git {esc(m.git_sha[:10])}{' (dirty)' if m.git_dirty else ''}"
            stages = [
                (
                    esc(name),
                    badge(s.status, {"done": "ok", "failed": "bad"}.get(s.status, "muted")),
                    esc(time.strftime("%Y-%m-%d %H:%M", time.localtime(s.started_at))) if s.started_at else "–",
                    f"{s.ended_at - s.started_at:.0f} s" if s.ended_at else "–",
                )
                for name, s in m.stages.items()
            ]
            if stages:
                body = "<section id='run'><h2>Run</h2>" + table(["stage", "status", "started", "took"], stages)
                if m.commands:
                    body += kv_table([("last command", f"<code>{esc(m.commands[-1])}</code>")])
                body += "</section>"
        except Exception as exc:  # a manifest being rewritten concurrently, or an older format
            body = f"<section id='run'><h2>Run</h2><p class='warn'>manifest unreadable: {esc(exc)}</p></section>"
    return f"<header><h1>{title}</h1><div class='sub'>{sub}</div></header>", body


def render_report(run: RunDir, *, max_failed: int = 3) -> str:
    """The report's HTML for `run`."""
    ctx = Context(run=run, max_failed=max_failed)
    parts = []
    for spec in SECTIONS:
        try:
            body = spec.render(ctx)
        except Exception as exc:
            log.warning("report section %s failed: %s", spec.key, exc, exc_info=True)
            body = f"<p class='warn'>could not render this section: {esc(type(exc).__name__)}: {esc(exc)}</p>"
        if body is None:
            body = f"<p class='missing'>{NOT_RUN} (<code>{spec.command} --run {esc(run.root)}</code>)</p>"
        parts.append(f"<section id='{spec.key}'><h2>{esc(spec.title)}</h2>{body}</section>")
    appendix = appendix_section(ctx)
    if appendix:
        parts.append(f"<section id='trajectories'><h2>Trajectories referenced above</h2>{appendix}</section>")
    header, run_section = _header(run)
    nav = "".join(f"<a href='#{s.key}'>{esc(s.title)}</a>" for s in SECTIONS)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width,initial-scale=1'><title>trace-rl — {esc(run.name)}</title>"
        f"<style>{CSS}</style></head><body>{header}<nav>{nav}</nav><main>{run_section}{''.join(parts)}</main>"
        "</body></html>\n"
    )


def write_html_report(run: RunDir, *, path: Path | None = None, max_failed: int = 3) -> Path:
    """Render the run's report and write it atomically to `runs/<name>/report.html` (or `path`); returns the path."""
    target = Path(path) if path is not None else run.report
    atomic_write_text(target, render_report(run, max_failed=max_failed))
    return target


__all__ = ["NOT_RUN", "SECTIONS", "render_report", "write_html_report"]
