"""Stage 4 of TRACE: route each task to one adapter, with the frozen base model as the classifier (TRACE §3.5)."""

from trace_rl.route.router import FixedRouter, LabelLogitRouter, RouteDecision, Router, ScriptedRouter
from trace_rl.route.spec import BASE, RouteOption, RouterSpec, load_router_spec, spec_from_run

__all__ = [
    "BASE",
    "FixedRouter",
    "LabelLogitRouter",
    "RouteDecision",
    "RouteOption",
    "Router",
    "RouterSpec",
    "ScriptedRouter",
    "load_router_spec",
    "spec_from_run",
]
