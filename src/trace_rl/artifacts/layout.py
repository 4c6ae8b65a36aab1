"""Every path of a run directory, named once.

A run directory holds one folder per stage plus the per-capability folders the stages hand to each other:

```
runs/<name>/
  manifest.json                      RunManifest (artifacts/manifest.py)
  report.html
  rollout/   trajectories.jsonl plans.json reference_tasks.json (imported runs) .lock
  diagnose/  discovery.json labels/run_<i>.json capabilities.json
  synthesize/ summary.json capabilities.json
  envs/<capability>/                 EnvLayout: spec.json status.json calibration.json tasks.jsonl ...
  adapters/<capability>/             AdapterLayout: PEFT files + train_config.json done.json eval_*.json ...
  train/<capability>/                TrainWorkLayout: trajectories.jsonl eval_*.jsonl launch.yaml checkpoints/
  route/     router.json accuracy.json oracle/<option>.jsonl
  evaluate/  comparison.json arms.json budget.json summary.md plans.json arms/<arm>.jsonl curve/ gepa/ ...
  serve/     routes.jsonl
```

Paths are plain properties (nothing is created); `RunDir` (store.py) adds the manifest and the JSONL stores. Files
that PEFT/TRL or the generator sandbox write themselves keep their own names, spelled here once as well.
`RUN_FILE_NAMES` and `RUN_FOLDERS` list what the architecture test looks for outside this package.
"""

from __future__ import annotations

from pathlib import Path

LAYOUT_VERSION = 1
"""Bumped when a path or a file's schema changes incompatibly; a manifest without the field is version 1."""

# -- run level ------------------------------------------------------------------------------------------------------
MANIFEST_FILE = "manifest.json"
REPORT_FILE = "report.html"

ROLLOUT_DIR = "rollout"
DIAGNOSE_DIR = "diagnose"
SYNTHESIZE_DIR = "synthesize"
ENVS_DIR = "envs"
ADAPTERS_DIR = "adapters"
TRAIN_DIR = "train"
ROUTE_DIR = "route"
EVALUATE_DIR = "evaluate"
SERVE_DIR = "serve"

TRAJECTORIES_FILE = "trajectories.jsonl"
PLANS_FILE = "plans.json"
REFERENCE_TASKS_FILE = "reference_tasks.json"
LOCK_FILE = ".lock"
DISCOVERY_FILE = "discovery.json"
ANALYST_PROMPTS_DIR = "prompts"  # diagnose --show-prompts: the analyst prompts it would send
LABELS_DIR = "labels"
CAPABILITIES_FILE = "capabilities.json"
SUMMARY_FILE = "summary.json"
ROUTER_FILE = "router.json"
ACCURACY_FILE = "accuracy.json"
ORACLE_DIR = "oracle"
COMPARISON_FILE = "comparison.json"
ARM_INDEX_FILE = "arms.json"
BUDGET_FILE = "budget.json"
EVALUATE_SUMMARY_FILE = "summary.md"
ROUTES_LOG_FILE = "routes.jsonl"

# -- envs/<capability>/ ---------------------------------------------------------------------------------------------
SPEC_FILE = "spec.json"
STATUS_FILE = "status.json"
CALIBRATION_FILE = "calibration.json"
VALIDATION_FILE = "validation.json"
LEAK_FILE = "leak.json"
LEAK_INDEX_FILE = "leak_index.json"
TASKS_FILE = "tasks.jsonl"
TASKS_SAMPLE_FILE = "tasks_sample.jsonl"
GENERATOR_FILE = "generator.py"
SYSTEM_PROMPT_FILE = "system_prompt.md"
CALIBRATION_DIR = "calibration"
AUTHOR_DIR = "author"
AUTHOR_LOG_FILE = "log.json"
AUTHOR_PROMPT_FILE = "prompt.md"
AUTHOR_RESPONSE_FILE = "response.md"
AUTHOR_RESULT_FILE = "result.json"

# -- the generator sandbox's private temp directory ------------------------------------------------------------------
SANDBOX_JOB_FILE = "job.json"
SANDBOX_RESULT_FILE = "result.jsonl"
SANDBOX_CODE_FILE = GENERATOR_FILE
SANDBOX_STDOUT_FILE = "stdout.txt"
SANDBOX_STDERR_FILE = "stderr.txt"

# -- adapters/<capability>/ (PEFT writes the first two, TRL the trainer state) ---------------------------------------
PEFT_CONFIG_FILE = "adapter_config.json"
PEFT_WEIGHTS_FILE = "adapter_model.safetensors"
PEFT_FILES = (PEFT_WEIGHTS_FILE, PEFT_CONFIG_FILE)
TRAINER_STATE_FILE = "trainer_state.json"  # transformers.trainer.TRAINER_STATE_NAME, written last in a checkpoint
TRAIN_CONFIG_FILE = "train_config.json"
DONE_FILE = "done.json"
EVAL_BEFORE_FILE = "eval_before.json"
EVAL_AFTER_FILE = "eval_after.json"
EVAL_PLOT_FILE = "eval.png"
TRAINING_PLOT_FILE = "training.png"
METRICS_FILE = "metrics.jsonl"
BASELINE_FILE = "baseline.json"

# -- train/<capability>/ ---------------------------------------------------------------------------------------------
EVAL_BEFORE_EPISODES_FILE = "eval_before.jsonl"
EVAL_AFTER_EPISODES_FILE = "eval_after.jsonl"
LAUNCH_CONFIG_FILE = "launch.yaml"
CHECKPOINTS_DIR = "checkpoints"
KEPT_DIR = "kept"  # copies of the adapter at chosen steps, outside the Trainer's checkpoint rotation
SERVED_ADAPTERS_DIR = "served_adapters"  # adapter versions loaded into a vLLM server during training

# -- evaluate/ (paths relative to the stage folder: they are keys of plans.json and arms.json) -----------------------
ARMS_DIR = "arms"
CURVE_DIR = "curve"
SINGLE_BEST_DIR = "single_best"
GUARD_DIR = "guard"
GRPO_TARGET_DIR = "grpo_target"
GEPA_DIR = "gepa"
GEPA_RESULT_FILE = "result.json"
GEPA_EPISODES_FILE = "episodes.jsonl"
GEPA_LOG_FILE = "log.txt"
GEPA_RESULT = f"{GEPA_DIR}/{GEPA_RESULT_FILE}"
GEPA_EPISODES = f"{GEPA_DIR}/{GEPA_EPISODES_FILE}"
GEPA_LOG = f"{GEPA_DIR}/{GEPA_LOG_FILE}"
BASELINE_ADAPTER_DIR = "adapter"
BASELINE_WORK_DIR = "train"

ROLLOUT_TRAJECTORIES = f"{ROLLOUT_DIR}/{TRAJECTORIES_FILE}"
"""The rollout store relative to the run (the default of `trace-rl view --file`)."""

MIX_ADAPTER = "multi"
"""The multi-capability baseline's folder under adapters/ and train/ (not a routing option)."""

RUN_FOLDERS = frozenset(
    {ROLLOUT_DIR, DIAGNOSE_DIR, SYNTHESIZE_DIR, ENVS_DIR, ADAPTERS_DIR, TRAIN_DIR, ROUTE_DIR, EVALUATE_DIR, SERVE_DIR}
)
RUN_FILE_NAMES = frozenset(value for key, value in dict(globals()).items() if key.endswith("_FILE"))
"""Every file name above (the `*_FILE` constants)."""


def _folders(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


class _Folder:
    """A folder of the run directory; its files are `_Under` attributes."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    @property
    def name(self) -> str:
        return self.folder.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.folder)!r})"


class _Under:
    """A path below a layout's folder, read as an attribute: `spec = _Under(SPEC_FILE)` gives `env.spec`."""

    def __init__(self, *parts: str) -> None:
        self.parts = parts

    def __get__(self, layout: _Folder, owner: type | None = None) -> Path:
        return layout.folder.joinpath(*self.parts)


class EnvLayout(_Folder):
    """`envs/<capability>/`: a capability environment and the evidence about it (written by synthesize)."""

    spec = _Under(SPEC_FILE)
    status = _Under(STATUS_FILE)
    calibration = _Under(CALIBRATION_FILE)
    calibration_trajectories = _Under(CALIBRATION_DIR, TRAJECTORIES_FILE)
    validation = _Under(VALIDATION_FILE)
    leak = _Under(LEAK_FILE)
    leak_index = _Under(LEAK_INDEX_FILE)
    tasks = _Under(TASKS_FILE)
    tasks_sample = _Under(TASKS_SAMPLE_FILE)
    generator = _Under(GENERATOR_FILE)
    system_prompt = _Under(SYSTEM_PROMPT_FILE)
    author_log = _Under(AUTHOR_DIR, AUTHOR_LOG_FILE)

    def author_attempt(self, n: int) -> AuthorAttemptLayout:
        return AuthorAttemptLayout(self.folder / AUTHOR_DIR / f"attempt_{n}")

    def author_prompts(self) -> list[Path]:
        """Every author attempt's prompt, in name order."""
        return sorted((self.folder / AUTHOR_DIR).glob(f"attempt_*/{AUTHOR_PROMPT_FILE}"))

    def has_records(self) -> bool:
        """Whether synthesize wrote anything the report shows (spec, status or calibration)."""
        return any(p.exists() for p in (self.spec, self.status, self.calibration))


class AuthorAttemptLayout(_Folder):
    """`envs/<capability>/author/attempt_<n>/`: one author-model attempt (prompt, response, code, verdict)."""

    prompt = _Under(AUTHOR_PROMPT_FILE)
    response = _Under(AUTHOR_RESPONSE_FILE)
    code = _Under(GENERATOR_FILE)
    result = _Under(AUTHOR_RESULT_FILE)


class AdapterLayout(_Folder):
    """`adapters/<capability>/` (or a baseline's adapter folder): the PEFT adapter and trace-rl's records of it."""

    peft_config = _Under(PEFT_CONFIG_FILE)
    weights = _Under(PEFT_WEIGHTS_FILE)
    train_config = _Under(TRAIN_CONFIG_FILE)
    done = _Under(DONE_FILE)
    eval_before = _Under(EVAL_BEFORE_FILE)
    eval_after = _Under(EVAL_AFTER_FILE)
    eval_plot = _Under(EVAL_PLOT_FILE)
    training_plot = _Under(TRAINING_PLOT_FILE)
    metrics = _Under(METRICS_FILE)
    baseline = _Under(BASELINE_FILE)

    def is_peft(self) -> bool:
        """A PEFT adapter folder (its config is there; the weights may still be missing)."""
        return self.peft_config.is_file()

    def has_records(self) -> bool:
        """Whether training wrote anything the report shows (metrics, the adapter, its evaluation)."""
        return any(p.exists() for p in (self.metrics, self.peft_config, self.eval_after))


class TrainWorkLayout(_Folder):
    """`train/<capability>/`: a training job's work folder (logged episodes, checkpoints, the launch config)."""

    trajectories = _Under(TRAJECTORIES_FILE)
    eval_before = _Under(EVAL_BEFORE_EPISODES_FILE)
    eval_after = _Under(EVAL_AFTER_EPISODES_FILE)
    launch_config = _Under(LAUNCH_CONFIG_FILE)
    checkpoints = _Under(CHECKPOINTS_DIR)
    kept = _Under(KEPT_DIR)
    served_adapters = _Under(SERVED_ADAPTERS_DIR)


class EvaluateLayout(_Folder):
    """`evaluate/`: the comparison and its evidence. Episode files are named by paths relative to this folder
    (`arm(name)`, `curve(...)`, ...) because plans.json and arms.json record them that way."""

    comparison = _Under(COMPARISON_FILE)
    arm_index = _Under(ARM_INDEX_FILE)
    budget = _Under(BUDGET_FILE)
    summary = _Under(EVALUATE_SUMMARY_FILE)
    plans = _Under(PLANS_FILE)

    def path(self, relpath: str) -> Path:
        return self.folder / relpath

    @staticmethod
    def arm(name: str) -> str:
        """The episodes of arm `name`."""
        return f"{ARMS_DIR}/{name}.jsonl"

    @staticmethod
    def curve(arm: str, point: str | int) -> str:
        """The episodes of one score-vs-budget point of `arm`."""
        return f"{CURVE_DIR}/{arm}@{point}.jsonl"

    @staticmethod
    def single_best(select: str, name: str) -> str:
        """The selection episodes of adapter `name` on the `select` tasks."""
        return f"{SINGLE_BEST_DIR}/{select}/{name}.jsonl"

    @staticmethod
    def guard(option: str) -> str:
        """The held-in guard's episodes of `option` ('base' or the unguarded router) on the target's train tasks."""
        return f"{GUARD_DIR}/{option}.jsonl"

    def baseline(self, name: str) -> tuple[AdapterLayout, TrainWorkLayout]:
        """(adapter folder, work folder) of a baseline trained by evaluate itself (e.g. GRPO on target)."""
        root = self.folder / name
        return AdapterLayout(root / BASELINE_ADAPTER_DIR), TrainWorkLayout(root / BASELINE_WORK_DIR)

    def baseline_checkpoints(self, name: str) -> Path:
        """Checkpoints of an evaluate baseline kept for the score-vs-budget curve."""
        return self.folder / name / CHECKPOINTS_DIR


class RunLayout(_Folder):
    """The paths of `runs/<name>/` (`root`)."""

    manifest_path = _Under(MANIFEST_FILE)
    report = _Under(REPORT_FILE)
    # rollout
    trajectories = _Under(ROLLOUT_DIR, TRAJECTORIES_FILE)
    plans = _Under(ROLLOUT_DIR, PLANS_FILE)
    reference_tasks = _Under(ROLLOUT_DIR, REFERENCE_TASKS_FILE)
    rollout_lock = _Under(ROLLOUT_DIR, LOCK_FILE)
    # diagnose
    discovery = _Under(DIAGNOSE_DIR, DISCOVERY_FILE)
    analyst_prompts = _Under(DIAGNOSE_DIR, ANALYST_PROMPTS_DIR)
    capabilities = _Under(DIAGNOSE_DIR, CAPABILITIES_FILE)
    # synthesize
    synthesize_summary = _Under(SYNTHESIZE_DIR, SUMMARY_FILE)
    synthesized_capabilities = _Under(SYNTHESIZE_DIR, CAPABILITIES_FILE)
    envs_dir = _Under(ENVS_DIR)
    # train
    adapters_dir = _Under(ADAPTERS_DIR)
    # route
    router = _Under(ROUTE_DIR, ROUTER_FILE)
    accuracy = _Under(ROUTE_DIR, ACCURACY_FILE)
    # evaluate
    comparison = _Under(EVALUATE_DIR, COMPARISON_FILE)
    # serve
    routes_log = _Under(SERVE_DIR, ROUTES_LOG_FILE)

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.root = self.folder

    def label_run(self, i: int) -> Path:
        return self.root / DIAGNOSE_DIR / LABELS_DIR / f"run_{i}.json"

    def env(self, capability: str) -> EnvLayout:
        return EnvLayout(self.envs_dir / capability)

    def envs(self) -> list[EnvLayout]:
        """Every folder under envs/ (hidden ones aside), in name order."""
        return [EnvLayout(p) for p in _folders(self.envs_dir)]

    def adapter(self, capability: str) -> AdapterLayout:
        return AdapterLayout(self.adapters_dir / capability)

    def adapters(self) -> list[AdapterLayout]:
        """Every folder under adapters/ (hidden ones aside), in name order."""
        return [AdapterLayout(p) for p in _folders(self.adapters_dir)]

    def train_work(self, capability: str) -> TrainWorkLayout:
        return TrainWorkLayout(self.root / TRAIN_DIR / capability)

    def oracle_episodes(self, option: str) -> Path:
        """Held-out episodes of one routing option, for the oracle figures of route/accuracy.json."""
        return self.root / ROUTE_DIR / ORACLE_DIR / f"{option}.jsonl"

    @property
    def evaluate(self) -> EvaluateLayout:
        return EvaluateLayout(self.root / EVALUATE_DIR)

    def evaluation(self, name: str | None = None) -> EvaluateLayout:
        """`evaluate/`, or with a name the separate evaluation `evaluate@<name>/` (another split or test range of the
        same run, kept apart so neither is mixed into or refused by the other)."""
        return self.evaluate if not name else EvaluateLayout(self.root / f"{EVALUATE_DIR}@{name}")

    def evaluations(self) -> dict[str | None, EvaluateLayout]:
        """`evaluate/` (key None) and every `evaluate@<name>/` that exists (key name), in name order."""
        named = sorted(p.name.split("@", 1)[1] for p in _folders(self.root) if p.name.startswith(f"{EVALUATE_DIR}@"))
        return {None: self.evaluate, **{n: self.evaluation(n) for n in named}}


__all__ = [
    "LAYOUT_VERSION",
    "MIX_ADAPTER",
    "PEFT_FILES",
    "ROLLOUT_TRAJECTORIES",
    "RUN_FILE_NAMES",
    "RUN_FOLDERS",
    "AdapterLayout",
    "AuthorAttemptLayout",
    "EnvLayout",
    "EvaluateLayout",
    "RunLayout",
    "TrainWorkLayout",
]
