"""An OpenAI-compatible chat server on 127.0.0.1 (stdlib only) that misbehaves on a schedule.

`schedule(model, n)` names what the n-th request (1-based) for the served model name `model` gets, so a test can give
each stage its own schedule by giving each stage its own model name:

- `ok`: a short text reply (the agent says something and calls no tool);
- `drop`: status and headers, half of the body, then the connection is cut (the client sees a broken response);
- `http_500`: an HTTP 500 with an error body;
- `stall`: nothing for `stall_s` (longer than the client's timeout), then an answer to a client that has gone;
- `no_choices`: HTTP 200 whose body has no choices (not a chat completion);
- `bad_arguments`: a tool call whose arguments are not JSON (cut off mid-object);
- `unknown_tool`: a call to a tool the environment does not have.

Every request is logged with its fault and its messages, so a test can see that each failed request was retried.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Fault = Literal["ok", "drop", "http_500", "stall", "no_choices", "bad_arguments", "unknown_tool"]
RETRYABLE: frozenset[str] = frozenset({"drop", "http_500", "stall", "no_choices"})  # the client retries these
UNKNOWN_TOOL = "launch_rockets"
BAD_ARGUMENTS = '{"query": "the hobbit", "limit": '


@dataclass
class Served:
    model: str
    n: int
    fault: Fault
    messages: list[dict[str, Any]]


def _completion(n: int, model: str, message: dict[str, Any], n_messages: int) -> dict[str, Any]:
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10 * n_messages, "completion_tokens": 7, "total_tokens": 10 * n_messages + 7},
    }


def _tool_call(n: int, name: str, arguments: str) -> dict[str, Any]:
    call = {"id": f"call_fault_{n}", "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


class FaultServer:
    def __init__(self, schedule: Callable[[str, int], Fault], *, models: tuple[str, ...], stall_s: float = 1.5) -> None:
        self.schedule = schedule
        self.models = models
        self.stall_s = stall_s
        self.served: list[Served] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def _send(self, status: int, payload: dict[str, Any], *, cut: bool = False) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if cut:  # half the body, then the connection goes away
                        self.wfile.write(data[: len(data) // 2])
                        self.wfile.flush()
                        self.connection.shutdown(socket.SHUT_RDWR)
                        self.close_connection = True
                        return
                    self.wfile.write(data)
                except OSError:  # the client went away (it timed out first)
                    pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    data = [{"id": m, "object": "model"} for m in server.models]
                    self._send(200, {"object": "list", "data": data})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                messages, model = body.get("messages", []), str(body.get("model"))
                with server._lock:
                    n = 1 + sum(s.model == model for s in server.served)
                    fault = server.schedule(model, n)
                    server.served.append(Served(model, n, fault, messages))
                ok = _completion(n, model, {"role": "assistant", "content": "Noted."}, len(messages))
                if fault == "drop":
                    self._send(200, ok, cut=True)
                elif fault == "http_500":
                    self._send(500, {"error": {"message": "internal server error (scheduled)"}})
                elif fault == "stall":
                    time.sleep(server.stall_s)
                    self._send(200, ok)
                elif fault == "no_choices":
                    self._send(200, {**ok, "choices": []})
                elif fault == "bad_arguments":
                    message = _tool_call(n, "search_catalog", BAD_ARGUMENTS)
                    self._send(200, _completion(n, model, message, len(messages)))
                elif fault == "unknown_tool":
                    message = _tool_call(n, UNKNOWN_TOOL, '{"target": "moon"}')
                    self._send(200, _completion(n, model, message, len(messages)))
                else:
                    self._send(200, ok)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def of(self, model: str) -> list[Served]:
        return [s for s in self.served if s.model == model]

    def counts(self, model: str | None = None) -> Counter[str]:
        """Requests per fault (for one model name, or all)."""
        return Counter(s.fault for s in self.served if model in (None, s.model))

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
