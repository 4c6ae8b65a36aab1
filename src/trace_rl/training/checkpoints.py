"""Which Trainer checkpoint to resume from after a kill.

The HF Trainer writes `checkpoint-<step>/` in place: the adapter weights, then optimizer, scheduler and RNG state, and
`trainer_state.json` last, without a temp folder. A kill mid-save leaves a newest checkpoint without (or with a torn)
`trainer_state.json`, and `transformers.trainer_utils.get_last_checkpoint` would pick it and fail on every rerun. Here a
checkpoint counts only when its `trainer_state.json` parses; newer incomplete ones are removed, so the resumed run
writes that step's checkpoint again from scratch.

Kept checkpoints: a training keeps copies of the adapter at `TrainConfig.keep_fractions` of its steps (the TRL backend
adds `checkpoint_keeper`, a Trainer callback copying the PEFT files of `checkpoint-<step>/` to
`<work>/kept/step-<step>/` through a temp folder; `save_interval` makes the Trainer save at each of those steps), which
outlive the Trainer's own rotation (`save_total_limit`); `kept_checkpoints` lists them.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from trace_rl.artifacts.layout import PEFT_FILES, TRAINER_STATE_FILE, AdapterLayout

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def is_complete(checkpoint: Path) -> bool:
    try:
        return isinstance(json.loads((checkpoint / TRAINER_STATE_FILE).read_text()), dict)
    except (OSError, ValueError):
        return False


def last_complete_checkpoint(folder: Path, *, remove_incomplete: bool = True) -> str | None:
    """The newest complete `checkpoint-<step>` under `folder` (None: start fresh); incomplete newer ones are removed."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    found = sorted(
        ((int(m.group(1)), p) for p in folder.iterdir() if p.is_dir() and (m := _CHECKPOINT.match(p.name))),
        reverse=True,
    )
    for _, path in found:
        if is_complete(path):
            return str(path)
        if remove_incomplete:
            shutil.rmtree(path, ignore_errors=True)
    return None


def checkpoint_keeper(keep_dir: Path, steps: list[int]) -> Any:
    """A transformers callback copying the adapter of each wanted checkpoint to `keep_dir/step-N/`."""
    from transformers import TrainerCallback

    wanted = set(steps)

    class CheckpointKeeper(TrainerCallback):
        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            step = int(state.global_step)
            if step not in wanted or not state.is_world_process_zero:
                return
            source = Path(args.output_dir) / f"checkpoint-{step}"
            target = keep_dir / f"step-{step}"
            if not AdapterLayout(source).weights.is_file():
                return
            tmp = keep_dir / f".step-{step}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            for name in PEFT_FILES:
                shutil.copy2(source / name, tmp / name)
            shutil.rmtree(target, ignore_errors=True)
            tmp.rename(target)

    return CheckpointKeeper()


def kept_checkpoints(*keep_dirs: Path) -> dict[int, Path]:
    """step -> adapter folder of the kept checkpoints (`step-N/` under the folders; the first one holding a step
    wins)."""
    out: dict[int, Path] = {}
    for keep_dir in keep_dirs:
        if not keep_dir.is_dir():
            continue
        for folder in keep_dir.iterdir():
            if folder.name.startswith("step-") and AdapterLayout(folder).is_peft():
                out.setdefault(int(folder.name.split("-", 1)[1]), folder)
    return dict(sorted(out.items()))
