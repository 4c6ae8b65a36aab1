"""`trace-rl serve`: an OpenAI-compatible proxy that routes each conversation once to its adapter (TRACE §3.5) and
forwards it to vLLM multi-LoRA or to the in-process model. `app.py` (the FastAPI app), `backends.py`, `wire.py`
(OpenAI wire format), `build.py` (the proxy for a run; the command is `trace_rl.cli.serve`),
and `models/vllm_server.py` starts and stops vLLM servers."""
