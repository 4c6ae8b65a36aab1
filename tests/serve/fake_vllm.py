"""An in-process stand-in for a vLLM multi-LoRA server (FastAPI, reached through httpx's ASGI transport).

`/v1/models` lists the base (no parent) and the adapters (parent = base); a chat completion answers
`"<model>: <last user message>"` with the request's `model` in the response, as vLLM does; `stream=true` answers in
SSE chunks; an unknown model is a 404 like vLLM's.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, StreamingResponse


def fake_vllm(base: str = "tiny", adapters: tuple[str, ...] = ("a", "b")) -> FastAPI:
    app = FastAPI()
    app.state.bodies = []
    served = {base, *adapters}

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({})

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        data = [{"id": base, "object": "model", "root": "/m", "parent": None}]
        data += [{"id": a, "object": "model", "root": f"/lora/{a}", "parent": base} for a in adapters]
        return JSONResponse({"object": "list", "data": data})

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        app.state.bodies.append(body)
        model = body["model"]
        if model not in served:
            return JSONResponse({"error": {"message": f"The model `{model}` does not exist."}}, status_code=404)
        last = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
        text = f"{model}: {last}"
        head = {"id": "chatcmpl-1", "created": 0, "model": model}
        if not body.get("stream"):
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            return JSONResponse({**head, "object": "chat.completion", "choices": [choice], "usage": {}})

        async def events() -> Any:
            for piece in ("", *text.split(" ")):
                delta = {"index": 0, "delta": {"content": piece}, "finish_reason": None}
                yield f"data: {json.dumps({**head, 'object': 'chat.completion.chunk', 'choices': [delta]})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app
