"""`trace-rl serve`: the typer command (registered in cli/app.py); it runs `serve.build.build_app` under uvicorn.

    trace-rl serve --run runs/demo                                   # local backend: base + PEFT adapters in process
    trace-rl serve --run runs/demo --vllm-url http://127.0.0.1:8011/v1   # forward to vLLM serving the adapters

The router is `route/router.json` of the run (written by `trace-rl route`): the label-logit classifier on the frozen
base model — in process (`--router local`, the default without vLLM) or on the vLLM server through a constrained
one-token choice (`--router server`, the default with vLLM) — or a fixed choice (`--router fixed:<name>`, e.g.
`fixed:base` to serve the unmodified model). The vLLM server must serve the adapters under their capability names
(`--lora-modules <capability>=runs/<name>/adapters/<capability> ...`).

Facing a network: `--api-key` (better: $TRACE_RL_SERVE_API_KEY, which `ps` does not show) is required of every
client on every route but /health; listening on a non-loopback interface without one is refused (`--no-auth` to
insist). The upstream key ($VLLM_API_KEY, `--api-key-env`) is sent to vLLM only, never taken from or shown to
clients. `--max-body-mb`, `--max-tokens` (the base model's context caps it anyway) and `--max-concurrent` bound
what one request can take (docs/hardening.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from trace_rl.artifacts.layout import ROUTE_DIR, ROUTER_FILE
from trace_rl.artifacts.store import RunDir
from trace_rl.errors import UserError
from trace_rl.serve.app import ROUTED_MODEL, ServeLimits
from trace_rl.serve.build import build_app, is_loopback, unserved_warning

API_KEY_ENV = "TRACE_RL_SERVE_API_KEY"


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
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            envvar=API_KEY_ENV,
            show_envvar=True,
            help="Key clients must send (Authorization: Bearer <key>) on every route but /health.",
        ),
    ] = None,
    no_auth: Annotated[
        bool, typer.Option("--no-auth", help="Serve a non-loopback interface without an API key anyway.")
    ] = False,
    max_body_mb: Annotated[float, typer.Option("--max-body-mb", help="Largest request body (413 above).")] = 8.0,
    max_tokens: Annotated[
        int | None, typer.Option("--max-tokens", help="Largest max_tokens accepted (the model's context caps it too).")
    ] = None,
    max_concurrent: Annotated[
        int, typer.Option("--max-concurrent", help="Generations in flight; more requests wait their turn.")
    ] = 64,
) -> None:
    """OpenAI-compatible endpoint that routes each conversation once to its adapter and forwards it."""
    if not 0 <= port <= 65535:
        raise UserError(f"--port {port}: must be 0 to 65535")
    import uvicorn

    if device not in ("auto", "cpu", "cuda"):
        raise UserError(f"--device {device!r}: use auto, cpu or cuda")
    limits = serve_limits(api_key, max_body_mb, max_tokens, max_concurrent)
    if limits.api_key is None and not is_loopback(host) and not no_auth:
        raise UserError(
            f"--host {host} is not loopback: set --api-key (or ${API_KEY_ENV}) so clients must authenticate, "
            "or pass --no-auth to serve without"
        )
    app = build_app(
        run,
        vllm_url=vllm_url,
        router=router,
        model=model,
        device=device,
        routed_model=routed_model,
        api_key=os.environ.get(api_key_env) or None,
        limits=limits,
    )
    if vllm_url is not None:
        warning = unserved_warning(RunDir(run), vllm_url, os.environ.get(api_key_env) or None)
        if warning:
            typer.echo(warning, err=True)
    if limits.api_key is None and not is_loopback(host):
        typer.echo(f"warning: listening on {host}, which is not loopback, without authentication (--no-auth)", err=True)
    backend = f"vLLM at {vllm_url}" if vllm_url else "in-process model"
    typer.echo(
        f"trace-rl serve: {run} via {backend}; POST http://{host}:{port}/v1/chat/completions model={routed_model}"
    )
    uvicorn.run(app, host=host, port=port, log_level=log_level)


def serve_limits(api_key: str | None, max_body_mb: float, max_tokens: int | None, max_concurrent: int) -> ServeLimits:
    """The proxy's limits from the command's options (bad values are one-line UserErrors)."""
    if api_key is not None and (not api_key.strip() or not api_key.isascii() or not api_key.isprintable()):
        raise UserError(f"--api-key / ${API_KEY_ENV}: must be non-empty printable ASCII")
    if not 0 < max_body_mb <= 1024:
        raise UserError(f"--max-body-mb {max_body_mb}: must be above 0 and at most 1024")
    if max_tokens is not None and max_tokens < 1:
        raise UserError(f"--max-tokens {max_tokens}: must be at least 1")
    if max_concurrent < 1:
        raise UserError(f"--max-concurrent {max_concurrent}: must be at least 1")
    return ServeLimits(
        api_key=api_key.strip() if api_key else None,
        max_body_bytes=int(max_body_mb * (1 << 20)),
        max_tokens=max_tokens,
        max_concurrent=max_concurrent,
    )


__all__ = ["API_KEY_ENV", "serve_command", "serve_limits"]
