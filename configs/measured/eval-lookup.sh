#!/bin/bash
# Reproduces runs/eval-lookup: the lookup_answer adapter (trained as in runs/train-smollm2-v2, or copied from it),
# the router over {lookup_answer, base} and its accuracy, then base vs TRACE on the library test split.
set -euo pipefail
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE TRL_EXPERIMENTAL_SILENCE=1 TOKENIZERS_PARALLELISM=false
PY=.venv/bin/python
RUN=runs/eval-lookup
TRAINED=runs/train-smollm2-v2/adapters/lookup_answer
if [ ! -f "$TRAINED/done.json" ]; then  # 8 GRPO steps, 44 min on 2 shared cores
  $PY -m trace_rl.cli.train --run runs/train-smollm2-v2 --env library:lookup_answer --model smollm2-135m --device cpu \
    --bf16 auto --steps 8 -k 4 -g 2 --lr 1e-3 --max-turn-tokens 40 --max-episode-tokens 256 --max-turns 3 \
    --hint-fraction 0 --eval-trials 2 --held-out 12 --set resample_attempts=1 --set save_steps=4 --set num_threads=1
fi
$PY - <<'PY'
import shutil, time
from pathlib import Path
from trace_rl.config import load_config
from trace_rl.artifacts.store import RunDir, atomic_write_json
cfg = load_config(Path("configs/measured/eval-lookup.yaml"))
run = Path("runs/eval-lookup")
RunDir(run).ensure(config=cfg.model_dump(mode="json"), command="configs/measured/eval-lookup.sh")
dst = run / "adapters" / "lookup_answer"
if not dst.exists():
    shutil.copytree("runs/train-smollm2-v2/adapters/lookup_answer", dst)
cap = {"name": "lookup_answer", "status": "pending",
       "definition": "Looking the asked-for fact up in the catalog with the right tool and answering with the exact "
                     "value found in the record (the author's name, the year), instead of describing the book."}
atomic_write_json(run / "diagnose" / "capabilities.json", {
  "selected": [cap], "candidates": [cap], "params": {"rho": 0.1, "delta": 0.2, "n_runs": 1, "k": 1},
  "splits": ["train"], "n_trajectories": {}, "analyst": "hand-written for runs/eval-lookup (a family stand-in)",
  "warnings": ["written by hand: the adapter is a library-family stand-in, not a diagnosed capability"],
  "created_at": time.time()})
PY
/usr/bin/time -f "route: %e s" .venv/bin/trace-rl route --run $RUN
/usr/bin/time -f "evaluate: %e s" .venv/bin/trace-rl evaluate --run $RUN --split test --trials 1 --arms base,trace
