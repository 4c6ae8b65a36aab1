"""One ToolSandbox episode's message log and world: every agent text turn, tool call and result in position.

ToolSandbox (Lu et al. 2024) runs each tool call as Python in a console: the agent's call becomes an
AGENT -> EXECUTION_ENVIRONMENT message (`call_N_parameters = {...}` / `call_N_response = tool(**...)` /
`print(repr(call_N_response))`), the result an EXECUTION_ENVIRONMENT -> AGENT message holding the printed `repr` or
the last traceback line (`ExceptionType: message`), with the call's tool trace (name, arguments with defaults,
result) on success. World writes are stamped with the index of the message being processed. Parallel calls run in
every order; if any order fails, that order's results and world are kept (upstream's pessimistic rule). Agent and user
text are logged in position, so the evaluator sees the whole conversation as ToolSandbox's does.

Own implementation of the behaviour documented by the data package (README §3.3, §6) and `tools.json`.
"""

from __future__ import annotations

import inspect
import itertools
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trace_rl.envs.toolsandbox import tools as T
from trace_rl.envs.toolsandbox import utilities as U
from trace_rl.envs.toolsandbox.similarity import NOT_GIVEN
from trace_rl.envs.toolsandbox.tables import Tables

ToolFn = Callable[..., Any]

TOOLS: dict[str, ToolFn] = {
    name: getattr(module, name)
    for module, names in (
        (
            T,
            "add_contact modify_contact remove_contact search_contacts send_message_with_phone_number search_messages "
            "add_reminder modify_reminder search_reminder remove_reminder set_low_battery_mode_status "
            "get_low_battery_mode_status set_location_service_status get_location_service_status "
            "set_cellular_service_status get_cellular_service_status set_wifi_status get_wifi_status "
            "get_current_location end_conversation",
        ),
        (
            U,
            "get_current_timestamp timestamp_to_datetime_info datetime_info_to_timestamp shift_timestamp "
            "timestamp_diff "
            "seconds_to_hours_minutes_seconds unit_conversion calculate_lat_lon_distance search_holiday search_lat_lon "
            "search_location_around_lat_lon search_weather_around_lat_lon search_stock convert_currency",
        ),
    )
    for name in names.split()
}

