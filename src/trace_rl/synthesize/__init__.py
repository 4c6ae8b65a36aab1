"""Stage 2 of TRACE: synthesize one capability-targeted training environment per selected capability.

`run_synthesize(run, cfg, clients)` (stage.py) reads `diagnose/capabilities.json` and the train-split rollouts and
writes `envs/<capability>/` per capability: a declarative spec (spec.json), generator code where an author model
wrote it, validation, leak-check and calibration reports, and a final status. Generators: `from_target.py` (seeded
variants of the target's own train tasks, no LLM) and `llm_author.py` (an author model's generator, run only in
`trace_rl.envs.synthetic.sandbox`). Environments load through `trace_rl.envs.synthetic`.
"""
