"""Stage 3 of TRACE: one LoRA adapter per capability environment, trained with multi-turn GRPO.

Modules: `stage` (over a run directory: which environments train, skip and resume, the `--mix` baseline) and `command`
(`trace-rl train`). The training itself is the library layer `trace_rl.training` (environments, backends, the
launcher); the token-level episode loop is `trace_rl.engine`.
"""
