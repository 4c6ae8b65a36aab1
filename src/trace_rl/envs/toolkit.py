"""Toolkits: typed Python methods tagged READ / WRITE / GENERIC, exposed to agents as OpenAI function tools.

Follows τ²-bench's toolkit contract (docs/tau2-fidelity.md §3): arguments are not validated at call time, any
exception becomes the tool result `Error: <message>` (the episode goes on), an unknown tool gives
`Error: Tool '<name>' not found.`, and only WRITE tools mutate state (they alone are replayed when scoring).
Schemas are generated from signatures and Google-style docstrings unless a domain supplies exact ones (tools.json).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import typing
from collections.abc import Callable
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from trace_rl.types import Message, ToolCall

F = TypeVar("F", bound=Callable[..., Any])


class ToolType(StrEnum):
    READ = "read"
    WRITE = "write"
    GENERIC = "generic"
    THINK = "think"


def tool(kind: ToolType, *, mutates_state: bool | None = None) -> Callable[[F], F]:
    """Mark a toolkit method as a tool. WRITE tools mutate state unless told otherwise."""

    def mark(fn: F) -> F:
        fn.__tool_type__ = kind  # type: ignore[attr-defined]
        fn.__mutates_state__ = (kind == ToolType.WRITE) if mutates_state is None else mutates_state  # type: ignore[attr-defined]
        return fn

    return mark


class DB(BaseModel):
    """A domain database: typed records, canonical dump, stable hash."""

    model_config = ConfigDict(extra="forbid")

    def canonical_json(self) -> str:
        return json.dumps(self.model_dump(mode="python"), sort_keys=True, default=str)

    def get_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()


def format_tool_output(value: Any) -> str:
    """τ²'s tool-result encoding: records dumped to JSON, strings raw, numbers via str()."""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return json.dumps(value.model_dump(mode="python"), default=str)
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(_dump(value), default=str)
    return str(value)


def _dump(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="python")
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_dump(v) for v in value]
    return value


class ToolKit:
    """Base class: subclasses define `@tool(...)` methods over `self.db`."""

    def __init__(self, db: DB | None) -> None:
        self.db = db

    @classmethod
    def tool_methods(cls) -> dict[str, Callable[..., Any]]:
        """Tools in definition order (the order agents see them)."""
        found: dict[str, Callable[..., Any]] = {}
        for klass in reversed(cls.__mro__):
            for name, member in vars(klass).items():
                if callable(member) and hasattr(member, "__tool_type__"):
                    found.pop(name, None)
                    found[name] = member
        return found

    @property
    def tool_names(self) -> list[str]:
        return list(self.tool_methods())

    def tool_type(self, name: str) -> ToolType | None:
        fn = self.tool_methods().get(name)
        return None if fn is None else fn.__tool_type__  # type: ignore[attr-defined]

    def mutates_state(self, name: str) -> bool:
        fn = self.tool_methods().get(name)
        return bool(fn is not None and fn.__mutates_state__)  # type: ignore[attr-defined]

    def has_method(self, name: str) -> bool:
        return not name.startswith("_") and callable(getattr(self, name, None))

    def use_tool(self, tool_name: str, /, **kwargs: Any) -> Any:
        """Call a tool; raises on any error (unknown tool included)."""
        if tool_name not in self.tool_methods():
            raise ValueError(f"Tool '{tool_name}' not found.")
        return getattr(self, tool_name)(**kwargs)

    def call_method(self, method_name: str, /, **kwargs: Any) -> Any:
        """Call any public toolkit method (initialization actions and env assertions may use non-tools)."""
        if not self.has_method(method_name):
            raise ValueError(f"Method '{method_name}' not found.")
        return getattr(self, method_name)(**kwargs)

    def execute(self, call: ToolCall) -> Message:
        """Run a tool call and return the tool message; never raises."""
        if call.parse_error is not None:
            content, error = f"Error: could not parse arguments of '{call.name}': {call.parse_error}", True
        else:
            try:
                content, error = format_tool_output(self.use_tool(call.name, **call.arguments)), False
            except Exception as exc:
                content, error = f"Error: {_error_text(exc)}", True
        return Message(role="tool", content=content, tool_call_id=call.id, name=call.name, error=error)

    def schemas(self) -> list[dict[str, Any]]:
        return [function_schema(name, fn) for name, fn in self.tool_methods().items()]


def _error_text(exc: Exception) -> str:
    if isinstance(exc, KeyError) and exc.args:
        return repr(exc.args[0])
    if isinstance(exc, TypeError):
        # "ToolKit.create_task() got an unexpected keyword argument 'x'" -> drop the class prefix
        return re.sub(r"^\w+\.", "", str(exc))
    return str(exc)


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array"}


def _json_type(annotation: Any) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    if origin in (list, tuple):
        return {"type": "array", "items": _json_type(args[0]) if args else {}}
    if origin is dict:
        return {"type": "object"}
    if origin is typing.Literal:
        return {"type": "string", "enum": list(args)}
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        non_none = [a for a in args if a is not type(None)]
        if len(non_none) == 1:
            return _json_type(non_none[0])
        return {"anyOf": [_json_type(a) for a in non_none]}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation.model_json_schema()
    return {}


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Google style: summary, then `Args:` with `name: text` lines."""
    summary_lines: list[str] = []
    params: dict[str, str] = {}
    section = "summary"
    current: str | None = None
    for raw in inspect.cleandoc(doc or "").splitlines():
        line = raw.strip()
        if line in ("Args:", "Arguments:", "Parameters:"):
            section = "args"
            continue
        if line in ("Returns:", "Raises:", "Example:", "Examples:"):
            section = "other"
            continue
        if section == "summary" and line:
            summary_lines.append(line)
        elif section == "args" and line:
            m = re.match(r"^(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", line)
            if m:
                current = m.group(1)
                params[current] = m.group(2)
            elif current:
                params[current] += " " + line
    return " ".join(summary_lines), params


def function_schema(name: str, fn: Callable[..., Any]) -> dict[str, Any]:
    """OpenAI function schema from a method's signature and Google-style docstring."""
    description, param_docs = _parse_docstring(fn.__doc__ or "")
    hints = typing.get_type_hints(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in inspect.signature(fn).parameters.items():
        if pname == "self":
            continue
        prop = _json_type(hints.get(pname, str))
        if pname in param_docs:
            prop["description"] = param_docs[pname]
        if param.default is inspect.Parameter.empty:
            required.append(pname)
        else:
            prop["default"] = param.default
        properties[pname] = prop
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }
