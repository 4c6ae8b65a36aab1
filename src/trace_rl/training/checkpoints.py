"""Which Trainer checkpoint to resume from after a kill.

The HF Trainer writes `checkpoint-<step>/` in place: the adapter weights, then optimizer, scheduler and RNG state, and
`trainer_state.json` last, without a temp folder. A kill mid-save leaves a newest checkpoint without (or with a torn)
`trainer_state.json`, and `transformers.trainer_utils.get_last_checkpoint` would pick it and fail on every rerun. Here a
checkpoint counts only when its `trainer_state.json` parses; newer incomplete ones are removed, so the resumed run
writes that step's checkpoint again from scratch.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

STATE_FILE = "trainer_state.json"  # transformers.trainer.TRAINER_STATE_NAME, written last
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def is_complete(checkpoint: Path) -> bool:
    try:
        return isinstance(json.loads((checkpoint / STATE_FILE).read_text()), dict)
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
