"""`trace-rl view <run>`: read trajectories as conversations — messages, tool calls, tool results, reward breakdown.

Filters pick episodes (`--failed`, `--infra`, `--task`, `--trial`, `--id`, `--env`, `--split`); one match is shown in
full, several are listed one per line (`--all` shows each in full). Only the latest record of each episode is used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.text import Text

from trace_rl.artifacts.layout import ROLLOUT_TRAJECTORIES
from trace_rl.artifacts.store import RunDir
from trace_rl.artifacts.trajectories import import_summary
from trace_rl.errors import UserError
from trace_rl.types import Message, Trajectory

ROLE_STYLE = {"assistant": "bold cyan", "user": "bold green", "tool": "magenta", "system": "dim"}


@dataclass
class ViewFilter:
    failed: bool = False
    infra: bool = False
    task: str | None = None
    trial: int | None = None
    id: str | None = None
    env: str | None = None
    split: str | None = None

    def match(self, r: dict[str, Any]) -> bool:
        if self.id is not None and r["id"] != self.id:
            return False
        if self.task is not None and str(r["task_id"]) != self.task:
            return False
        if self.trial is not None and int(r["trial"]) != self.trial:
            return False
        if self.env is not None and r["env"] != self.env:
            return False
        if self.split is not None and r["split"] != self.split:
            return False
        is_infra = r.get("infra_error") is not None
        if self.failed and self.infra:
            return is_infra or not r.get("success")
        if self.failed:
            return not is_infra and not r.get("success")
        if self.infra:
            return is_infra
        return True


def select(run_dir: RunDir, flt: ViewFilter, relpath: str = ROLLOUT_TRAJECTORIES) -> list[dict[str, Any]]:
    store = run_dir.jsonl(relpath)
    if not store.path.exists():
        raise UserError(f"{store.path} does not exist")
    records = [r for r in store.latest().values() if flt.match(r)]
    return sorted(records, key=lambda r: (r["env"], r["split"], str(r["task_id"]), int(r["trial"])))


def _clip(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters; --full shows all]"


def _args(arguments: dict[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())


def message_text(m: Message, limit: int | None) -> Text:
    """One message as a styled block: `[turn] role: text`, tool calls as `name(args)`, tool results with their call."""
    turn = f"[{m.turn}] " if m.turn is not None else ""
    out = Text(turn, style="dim")
    if m.role == "tool":
        out.append(f"tool {m.name or '?'} ({m.tool_call_id})", style="bold red" if m.error else ROLE_STYLE["tool"])
        out.append(": " + _clip(m.text, limit), style="red" if m.error else "")
        return out
    out.append(m.role, style=ROLE_STYLE.get(m.role, ""))
    if m.tool_calls:
        if m.thought:
            out.append(f" (thought: {_clip(m.thought, limit)})", style="italic dim")
        for call in m.tool_calls:
            out.append("\n    → ", style="dim")
            out.append(call.name, style="bold yellow")
            out.append(f"({_args(call.arguments)})")
            out.append(f"  [{call.id}]", style="dim")
            if call.parse_error:
                out.append(f"\n      parse error: {call.parse_error}; raw: {_clip(call.raw or '', limit)}", style="red")
    else:
        out.append(": " + _clip(m.text, limit))
    if m.sampled is not None:
        n_prompt = len(m.sampled.prompt_ids) if m.sampled.prompt_ids is not None else "?"
        out.append(f"\n    tokens: {n_prompt} prompt, {len(m.sampled.completion_ids)} sampled", style="dim")
    return out


def render_trajectory(traj: Trajectory, console: Console, *, limit: int | None = 800) -> None:
    console.rule(Text(traj.id, style="bold"))
    head = Text()
    head.append(f"model {traj.model or '-'} · adapter {traj.adapter or '-'} · user {traj.user_model or '-'} · ")
    head.append(f"trial {traj.trial} · seed {traj.seed}\n")
    if traj.infra_error is not None:
        head.append(f"INFRA FAILURE (not scored, retried on rerun): {traj.infra_error}\n", style="bold yellow")
    else:
        style = "bold green" if traj.success else "bold red"
        head.append(f"{'SUCCESS' if traj.success else 'FAILURE'}", style=style)
        head.append(f" · reward {traj.reward} · ")
    head.append(f"termination {traj.termination} · {traj.tokens.model_calls} model calls · ")
    head.append(f"tokens {traj.tokens.prompt} prompt / {traj.tokens.completion} completion · ")
    head.append(f"{traj.timings.duration_s:.2f} s (model {traj.timings.model_s:.2f} s, env {traj.timings.env_s:.2f} s)")
    console.print(head)
    for m in traj.messages:
        console.print(message_text(m, limit))
    if traj.reward_info is not None:
        info = traj.reward_info
        line = Text("reward ", style="bold")
        line.append(f"{info.reward} = product over basis {', '.join(info.reward_basis) or '-'}: ")
        line.append(" · ".join(f"{k} {v}" for k, v in info.breakdown.items()) or "-")
        console.print(line)
        for name, detail in info.details.items():
            console.print(Text(f"  {name}: {_clip(json.dumps(detail, ensure_ascii=False, default=str), limit)}"))
    for err in traj.errors:
        turn = f" (turn {err.turn})" if err.turn is not None else ""
        console.print(Text(f"error [{err.kind}]{turn}: {_clip(err.message, limit)}", style="red"))


def summary_line(r: dict[str, Any]) -> Text:
    if r.get("infra_error") is not None:
        status = Text("INFRA  ", style="yellow")
    else:
        status = Text("ok     " if r.get("success") else "FAILED ", style="green" if r.get("success") else "red")
    status.append(f"{r['id']}  reward {r.get('reward')}  {r.get('termination')}  ")
    status.append(f"{len(r.get('messages') or [])} messages  {len(r.get('errors') or [])} errors", style="dim")
    if r.get("infra_error"):
        status.append(f"  {r['infra_error'][:120]}", style="yellow")
    return status


def view(
    run_dir: RunDir,
    flt: ViewFilter,
    *,
    show_all: bool = False,
    limit: int | None = 50,
    full: bool = False,
    relpath: str = ROLLOUT_TRAJECTORIES,
    console: Console | None = None,
) -> int:
    """Print the matching episodes; returns how many matched."""
    console = console or Console(highlight=False, width=None if Console().is_terminal else 160)
    records = select(run_dir, flt, relpath)
    if not records:
        console.print("no trajectories match", markup=False)
        return 0
    clip = None if full else 800
    imported = import_summary(run_dir.manifest()) if run_dir.exists() else None
    if imported:
        console.print(f"imported run: {imported.get('format')} log {imported.get('source')}", markup=False)
    if len(records) == 1 or show_all:
        for r in records[:limit] if limit else records:
            render_trajectory(Trajectory.model_validate(r), console, limit=clip)
    else:
        shown = records[:limit] if limit else records
        for r in shown:
            console.print(summary_line(r))
        more = len(records) - len(shown)
        console.print(
            f"{len(records)} trajectories match{f' ({more} not listed; --limit)' if more else ''}; "
            "narrow with --id/--task/--trial or pass --all to show them in full",
            markup=False,
        )
    return len(records)
