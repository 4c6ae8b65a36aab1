"""The top-level `TraceConfig`: model endpoints by name, the target environment, the executor, and one typed section
per stage (rollout, diagnose, synthesize, train, route, evaluate), loaded from YAML and overridable by flags.

Unknown keys are errors. `load_config` validates every section at once and turns any problem into a `UserError`, one
line per problem naming the field (`train.max_steps: ...`). Stage sections used to sit under an untyped `stages:`
mapping: a YAML file that still has one is refused with a line saying what to change, while the config recorded in an
old run's manifest is read by lifting `stages.<name>` to `<name>` (`config_from_record`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from trace_rl.config.base import MAX_TRIALS, Section, apply_overrides, format_validation_error, read_yaml
from trace_rl.config.diagnose import DiagnoseConfig
from trace_rl.config.evaluate import EvaluateConfig
from trace_rl.config.route import RouteConfig
from trace_rl.config.serving import VLLMServerSettings
from trace_rl.config.synthesize import SynthesizeConfig
from trace_rl.config.train import TrainConfig, recorded_train_config
from trace_rl.errors import UserError


class ModelConfig(Section):
    """A model endpoint, referred to by name from the stages (policy, user, analyst, author, judge)."""

    kind: Literal["openai", "vllm", "local", "scripted", "tiny"] = Field(
        "openai",
        description="openai: any OpenAI-compatible server (vLLM, SGLang, llama.cpp, hosted); vllm: a local model "
        "folder sampled by a vLLM server (started by trace-rl unless base_url names one), prompts rendered and tool "
        "calls parsed by trace-rl as for local; local: transformers + PEFT in process; scripted: plays back `script` "
        "(dry runs, tests); tiny: the local backend on the tiny random model (models/registry.py builds each kind).",
    )
    model: str = Field("", description="Model id, local folder, or alias (smollm2-135m, tiny).")
    base_url: str | None = Field(None, description="OpenAI-compatible base URL; env OPENAI_BASE_URL if unset.")
    base_urls: list[str] = Field(
        default_factory=list,
        description="Several OpenAI-compatible endpoints serving the same model (and adapters): each episode is "
        "pinned to one, the least busy when it starts (docs/scale-out.md). Use instead of base_url.",
    )
    api_key: str | None = Field(None, description="API key; prefer api_key_env.")
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the API key.")
    timeout_s: float = Field(120.0, gt=0, description="Per-request timeout.")
    max_retries: int = Field(4, ge=0, description="Retries on 429/5xx/connection errors, exponential backoff.")
    backoff_s: float = Field(0.5, ge=0, description="First backoff delay; doubles each retry (with jitter).")
    concurrency: int = Field(8, ge=1, description="Requests in flight at most.")
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0, description="Sample among the k likeliest tokens; 0 = off (on every backend).")
    max_tokens: int = Field(512, ge=1)
    adapters: dict[str, str] = Field(default_factory=dict, description="Named LoRA adapters: name -> folder.")
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    return_token_ids: bool = Field(True, description="Ask vLLM for sampled token ids (extra_body return_token_ids).")
    script: list[Any] = Field(default_factory=list, description="Responses for kind=scripted.")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="Passed through to the server.")
    server: VLLMServerSettings = Field(
        default_factory=VLLMServerSettings, description="kind=vllm: how trace-rl starts the server (no base_url)."
    )

    @model_validator(mode="after")
    def _one_kind_of_url(self) -> ModelConfig:
        if self.base_url and self.base_urls:
            raise ValueError("set base_url or base_urls, not both")
        return self

    def endpoints(self) -> list[str]:
        """Every base URL of this model (base_urls, else base_url, else OPENAI_BASE_URL); empty when none is set."""
        import os

        if self.base_urls:
            return list(self.base_urls)
        url = self.base_url or os.environ.get("OPENAI_BASE_URL")
        return [url] if url else []


class ScoringConfig(Section):
    """Where episode scoring may depart from τ²-bench (envs/evaluator.py `ScoringRules`); τ²'s behaviour by default."""

    communicate_beside_calls: bool = Field(True, description="Text beside tool calls counts for COMMUNICATE (τ²).")
    tau2_argument_match: bool = Field(True, description="A missing argument does not match an expected null (τ²).")
    strict_replay: bool = Field(
        False, description="Replay tool calls and score 0 when a recorded output differs from the tools' own."
    )


