"""The run directory: every path of it, and typed read/write functions for every file one stage writes and another
reads. No other module should spell a run-directory path or parse those files; tests/artifacts/test_layout.py checks the
first (no string literal outside this package names a run-directory file or folder).

- `layout.py`       every path (`RunLayout`, `EnvLayout`, `AdapterLayout`, `TrainWorkLayout`, `EvaluateLayout`)
- `store.py`        atomic writes, append-only JSONL (`JsonlStore`), `RunDir` (layout + manifest + stage records)
- `manifest.py`     `manifest.json` (`RunManifest`, `StageRecord`, `layout_version`)
- `trajectories.py` episode stores and `rollout/plans.json`
- `capabilities.py` diagnose's files (`capabilities.json` and its one reader)
- `environments.py` `envs/<capability>/`: spec, status, calibration, task pool
- `adapters.py`     `adapters/<capability>/`: train_config, done, eval summaries, baseline, metrics
- `router.py`       `route/router.json`
- `evaluation.py`   `route/accuracy.json`, `evaluate/comparison.json`, evaluate's arm index and episode claims
- `serving.py`      `serve/routes.jsonl`
"""
