"""Multi-turn GRPO training of LoRA adapters: the trainer backend (TRL), grouping, metrics, checkpoints, and the one
launcher (inline, accelerate, spawned) used by the train stage and by evaluate's training baselines."""
