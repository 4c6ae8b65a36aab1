"""The `trace-rl` command line: `app.py` holds the typer app and `main`; one module per stage command maps that
command's flags onto the stage's config section and runs the stage (`trace_rl.stage.run_stage`)."""