# Argument types of the tools ToolSandbox type-checks (its `@typechecked`): name -> (allowed types, shown type).
_S, _F, _I, _B, _N, _G = str, float, int, bool, type(None), type(NOT_GIVEN)
_U = "typing.Union[{}, tool_sandbox.common.utils.NotGiven]"
_G_STR, _G_FLOAT, _G_BOOL = ({_S, _G}, _U.format("str")), ({_F, _G}, _U.format("float")), ({_B, _G}, _U.format("bool"))
_G_OPT_FLOAT = ({_F, _N, _G}, _U.format("float, NoneType"))
_STR, _FLOAT, _INT, _BOOL = ({_S}, f"{_S}"), ({_F}, f"{_F}"), ({_I}, f"{_I}"), ({_B}, f"{_B}")
_OPT_STR, _OPT_FLOAT, _OPT_INT = (
    ({_S, _N}, "typing.Optional[str]"),
    ({_F, _N}, "typing.Optional[float]"),
    (
        {_I, _N},
        "typing.Optional[int]",
    ),
)
TYPECHECKED: dict[str, dict[str, tuple[set[type], str]]] = {
    "add_contact": {"name": _STR, "phone_number": _STR, "relationship": _OPT_STR, "is_self": _BOOL},
    "modify_contact": {
        "person_id": _STR,
        "name": _G_STR,
        "phone_number": _G_STR,
        "relationship": _G_STR,
        "is_self": _G_BOOL,
    },
    "remove_contact": {"person_id": _STR},
    "send_message_with_phone_number": {"phone_number": _STR, "content": _STR},
    "search_messages": {
        **dict.fromkeys(
            [
                "message_id",
                "sender_person_id",
                "sender_phone_number",
                "recipient_person_id",
                "recipient_phone_number",
                "content",
            ],
            _G_STR,
        ),
        "creation_timestamp_lowerbound": _G_FLOAT,
        "creation_timestamp_upperbound": _G_FLOAT,
    },
    "add_reminder": {"content": _STR, "reminder_timestamp": _FLOAT, "latitude": _OPT_FLOAT, "longitude": _OPT_FLOAT},
    "modify_reminder": {
        "reminder_id": _STR,
        "content": _G_STR,
        "reminder_timestamp": _G_FLOAT,
        "latitude": _G_OPT_FLOAT,
        "longitude": _G_OPT_FLOAT,
    },
    "search_reminder": {
        "reminder_id": _G_STR,
        "content": _G_STR,
        **dict.fromkeys(
            [
                "creation_timestamp_lowerbound",
                "creation_timestamp_upperbound",
                "reminder_timestamp_lowerbound",
                "reminder_timestamp_upperbound",
                "latitude",
                "longitude",
            ],
            _G_FLOAT,
        ),
    },
    "remove_reminder": {"reminder_id": _STR},
    "get_current_timestamp": {},
    "timestamp_to_datetime_info": {"timestamp": _FLOAT},
    "datetime_info_to_timestamp": dict.fromkeys(["year", "month", "day", "hour", "minute", "second"], _INT),
    "shift_timestamp": {"timestamp": _FLOAT, **dict.fromkeys(["weeks", "days", "hours", "minutes", "seconds"], _INT)},
    "timestamp_diff": {"timestamp_0": _FLOAT, "timestamp_1": _FLOAT},
    "seconds_to_hours_minutes_seconds": {"seconds": _FLOAT},
    "unit_conversion": {"amount": _FLOAT, "from_unit": _STR, "to_unit": _STR},
    "calculate_lat_lon_distance": dict.fromkeys(["latitude_0", "longitude_0", "latitude_1", "longitude_1"], _FLOAT),
    "search_holiday": {"holiday_name": _STR, "year": _OPT_INT},
    "search_lat_lon": {"latitude": _FLOAT, "longitude": _FLOAT},
    "search_location_around_lat_lon": {"location": _STR, "latitude": _OPT_FLOAT, "longitude": _OPT_FLOAT},
    "search_weather_around_lat_lon": {"days": _INT, "latitude": _OPT_FLOAT, "longitude": _OPT_FLOAT},
    "search_stock": {"query": _STR},
    "convert_currency": {"amount": _FLOAT, "from_currency_code": _STR, "to_currency_code": _STR},
}


def _type_ok(value: Any, allowed: set[type]) -> bool:
    if type(value) in allowed:
        return True
    return isinstance(value, int) and (float in allowed or (isinstance(value, bool) and int in allowed))


def exception_line(exc: BaseException) -> str:
    """The last traceback line: `Type: message`, module-qualified for non-builtin exceptions."""
    name = getattr(exc, "qualified", None)
    if name is None:
        module = type(exc).__module__
        name = type(exc).__qualname__ if module == "builtins" else f"{module}.{type(exc).__qualname__}"
    text = str(exc)
    return f"{name}: {text}" if text else name


@dataclass
class CallResult:
    content: str
    exception: str | None
    trace: str | None


def call_tool(ctx: T.ToolContext, name: str, arguments: dict[str, Any]) -> CallResult:
    """Run one tool as ToolSandbox's console would: bind, type-check, call, trace (arguments with defaults)."""
    fn = TOOLS[name]
    params = [p for p in inspect.signature(fn).parameters.values() if p.name != "ctx"]
    try:
        bound = inspect.Signature(params).bind(**arguments)
        bound.apply_defaults()
        for arg, value in bound.arguments.items():
            spec = TYPECHECKED.get(name, {}).get(arg)
            if spec is not None and not _type_ok(value, spec[0]):
                raise TypeError(f"Parameter '{arg}' is of type '{type(value)}', but expected '{spec[1]}'.")
        result = fn(ctx, **bound.arguments)
    except Exception as exc:
        line = exception_line(exc)
        return CallResult(content=line, exception=line, trace=None)
    traced = {k: v for k, v in bound.arguments.items() if v is not NOT_GIVEN}
    trace = json.dumps({"tool_name": name, "arguments": traced, "result": result}, ensure_ascii=False)
    return CallResult(content=repr(result), exception=None, trace=trace)


