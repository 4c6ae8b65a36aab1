"""Stage 5 of TRACE: the routed agent against the base model and the paper's baselines on held-out tasks.

Arms (`arms/`, one module each, by name in `arms.ARMS_BY_NAME`): base, trace (routed adapters), grpo_target, gepa,
single_best, multi_capability — each at the same rollout budget (`budget.py`; the trained baselines in `baselines.py`),
each resumable in its own JSONL; pass^k with bootstrap intervals and paired differences to base (`compare.py`);
`stage.run_evaluate` writes `evaluate/comparison.json` (schema in `artifacts/evaluation.py`).
"""
