"""`trace-rl export`: environments in the field's formats (OpenEnv, verifiers) and run records as Hugging Face
datasets (trace_rl.interop does the work)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

export_app = typer.Typer(help="Export environments and run records in the field's formats.", no_args_is_help=True)


@export_app.command("env")
def export_env_command(
    source: Annotated[
        str,
        typer.Argument(
            help="A capability environment folder (runs/<run>/envs/<capability>), library:<family>, or an environment "
            "name (library, tau2:airline, toolsandbox:base_offline)."
        ),
    ],
    fmt: Annotated[str, typer.Option("--format", help="openenv | verifiers.")],
    out: Annotated[Path, typer.Option("--out", help="Folder to write the environment package to.")],
    split: Annotated[
        str, typer.Option("--split", help="For an environment name: the split its seeds index.")
    ] = "train",
    max_steps: Annotated[int, typer.Option("--max-steps", min=1, help="Episode hop limit.")] = 50,
    max_errors: Annotated[int, typer.Option("--max-errors", min=1, help="Tool errors that end an episode.")] = 10,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace a non-empty --out folder.")] = False,
) -> None:
    """Export a trace-rl environment as an OpenEnv or verifiers environment package."""
    from trace_rl.interop.exporters import ExportRequest, export_env
    from trace_rl.interop.sources import resolve_source

    ref = resolve_source(source, split=split)
    request = ExportRequest(source=ref, out=out, max_steps=max_steps, max_errors=max_errors, overwrite=overwrite)
    written = export_env(request, fmt)
    typer.echo(f"exported {ref.kind} '{ref.name}' as {fmt} to {written}")


@export_app.command("dataset")
def export_dataset_command(
    run: Annotated[Path, typer.Option("--run", help="The run directory whose records to export.")],
    out: Annotated[Path, typer.Option("--out", help="Folder to write the dataset(s) to.")],
    fmt: Annotated[str, typer.Option("--format", help="disk (save_to_disk) | parquet | both.")] = "both",
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace a non-empty --out folder.")] = False,
) -> None:
    """Export a run's trajectories and evaluation results as Hugging Face `datasets` (schema: docs/formats.md)."""
    from trace_rl.interop.datasets_io import export_run_datasets

    for line in export_run_datasets(run, out, fmt=fmt, overwrite=overwrite):
        typer.echo(line)


__all__ = ["export_app"]
