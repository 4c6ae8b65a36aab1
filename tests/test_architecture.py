"""The import contracts of `[tool.importlinter]` in pyproject.toml hold on the real import graph.

The contracts: each layer imports only the layers below it (cli > pipeline > report, serve > the six stages, which never
import each other > training, routing > executor > engine > envs > models > stage > config, artifacts > the
vocabulary: stats, faults, types, errors, messages); the report reads only artifacts and the core; the pipeline never
imports the CLI; no command imports the test support (`trace_rl.testing`). import-linter counts every import
statement, function-level and TYPE_CHECKING ones included; a test proves it sees a function-level import, and another
that every top-level module has a layer. Two source rules close the file: every `# fmt: skip` says why, and no
`except ImportError` wraps an import of trace-rl's own modules.
"""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import sys
import textwrap
import tokenize
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def lint_imports(config: Path, cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`lint-imports` of this interpreter's environment over `config`, without a cache (the graph is rebuilt)."""
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    code = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    argv = [sys.executable, "-c", code, "--config", str(config), "--no-cache", "--no-logo"]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def broken_part(output: str) -> str:
    """The report from its "Broken contracts" heading on (the import chains of every broken contract)."""
    start = output.find("Broken contracts")
    return output[start:] if start >= 0 else output


def test_import_contracts_hold() -> None:
    result = lint_imports(ROOT / "pyproject.toml", ROOT)
    assert "Contracts:" in result.stdout, result.stdout + result.stderr  # it ran (a config error says otherwise)
    if result.returncode != 0:
        pytest.fail("import contracts broken:\n" + broken_part(result.stdout), pytrace=False)


def test_every_top_level_module_has_a_layer() -> None:
    """A new module or package under trace_rl must be placed in the layers contract, or no rule would cover it."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    placed = {name.strip() for layer in layers for name in re.split(r"[|:]", layer)}
    package = ROOT / "src" / "trace_rl"
    present = {p.stem for p in package.glob("*.py")} | {
        p.name for p in package.iterdir() if (p / "__init__.py").is_file()
    }
    unplaced = present - placed - {"__init__", "testing"}
    assert not unplaced, f"not in the layers contract of pyproject.toml: {', '.join(sorted(unplaced))}"


def test_function_level_imports_count(tmp_path: Path) -> None:
    package = tmp_path / "layered"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "high.py").write_text("VALUE = 1\n")
    (package / "low.py").write_text(
        textwrap.dedent(
            """
            def late():
                from layered.high import VALUE

                return VALUE
            """
        )
    )
    config = tmp_path / ".importlinter"
    config.write_text(
        textwrap.dedent(
            """
            [importlinter]
            root_package = layered

            [importlinter:contract:layers]
            name = high above low
            type = layers
            layers =
                layered.high
                layered.low
            """
        )
    )
    result = lint_imports(config, tmp_path, pythonpath=tmp_path)
    assert result.returncode != 0, result.stdout + result.stderr
    assert "layered.low -> layered.high" in result.stdout


def python_files() -> list[Path]:
    return [p for folder in ("src", "tests", "benchmarks") for p in sorted((ROOT / folder).rglob("*.py"))]


def test_every_fmt_skip_says_why() -> None:
    """`# fmt: skip  # <reason>`: ruff ignores a skip followed by anything but a comment, so the reason is one."""
    bare = [
        f"{path.relative_to(ROOT)}:{token.start[0]}"
        for path in python_files()
        for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
        if token.type == tokenize.COMMENT
        and token.string.startswith("# fmt: skip")
        and not re.match(r"# fmt: skip  # \S", token.string)
    ]
    assert not bare, "a `# fmt: skip` without `  # <reason>` after it: " + ", ".join(bare)


def test_no_import_error_fallback_around_own_modules() -> None:
    """trace-rl's own modules are always importable: no `except ImportError` around them (third-party ones may)."""

    def own_import(node: ast.stmt) -> bool:
        return any(
            (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("trace_rl"))
            or (isinstance(n, ast.Import) and any(a.name.startswith("trace_rl") for a in n.names))
            for n in ast.walk(node)
        )

    def catches_import_error(handler: ast.ExceptHandler) -> bool:
        names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        return any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError") for n in names)

    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in python_files()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Try)
        and any(catches_import_error(h) for h in node.handlers)
        and any(own_import(s) for s in node.body)
    ]
    assert not found, "`except ImportError` around trace_rl imports: " + ", ".join(found)
