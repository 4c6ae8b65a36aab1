"""Stage 1 of TRACE: concurrent, resumable agent rollouts of the policy on a split of the target environment.

`stage.ROLLOUT` (wrapping `stage.rollout(cfg, run_dir)`) is what `trace-rl rollout` (`trace_rl.cli.rollout`) and
`trace-rl run` call; the episode loop and the concurrent runner are the library layer `trace_rl.engine`; the tables
`trace-rl report` prints are `trace_rl.report.rollout_tables`.
"""