class EnvConfig(Section):
    """The target environment (also used by rollout, evaluate and synthesize)."""

    name: str = Field("library", description="tau2:retail | tau2:airline | tau2:mock | library | synthetic:<dir>")
    data_dir: Path | None = Field(None, description="τ² data directory; env TRACE_TAU2_DATA, then ../shared/data/tau2.")
    task_set: Literal["head", "v0.2"] = Field("head", description="τ² task file: tasks.json (head) or tasks_v0.2.json.")
    reward_basis: list[str] | None = Field(
        None, description="Override every task's reward basis, e.g. [DB, COMMUNICATE] for the paper's protocol."
    )
    quirks: dict[str, bool] = Field(
        default_factory=dict, description="Upstream quirks to turn off or on by name (all reproduced by default)."
    )
    options: dict[str, Any] = Field(default_factory=dict, description="Domain-specific options (library: sizes, seed).")
    max_steps: int = Field(50, ge=1, description="Orchestrator steps per episode (TRACE used 50).")
    max_errors: int = Field(10, ge=0, description="Tool errors that end an episode (τ²-bench default).")
    scoring: ScoringConfig = Field(default_factory=ScoringConfig, description="τ² scoring departures (off: τ²).")


ReportTo = Literal["none", "trackio", "wandb", "mlflow", "tensorboard"]
"""Where `run.report_to` sends metrics (trace_rl/tracking.py has a tracker per name)."""

RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""A run name, matched in full: one path component of at most 128 characters, starting with a letter or digit (no
`/`, no `..`, no newline), so `runs_dir/<name>` always stays inside `runs_dir`."""


class RunSection(Section):
    name: str = Field("demo", description="Run name: the folder runs/<name>/ (letters, digits, . _ -; ≤ 128).")
    runs_dir: Path = Field(Path("runs"), description="Where run folders are created.")
    report_to: ReportTo = Field(
        "none",
        description="Experiment tracking for GRPO curves, calibration attempts and evaluation tables: none (default: "
        "nothing logged anywhere but the run directory), trackio (local SQLite under tracking_dir), or wandb / mlflow "
        "/ tensorboard when that package is installed (trace_rl/tracking.py).",
    )
    tracking_project: str | None = Field(
        None, description="The tracker's project the run is filed under; default: the run folder's name."
    )
    tracking_dir: Path | None = Field(
        None, description="trackio's local folder (TRACKIO_DIR); default: <run>/trackio, so a run stays self-contained."
    )

    @field_validator("name")
    @classmethod
    def _one_folder(cls, v: str) -> str:
        if RUN_NAME.fullmatch(v) is None:
            shown = v if len(v) <= 40 else v[:40] + "..."
            raise ValueError(
                f"{shown!r} is not a run name (letters, digits, '.', '_', '-', starting with a letter or digit, "
                "at most 128 characters; it must stay inside runs_dir)"
            )
        return v

    @field_validator("runs_dir")
    @classmethod
    def _a_folder(cls, v: Path) -> Path:
        if v.exists() and not v.is_dir():
            raise ValueError(f"{v} exists and is not a folder")
        return v


class RolloutConfig(Section):
    """Stage 1: roll the agent out in the target environment."""

    policy: str = Field("policy", description="Name of the policy model in `models`.")
    user: str = Field("scripted", description="'scripted' (the domain's deterministic user) or a model name.")
    judge: str | None = Field(None, description="Model name for NL_ASSERTION grading, when the basis needs it.")
    adapter: str | None = Field(None, description="Serve the policy with this LoRA adapter.")

    @field_validator("adapter")
    @classmethod
    def _adapter_name(cls, v: str | None) -> str | None:
        if v is not None and (RUN_NAME.fullmatch(v) is None or ".." in v):
            raise ValueError(f"{v[:40]!r} is not an adapter name (letters, digits, '.', '_', '-'; at most 128)")
        return v

    split: str = Field("train", description="Task split (diagnosing on test tasks would leak).")
    trials: int = Field(1, ge=1, le=MAX_TRIALS, description="Trials per task (pass^k needs k ≤ trials).")
    concurrency: int = Field(4, ge=1, description="Episodes in flight.")
    seed: int = Field(300, description="Base seed; trial seeds derive from it (τ²-bench default 300).")
    task_limit: int | None = Field(None, ge=1, description="Use only the first N tasks of the split.")
    task_ids: list[str] | None = Field(None, description="Run only these task ids (in this order).")
    temperature: float | None = Field(None, ge=0.0, description="Override the policy model's temperature.")
    max_tokens: int | None = Field(None, ge=1, description="Override the policy model's max tokens per turn.")
    episode_timeout_s: float | None = Field(
        None, gt=0, description="Wall-clock limit per episode (checked between steps); ends it as TIMEOUT, scored 0."
    )
    token_ids: Literal["all", "completion", "none"] = Field(
        "all",
        description="Token ids kept on assistant turns: all (prompt + completion, as the backend returned them), "
        "completion (drop per-turn prompt ids, which grow quadratically with turns), none.",
    )
    stop_after_infra: int = Field(
        32, ge=0, description="Start no new episode after this many infrastructure failures in a row (0 = never)."
    )


ExecutorKind = Literal["local", "ray"]
EXECUTOR_STAGES = ("rollout", "train", "evaluate")  # the stages that can run on Ray (--executor / --ray-address)
FORWARDED_ENV = (
    "OPENAI_API_KEY", "OPENAI_BASE_URL", "TRACE_TAU2_DATA", "TRACE_RL_CACHE", "HF_HOME", "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE", "OMP_WAIT_POLICY", "TOKENIZERS_PARALLELISM", "TRL_EXPERIMENTAL_SILENCE",
)  # fmt: skip  # word list: packed, not one per line


class ExecutorConfig(Section):
    """Where the work of rollout, train and evaluate runs: in this process (local) or on a Ray cluster (ray).

    Under `ray`, episodes run in `num_workers` worker actors (each with its own event loop) and every capability's
    training is one Ray task asking for `gpus_per_train_job` GPUs; the driver writes every result into the run
    directory, so the layout and resume are the same as under `local` (docs/scale-out.md)."""

    kind: ExecutorKind = Field("local", description="local: today's in-process engine; ray: a Ray cluster.")
    address: str | None = Field(
        None,
        description="Ray cluster: None starts a local Ray instance for the command; 'auto' joins the cluster this "
        "machine belongs to (`ray start`); 'ray://host:10001' connects a client to a remote head.",
    )
    num_workers: int = Field(2, ge=1, description="Episode worker actors (rollout and evaluate).")
    episodes_per_worker: int | None = Field(
        None,
        ge=1,
        description="Episodes in flight per worker; None splits the stage's `concurrency` evenly over the workers.",
    )
    cpus_per_worker: float = Field(1.0, ge=0, description="Ray CPUs reserved by each episode worker.")
    gpus_per_train_job: float = Field(
        0.0, ge=0, description="GPUs per capability training (paper scale: 4-8 80 GB GPUs; 0 on CPU)."
    )
    cpus_per_train_job: float = Field(1.0, ge=0, description="Ray CPUs per capability training.")
    train_launcher: Literal["inline", "accelerate"] = Field(
        "inline",
        description="inline: the Ray task trains in its own process (one device); accelerate: it runs "
        "`accelerate launch --num_processes <gpus> -m trace_rl.cli.train --capability <c>` on its GPUs.",
    )
    accelerate_config: Path | None = Field(
        None, description="accelerate config file for train_launcher=accelerate (e.g. a DeepSpeed ZeRO-2 one)."
    )
    max_restarts: int = Field(4, ge=0, description="Restarts of a lost episode worker (on any node).")
    max_retries: int = Field(
        3, ge=0, description="Retries of an episode or training job whose worker was lost (after that: infra failure)."
    )
    num_cpus: int | None = Field(
        None, ge=1, description="CPUs of the local Ray instance started for the command (None: enough for the workers)."
    )
    runtime_env: dict[str, Any] = Field(
        default_factory=dict,
        description="Ray runtime_env for the job (working_dir, pip, env_vars) on a remote cluster.",
    )
    forward_env: list[str] = Field(
        default_factory=lambda: list(FORWARDED_ENV),
        description="Environment variables copied from the driver to the workers (when set on the driver).",
    )
    stages: dict[Literal["rollout", "train", "evaluate"], ExecutorKind] = Field(
        default_factory=dict, description="Per-stage kind, e.g. {train: local} to train in process but roll out on Ray."
    )

    def for_stage(self, stage: str) -> ExecutorConfig:
        """This config with the stage's own kind (when `stages` names one)."""
        kind = self.stages.get(stage)  # type: ignore[call-overload]
        return self if kind is None or kind == self.kind else self.model_copy(update={"kind": kind})


