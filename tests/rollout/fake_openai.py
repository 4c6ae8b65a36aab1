"""A minimal OpenAI-compatible chat server on 127.0.0.1 (stdlib only) for CLI tests.

It serves the names in `models`; a request to a name in `down` answers 503. Every answer is a short text reply (the
agent never calls tools), after `delay_s`; with `return_token_ids` it adds vLLM's `prompt_token_ids` / `token_ids`.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeOpenAI:
    def __init__(self, models: tuple[str, ...] = ("fake",), *, delay_s: float = 0.0, down: tuple[str, ...] = ()):
        self.models = set(models)
        self.down = set(down)
        self.delay_s = delay_s
        self.requests = 0
        self.bodies: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client went away (a killed rollout)
                    pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in server.models]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                server.requests += 1
                server.bodies.append(body)
                model = body.get("model")
                if model in server.down:
                    self._send(503, {"error": {"message": "server overloaded"}})
                    return
                if model not in server.models:
                    self._send(404, {"error": {"message": f"model {model} does not exist"}})
                    return
                if server.delay_s:
                    time.sleep(server.delay_s)
                n_messages = len(body.get("messages", []))
                text = f"I have noted that ({n_messages} messages so far)."
                choice: dict[str, Any] = {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
                payload: dict[str, Any] = {
                    "id": f"chatcmpl-{server.requests}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [choice],
                    "usage": {
                        "prompt_tokens": 10 * n_messages,
                        "completion_tokens": 7,
                        "total_tokens": 10 * n_messages + 7,
                    },
                }
                if (body.get("return_token_ids") or (body.get("extra_body") or {}).get("return_token_ids")) is True:
                    choice["token_ids"] = [11, 12, 13, 14, 15, 16, 2]
                    payload["prompt_token_ids"] = list(range(10 * n_messages))
                self._send(200, payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
