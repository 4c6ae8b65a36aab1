"""Assembling the routing proxy for a run: its router spec, a backend (vLLM or the base model in process) and a router
over the base model (`build_app`), and what a vLLM server does not serve (`unserved_warning`).

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
from pathlib import Path
from typing import TYPE_CHECKING, cast

from trace_rl.artifacts.router import BASE, RouterSpec, read_router
from trace_rl.artifacts.store import RunDir
from trace_rl.config import ModelConfig
from trace_rl.errors import UserError
from trace_rl.models.registry import build_client
from trace_rl.routing.router import FixedRouter, LabelLogitRouter, Router
from trace_rl.serve.app import ROUTED_MODEL, ServeLimits, create_app
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
    limits: ServeLimits | None = None,
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
    return create_app(chosen, backend, routed_model=routed_model, route_log=route_log, limits=limits)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def unserved_options(spec: RouterSpec, served: set[str]) -> list[str]:
    """Router options (capabilities) the server does not serve; requests routed to them fall back to base."""
    return [o.name for o in spec.options if not o.is_base and o.name not in served]


def unserved_warning(run: RunDir, vllm_url: str, api_key: str | None) -> str | None:
    """A warning line when the vLLM server cannot be listed yet or does not serve every routed capability."""
    import httpx

    from trace_rl.routing.router import api_root

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        data = httpx.get(f"{api_root(vllm_url)}/v1/models", headers=headers, timeout=10.0).json()
        served = {str(e.get("id")) for e in data.get("data") or []}
    except (httpx.HTTPError, ValueError) as exc:
        return f"warning: cannot list the models of {vllm_url} yet ({exc}); routing starts when it answers"
    missing = unserved_options(read_router(run), served)
    if not missing:
        return None
    return (
        f"warning: {vllm_url} does not serve {', '.join(missing)}; conversations routed there use the base model "
        f"(start vLLM with --enable-lora --lora-modules <capability>=<adapter folder> ...)"
    )


__all__ = ["build_app", "is_loopback", "unserved_options", "unserved_warning"]
