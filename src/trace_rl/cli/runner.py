"""Running a typer app as a command: one line for user errors, and the exit codes of every `trace-rl` command —
0 done, 1 a failed check, work left to retry or infrastructure that failed (a model server that will not start), 2 bad
input, 130 interrupted."""

from __future__ import annotations

import typer

from trace_rl.errors import InfraError, UserError
from trace_rl.stage import StageFailed


def run_app(app: typer.Typer, argv: list[str] | None, prog_name: str) -> int:
    """Run `app` on `argv` and return its exit code; a user error or a stage left incomplete is one line on stderr."""
    try:
        code = app(args=argv, prog_name=prog_name, standalone_mode=False)
        if isinstance(code, int):  # click returns a command's typer.Exit code instead of raising it
            return code
    except UserError as exc:
        typer.echo(f"error: {exc}", err=True)
        return 2
    except InfraError as exc:  # systemic (a server that will not start): one line, the rerun resumes
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        typer.echo(
            f"error: infrastructure: {first} (nothing written is lost; rerun the same command to resume)", err=True
        )
        return 1
    except StageFailed as exc:
        typer.echo(exc.message, err=True)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 130
    except Exception as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # type: ignore[attr-defined]
            return 0
        if hasattr(exc, "format_message"):  # click usage errors: unknown command, bad option
            typer.echo(f"error: {exc.format_message()}", err=True)  # type: ignore[attr-defined]
            return int(getattr(exc, "exit_code", 2))
        raise
    return 0


__all__ = ["run_app"]
