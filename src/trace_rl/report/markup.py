"""Small HTML building blocks for the report: escaping, tables, numbers, images, and trajectories as readable
conversations (messages, tool calls with arguments, tool results, errors, reward breakdown).

Everything user- or model-written goes through `esc`; the report never embeds raw text.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from trace_rl.report.plots import data_uri
from trace_rl.types import Message, Trajectory


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def num(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return esc(x)


def signed(x: Any, digits: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.{digits}f}"


def ci(low: Any, high: Any, digits: int = 3) -> str:
    if low is None or high is None:
        return ""
    return f"[{num(low, digits)}, {num(high, digits)}]"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, cls: str = "", raw: bool = True) -> str:
    """A table; cells are HTML already (raw=True) or escaped (raw=False)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c if raw else esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{esc(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def kv_table(items: Iterable[tuple[str, str]]) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in items)
    return f'<table class="kv"><tbody>{rows}</tbody></table>'


def img(png: bytes, alt: str) -> str:
    return f'<img class="plot" alt="{esc(alt)}" src="{data_uri(png)}">'


def badge(text: str, kind: str) -> str:
    return f'<span class="badge {esc(kind)}">{esc(text)}</span>'


def anchor(trajectory_id: str) -> str:
    """A stable HTML id for a trajectory id (which holds slashes and arbitrary task ids)."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", trajectory_id).strip("-")[:60]
    return f"traj-{slug}-{hashlib.sha1(trajectory_id.encode()).hexdigest()[:6]}"


def _args(arguments: dict[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"… [{len(text) - limit} more characters]"


def message_html(m: Message, *, limit: int = 1500) -> str:
    turn = f'<span class="turn">[{m.turn}]</span> ' if m.turn is not None else ""
    if m.role == "tool":
        cls = "msg tool error" if m.error else "msg tool"
        who = f"tool {esc(m.name or '?')}"
        return f'<div class="{cls}">{turn}<span class="role">{who}</span><pre>{esc(_clip(m.text, limit))}</pre></div>'
    parts = []
    if m.thought:
        parts.append(f'<pre class="thought">{esc(_clip(m.thought, limit))}</pre>')
    if m.content:
        parts.append(f"<pre>{esc(_clip(m.content, limit))}</pre>")
    for call in m.tool_calls or []:
        err = (
            f' <span class="err">(arguments did not parse: {esc(call.parse_error)})</span>' if call.parse_error else ""
        )
        parts.append(f'<div class="call">→ {esc(call.name)}({esc(_clip(_args(call.arguments), 400))}){err}</div>')
    return f'<div class="msg {esc(m.role)}">{turn}<span class="role">{esc(m.role)}</span>{"".join(parts)}</div>'


def trajectory_summary(t: Trajectory) -> str:
    outcome = "success" if t.success else ("infra failure" if t.infra_error else "failed")
    reward = num(t.reward) if t.reward is not None else "–"
    return (
        f"{badge(outcome, 'ok' if t.success else 'bad')} <code>{esc(t.id)}</code> — reward {reward}, "
        f"termination {esc(t.termination.value if t.termination else '–')}, {len(t.messages)} messages"
    )


def trajectory_html(t: Trajectory, *, open_: bool = False, include_system: bool = False) -> str:
    """A trajectory as a collapsible conversation with its reward breakdown and errors."""
    body = [message_html(m) for m in t.messages if include_system or m.role != "system"]
    if t.reward_info is not None and t.reward_info.breakdown:
        rows = [(esc(k), num(v)) for k, v in t.reward_info.breakdown.items()]
        body.append('<div class="breakdown">reward breakdown ' + table(["component", "score"], rows) + "</div>")
    if t.errors:
        errs = "".join(f"<li>{esc(e.kind)}: {esc(_clip(e.message, 300))}</li>" for e in t.errors)
        body.append(f'<div class="errors">errors<ul>{errs}</ul></div>')
    if t.infra_error:
        body.append(f'<div class="errors">infrastructure error: {esc(t.infra_error)}</div>')
    return (
        f'<details class="traj" id="{anchor(t.id)}"{" open" if open_ else ""}>'
        f"<summary>{trajectory_summary(t)}</summary>{''.join(body)}</details>"
    )


__all__ = [
    "anchor",
    "badge",
    "ci",
    "esc",
    "img",
    "kv_table",
    "message_html",
    "num",
    "signed",
    "table",
    "trajectory_html",
]
