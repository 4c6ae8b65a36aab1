"""Concurrent, resumable agent rollouts; pass^k metrics with bootstrap intervals; report and trajectory viewer.

`command.rollout(cfg, run_dir)` is what `trace-rl rollout` runs; `runner.run_rollout` is the engine;
`metrics.summarize` turns a run's trajectories into the numbers `trace-rl report` prints.
"""
