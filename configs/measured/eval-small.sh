#!/bin/bash
# Reproduces runs/eval-small: two library-family adapters as stand-in capabilities (2 GRPO steps x G=1 x K=4 each),
# the multi-capability adapter on their mix at the same total budget, the router and its accuracy, then every arm
# on the library test split. Measured: 71 min on 2 CPU cores (train 161 + 221 + 336 s, route 9 s, evaluate 3,503 s).
set -euo pipefail
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE TRL_EXPERIMENTAL_SILENCE=1 TOKENIZERS_PARALLELISM=false
PY=.venv/bin/python
RUN=runs/eval-small
$PY - <<'PY'
import time
from pathlib import Path
from trace_rl.config import load_config
from trace_rl.artifacts.store import RunDir, atomic_write_json
cfg = load_config(Path("configs/measured/eval-small.yaml"))
RunDir(Path("runs/eval-small")).ensure(config=cfg.model_dump(mode="json"), command="configs/measured/eval-small.sh")
# the capability descriptions (diagnose would write them; the adapters here are library-family stand-ins)
caps = [
 {"name": "lookup_answer", "status": "pending",
  "definition": "Looking the asked-for fact up in the catalog with the right tool and answering with the exact value "
                "found in the record (the author's name, the year), instead of describing the book."},
 {"name": "copy_selection", "status": "pending",
  "definition": "Comparing copy records field by field (language, edition, format, status) to pick the one copy that "
                "satisfies every condition the member stated before acting on it."},
]
atomic_write_json(Path("runs/eval-small/diagnose/capabilities.json"), {
  "selected": caps, "candidates": caps, "params": {"rho": 0.1, "delta": 0.2, "n_runs": 1, "k": 1},
  "splits": ["train"], "n_trajectories": {}, "analyst": "hand-written for runs/eval-small (family stand-ins)",
  "warnings": ["written by hand: the adapters are library-family stand-ins, not diagnosed capabilities"],
  "created_at": time.time()})
PY
TRAIN=(--run $RUN --model smollm2-135m --device cpu --bf16 auto -g 1 -k 4 --lr 1e-3 --max-turn-tokens 40
       --max-episode-tokens 256 --max-turns 3 --hint-fraction 0 --eval-trials 1 --held-out 4
       --set resample_attempts=1 --set save_steps=1)
for fam in lookup_answer copy_selection; do
  /usr/bin/time -f "train $fam: %e s" $PY -m trace_rl.cli.train "${TRAIN[@]}" --env library:$fam --steps 2
done
# the multi-capability baseline: one adapter on the uniform mix, 4 steps = the two adapters' 16 rollouts together
/usr/bin/time -f "train multi: %e s" $PY -m trace_rl.cli.train "${TRAIN[@]}" \
  --env library:lookup_answer,library:copy_selection --mix --steps 4
/usr/bin/time -f "route: %e s" .venv/bin/trace-rl route --run $RUN
/usr/bin/time -f "evaluate: %e s" .venv/bin/trace-rl evaluate --run $RUN --split test --trials 1