class TraceConfig(Section):
    """The whole pipeline: model endpoints by name, the target environment, the executor, one section per stage."""

    run: RunSection = Field(default_factory=RunSection)
    models: dict[str, ModelConfig] = Field(default_factory=dict)
    env: EnvConfig = Field(default_factory=EnvConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    diagnose: DiagnoseConfig = Field(default_factory=DiagnoseConfig)
    synthesize: SynthesizeConfig = Field(default_factory=SynthesizeConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    route: RouteConfig = Field(default_factory=RouteConfig)
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig)

    @model_validator(mode="after")
    def _keep_curve_checkpoints(self) -> TraceConfig:
        """The capability adapters keep their checkpoints at the score-vs-budget curve's fractions unless told."""
        if self.train.keep_fractions is None:
            fractions = list(self.evaluate.curve.fractions) if self.evaluate.curve.enabled else []
            self.train = self.train.model_copy(update={"keep_fractions": fractions})
        return self

    def model(self, name: str) -> ModelConfig:
        if name not in self.models:
            known = ", ".join(sorted(self.models)) or "none"
            raise UserError(f"unknown model '{name}' (models defined in config: {known})")
        return self.models[name]


def _validate(data: dict[str, Any], source: str) -> TraceConfig:
    try:
        return TraceConfig.model_validate(data)
    except ValidationError as err:
        raise UserError(format_validation_error(err, source)) from None


def load_config(path: Path | None, overrides: dict[str, Any] | None = None) -> TraceConfig:
    """YAML file (optional) + dotted overrides like {'train.max_steps': 3}; a one-line UserError per problem."""
    data = read_yaml(Path(path)) if path is not None else {}
    if "stages" in data:
        names = ", ".join(sorted(data["stages"])) if isinstance(data["stages"], dict) else "..."
        raise UserError(
            f"{path}: `stages:` is gone; move each stage's settings to a top-level section "
            f"(`stages: {{train: ...}}` becomes `train: ...`; here: {names})"
        )
    source = str(path or "config")
    return _validate(apply_overrides(data, overrides, source), source)


def config_from_record(
    recorded: dict[str, Any], overrides: dict[str, Any] | None = None, source: str = "recorded config"
) -> TraceConfig:
    """The config recorded in a run's manifest, with dotted overrides. A run written before the stage sections were
    typed recorded them under `stages:`; they are lifted to the top level (and fields since removed are dropped)."""
    data = dict(recorded)
    for name, section in (data.pop("stages", None) or {}).items():
        if name in data:
            raise UserError(f"{source}: both `stages.{name}` and `{name}` are set; keep one")
        data[name] = section
    if isinstance(data.get("train"), dict):
        data["train"] = recorded_train_config(data["train"])
    return _validate(apply_overrides(data, overrides, source), source)


def executor_with(current: ExecutorConfig, kind: str | None = None, address: str | None = None) -> ExecutorConfig:
    """The executor section with the command line's --executor / --ray-address applied (validated)."""
    if kind is None and address is None:
        return current
    data = current.model_dump()
    if kind is not None:
        data["kind"] = kind
        data["stages"] = {}  # an explicit --executor applies to the whole command
    if address is not None:
        data["address"] = address
    try:
        return ExecutorConfig.model_validate(data)
    except ValidationError as err:
        raise UserError(format_validation_error(err, "--executor")) from None
