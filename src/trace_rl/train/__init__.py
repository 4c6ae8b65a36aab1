"""Stage 3 of TRACE: one LoRA adapter per capability environment, trained with multi-turn GRPO.

Modules: `config` (TrainConfig), `protocol` (TrainEnv, TrainerBackend, AdapterResult), `envs` (environment adapters),
`sampler` (token-level generation seam), `episode` (token-in/token-out episode loop), `grouping` (group by seed,
outcome filtering, re-sampling, hints), `rollout` (TRL rollout_func), `trl_backend` (GRPOTrainer + PEFT), `metrics`,
`evaluate_adapter` (before/after on held-out seeds), `stage` (run directory), `command` (`trace-rl train`).
Heavy dependencies (torch, transformers, TRL) are imported only by the modules that need them.
"""
