"""The run directory is spelled in one place: no module outside `trace_rl.artifacts` names a run-directory file or
folder in a string literal (an AST scan of every string constant, f-string parts included, docstrings aside)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from trace_rl.artifacts import layout
from trace_rl.artifacts.layout import RUN_FILE_NAMES, RUN_FOLDERS, RunLayout

SRC = Path(layout.__file__).resolve().parents[1]
ARTIFACTS = SRC / "artifacts"
TOKEN = re.compile(r"[\w./*{}<>@-]+")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the constant nodes that are docstrings (module, class, function)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def run_paths(text: str) -> list[str]:
    """The run-directory names a string spells: a layout file name, or `<stage folder>/...` naming a file."""
    hits = []
    for token in TOKEN.findall(text):
        parts = token.strip("./").split("/")
        under_a_stage = len(parts) > 1 and parts[0] in RUN_FOLDERS and ("." in parts[-1] or token.endswith("/"))
        if parts[-1] in RUN_FILE_NAMES or under_a_stage:
            hits.append(token)
    return hits


def scan(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            for side in (node.left, node.right):
                if isinstance(side, ast.Constant) and side.value in RUN_FOLDERS:
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}: / {side.value!r}")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            found += [f"{path.relative_to(SRC)}:{node.lineno}: {hit!r}" for hit in run_paths(node.value)]
    return found


def test_no_run_directory_path_outside_artifacts() -> None:
    files = [p for p in sorted(SRC.rglob("*.py")) if ARTIFACTS not in p.parents]
    assert len(files) > 100
    found = [hit for path in files for hit in scan(path)]
    assert not found, "run-directory paths spelled outside trace_rl.artifacts (use artifacts.layout):\n" + "\n".join(
        found
    )


def test_the_scan_catches_each_spelling(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        '"""Docstrings may name rollout/trajectories.jsonl."""\n'
        'A = "rollout/trajectories.jsonl"\n'
        'B = root / "adapters" / name\n'
        'C = f"{stage}/arms.json"\n'
        'D = f"see envs/*/status.json ({x})"\n'
        'E = "metrics/rollout/seconds"\n'
    )
    hits = [h.split(": ", 1)[1] for h in scan_at(module, tmp_path)]
    assert hits == ["'rollout/trajectories.jsonl'", "/ 'adapters'", "'/arms.json'", "'envs/*/status.json'"]


def scan_at(path: Path, root: Path) -> list[str]:
    global SRC
    saved, SRC = SRC, root
    try:
        return scan(path)
    finally:
        SRC = saved


def test_layout_names_every_path_below_the_run() -> None:
    run = RunLayout(Path("/r"))
    paths = [
        run.manifest_path,
        run.report,
        run.trajectories,
        run.plans,
        run.discovery,
        run.label_run(3),
        run.capabilities,
        run.synthesize_summary,
        run.env("c").spec,
        run.env("c").calibration_trajectories,
        run.adapter("c").done,
        run.train_work("c").eval_after,
        run.router,
        run.accuracy,
        run.oracle_episodes("base"),
        run.comparison,
        run.evaluate.arm_index,
        run.evaluate.path(run.evaluate.arm("trace")),
        run.routes_log,
    ]
    assert all(p.is_relative_to("/r") for p in paths)
    assert [str(p.relative_to("/r")) for p in paths[:7]] == [
        "manifest.json",
        "report.html",
        "rollout/trajectories.jsonl",
        "rollout/plans.json",
        "diagnose/discovery.json",
        "diagnose/labels/run_3.json",
        "diagnose/capabilities.json",
    ]
    assert str(run.evaluate.path(run.evaluate.arm("trace")).relative_to("/r")) == "evaluate/arms/trace.jsonl"
    assert run.evaluate.curve("gepa", "ab12") == "curve/gepa@ab12.jsonl"
    assert run.evaluate.single_best("train", "x") == "single_best/train/x.jsonl"
