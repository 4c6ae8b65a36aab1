"""`trace-rl serve`: the typer command (registered in cli/app.py); it runs `serve.build.build_app` under uvicorn.

    trace-rl serve --run runs/demo                                   # local backend: base + PEFT adapters in process
    trace-rl serve --run runs/demo --vllm-url http://127.0.0.1:8011/v1   # forward to vLLM serving the adapters

The router is `route/router.json` of the run (written by `trace-rl route`): the label-logit classifier on the frozen
base model — in process (`--router local`, the default without vLLM) or on the vLLM server through a constrained
one-token choice (`--router server`, the default with vLLM) — or a fixed choice (`--router fixed:<name>`, e.g.
`fixed:base` to serve the unmodified model). The vLLM server must serve the adapters under their capability names
(`--lora-modules <capability>=runs/<name>/adapters/<capability> ...`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from trace_rl.artifacts.layout import ROUTE_DIR, ROUTER_FILE
from trace_rl.artifacts.store import RunDir
from trace_rl.errors import UserError
from trace_rl.serve.app import ROUTED_MODEL
from trace_rl.serve.build import build_app, is_loopback, unserved_warning


def serve_command(
    run: Annotated[Path, typer.Option("--run", help=f"Run directory with {ROUTE_DIR}/{ROUTER_FILE}, e.g. runs/demo.")],
    host: Annotated[str, typer.Option("--host", help="Interface to listen on (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8000,
    vllm_url: Annotated[
        str | None,
        typer.Option("--vllm-url", help="vLLM server with the adapters loaded, e.g. http://127.0.0.1:8011/v1."),
    ] = None,
    router: Annotated[
        str, typer.Option("--router", help="auto | local | server | fixed:<name> (fixed:base serves the base model).")
    ] = "auto",
    model: Annotated[
        str | None, typer.Option("--model", help=f"Base model folder or alias (default: {ROUTER_FILE}'s base_model).")
    ] = None,
    device: Annotated[str, typer.Option("--device", help="auto | cpu | cuda, for in-process models.")] = "auto",
    routed_model: Annotated[
        str, typer.Option("--routed-model", help="Model name clients use to get routing.")
    ] = ROUTED_MODEL,
    api_key_env: Annotated[
        str, typer.Option("--api-key-env", help="Environment variable with the vLLM server's API key, if any.")
    ] = "VLLM_API_KEY",
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn log level.")] = "info",
) -> None:
    """OpenAI-compatible endpoint that routes each conversation once to its adapter and forwards it."""
    import uvicorn

    if device not in ("auto", "cpu", "cuda"):
        raise UserError(f"--device {device!r}: use auto, cpu or cuda")
    app = build_app(
        run,
        vllm_url=vllm_url,
        router=router,
        model=model,
        device=device,
        routed_model=routed_model,
        api_key=os.environ.get(api_key_env) or None,
    )
    if vllm_url is not None:
        warning = unserved_warning(RunDir(run), vllm_url, os.environ.get(api_key_env) or None)
        if warning:
            typer.echo(warning, err=True)
    if not is_loopback(host):
        typer.echo(f"warning: listening on {host}, which is not loopback; the proxy has no authentication", err=True)
    backend = f"vLLM at {vllm_url}" if vllm_url else "in-process model"
    typer.echo(
        f"trace-rl serve: {run} via {backend}; POST http://{host}:{port}/v1/chat/completions model={routed_model}"
    )
    uvicorn.run(app, host=host, port=port, log_level=log_level)


__all__ = ["serve_command"]
