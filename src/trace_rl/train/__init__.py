"""Stage 3 of TRACE: one LoRA adapter per capability environment, trained with multi-turn GRPO.

Module: `stage` (over a run directory: which environments train, skip and resume, the `--mix` baseline); the command
`trace-rl train` is `trace_rl.cli.train`. The training itself is the library layer `trace_rl.training` (environments,
backends, the launcher); the token-level episode loop is `trace_rl.engine`.
"""