def call_code(prefix: str, name: str, arguments: dict[str, Any]) -> str:
    return (
        f"{prefix}_parameters = {arguments}\n"
        f"{prefix}_response = {name}(**{prefix}_parameters)\n"
        f"print(repr({prefix}_response))"
    )


class Sandbox:
    """The SANDBOX log and world of one episode of one scenario."""

    def __init__(self, scenario: dict[str, Any], now: float) -> None:
        self.scenario = scenario
        self.tables = Tables.from_initial(scenario["initial_databases"])
        self.ctx = T.ToolContext(self.tables, now, random.Random(0))
        self.to_execution = scenario.get("agent_to_execution_tool_name") or {}
        self.allowed = set(scenario["tool_allow_list"])
        self.agent_names = set(scenario["agent_facing_tool_names"])
        self.start_index = self.tables.max_index
        self.n_calls = 0

    @property
    def active(self) -> bool:
        return bool(self.tables.last_message()["conversation_active"])

    @property
    def new_messages(self) -> int:
        return self.tables.max_index - self.start_index

    def _add(self, sender: str, recipient: str, content: str | None, **extra: Any) -> int:
        row = {"sender": sender, "recipient": recipient, "content": content, "visible_to": [sender, recipient], **extra}
        return self.tables.add_message(row)

    def say(self, sender: str, text: str) -> None:
        """A text turn: AGENT -> USER or USER -> AGENT."""
        self._add(sender, "USER" if sender == "AGENT" else "AGENT", text)

    def agent_calls(self, calls: list[tuple[str, dict[str, Any]]]) -> list[CallResult]:
        """Execute the agent's tool calls (agent-facing names) of one turn; results in call order."""
        ids = []
        for name, arguments in calls:
            execution = self.to_execution.get(name, name)
            prefix = f"call_{self.n_calls}"
            self.n_calls += 1
            ids.append((prefix, name, execution, arguments))
            self._add(
                "AGENT",
                "EXECUTION_ENVIRONMENT",
                call_code(prefix, execution, arguments),
                openai_tool_call_id=prefix,
                openai_function_name=name,
            )
        results = self._run_all([(execution, arguments) for _, _, execution, arguments in ids])
        for (prefix, name, _, _), result in zip(ids, results, strict=True):
            self._add(
                "EXECUTION_ENVIRONMENT",
                "AGENT",
                result.content,
                openai_tool_call_id=prefix,
                openai_function_name=name,
                tool_call_exception=result.exception,
                tool_trace=[result.trace] if result.trace else None,
            )
        return results

    def _run_all(self, calls: list[tuple[str, dict[str, Any]]]) -> list[CallResult]:
        if len(calls) <= 1:
            return [self._run(*call) for call in calls]
        original = self.tables.copy()
        first: tuple[Tables, list[CallResult]] | None = None
        for order in itertools.permutations(range(len(calls))):
            self.tables = self.ctx.tables = original.copy()
            results = [self._run(*calls[i]) for i in order]
            if first is None:
                first = (self.tables, results)
            if any(r.exception is not None for r in results):
                return results  # the failing order's results and world, as upstream keeps them
        assert first is not None
        self.tables = self.ctx.tables = first[0]
        return first[1]

    def _run(self, name: str, arguments: dict[str, Any]) -> CallResult:
        if name not in TOOLS:
            line = f"NameError: name '{name}' is not defined"
            return CallResult(content=line, exception=line, trace=None)
        return call_tool(self.ctx, name, arguments)

    def end_conversation(self) -> CallResult:
        """The user's `end_conversation()` call and its result."""
        self._add("USER", "EXECUTION_ENVIRONMENT", call_code("user_end", "end_conversation", {}))
        result = call_tool(self.ctx, "end_conversation", {})
        self._add(
            "EXECUTION_ENVIRONMENT",
            "USER",
            result.content,
            tool_call_exception=result.exception,
            tool_trace=[result.trace] if result.trace else None,
        )
        return result


__all__ = ["TOOLS", "CallResult", "Sandbox", "call_tool", "exception_line"]
