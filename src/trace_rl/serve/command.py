"""`trace-rl serve`: the typer command function (registered in cli.py) and `build_app`, which it runs under uvicorn.

    trace-rl serve --run runs/demo                                   # local backend: base + PEFT adapters in process
    trace-rl serve --run runs/demo --vllm-url http://127.0.0.1:8011/v1   # forward to vLLM serving the adapters

The router is `route/router.json` of the run (written by `trace-rl route`): the label-logit classifier on the frozen
base model — in process (`--router local`, the default without vLLM) or on the vLLM server through a constrained
one-token choice (`--router server`, the default with vLLM) — or a fixed choice (`--router fixed:<name>`, e.g.
`fixed:base` to serve the unmodified model). The vLLM server must serve the adapters under their capability names
(`--lora-modules <capability>=runs/<name>/adapters/<capability> ...`).
"""

from __future__ import annotations

import ipaddress
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer

from trace_rl.artifacts.layout import ROUTE_DIR, ROUTER_FILE
from trace_rl.artifacts.router import BASE, RouterSpec, read_router
from trace_rl.artifacts.store import RunDir
from trace_rl.config import ModelConfig
from trace_rl.errors import UserError
from trace_rl.models.registry import build_client
from trace_rl.routing.router import FixedRouter, LabelLogitRouter, Router
from trace_rl.serve.app import ROUTED_MODEL, create_app
from trace_rl.serve.backends import Backend, LocalBackend, VLLMBackend

if TYPE_CHECKING:
    from fastapi import FastAPI

    from trace_rl.models.local import LocalClient

log = logging.getLogger(__name__)


def _local_client(spec: RouterSpec, model: str | None, device: str, *, adapters: bool) -> LocalClient:
    cfg = ModelConfig(kind="local", model=model or spec.base_model, device=device, adapters={})  # type: ignore[arg-type]
    client = cast("LocalClient", build_client(cfg, name="serve"))
    if adapters:
        for cap, folder in spec.adapters.items():
            client.load_adapter(cap, folder)
    return client


def build_app(
    run: Path,
    *,
    vllm_url: str | None = None,
    router: str = "auto",
    model: str | None = None,
    device: str = "auto",
    routed_model: str = ROUTED_MODEL,
    api_key: str | None = None,
    log_routes: bool = True,
) -> FastAPI:
    """The proxy app for a run: its router spec, a backend (vLLM or local) and a router over the base model."""
    run_dir = RunDir(run)
    spec = read_router(run_dir)
    if router not in ("auto", "local", "server") and not router.startswith("fixed:"):
        raise UserError(f"--router {router!r}: use auto, local, server or fixed:<name>")
    if router == "server" and vllm_url is None:
        raise UserError("--router server needs --vllm-url (the server runs the classifier)")

    backend: Backend
    local: LocalClient | None = None
    if vllm_url is not None:
        backend = VLLMBackend(vllm_url, api_key=api_key)
    else:
        local = _local_client(spec, model, device, adapters=True)
        backend = LocalBackend(local, base_name=BASE)

    chosen: Router
    if router.startswith("fixed:"):
        name = router.split(":", 1)[1]
        if name != BASE and name not in spec.names:
            raise UserError(f"--router {router}: '{name}' is not an option of {RunDir(run).router} ({spec.names})")
        chosen = FixedRouter(name)
    elif router == "server" or (router == "auto" and vllm_url is not None):
        assert vllm_url is not None
        chosen = LabelLogitRouter.server(spec, vllm_url, api_key=api_key)
    else:
        chosen = LabelLogitRouter.local(spec, local or _local_client(spec, model, device, adapters=False))
    route_log = run_dir.routes_log if log_routes else None
    return create_app(chosen, backend, routed_model=routed_model, route_log=route_log)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def unserved_options(spec: RouterSpec, served: set[str]) -> list[str]:
    """Router options (capabilities) the server does not serve; requests routed to them fall back to base."""
    return [o.name for o in spec.options if not o.is_base and o.name not in served]


def _warn_unserved(run: RunDir, vllm_url: str, api_key: str | None) -> None:
    import httpx

    from trace_rl.routing.router import api_root

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        data = httpx.get(f"{api_root(vllm_url)}/v1/models", headers=headers, timeout=10.0).json()
        served = {str(e.get("id")) for e in data.get("data") or []}
    except (httpx.HTTPError, ValueError) as exc:
        typer.echo(
            f"warning: cannot list the models of {vllm_url} yet ({exc}); routing starts when it answers", err=True
        )
        return
    missing = unserved_options(read_router(run), served)
    if missing:
        typer.echo(
            f"warning: {vllm_url} does not serve {', '.join(missing)}; conversations routed there use the base model "
            f"(start vLLM with --enable-lora --lora-modules <capability>=<adapter folder> ...)",
            err=True,
        )


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
        _warn_unserved(RunDir(run), vllm_url, os.environ.get(api_key_env) or None)
    if not _is_loopback(host):
        typer.echo(f"warning: listening on {host}, which is not loopback; the proxy has no authentication", err=True)
    backend = f"vLLM at {vllm_url}" if vllm_url else "in-process model"
    typer.echo(
        f"trace-rl serve: {run} via {backend}; POST http://{host}:{port}/v1/chat/completions model={routed_model}"
    )
    uvicorn.run(app, host=host, port=port, log_level=log_level)


__all__ = ["build_app", "serve_command"]
