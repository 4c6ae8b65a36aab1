"""`TRLBackend`: one LoRA adapter per capability with TRL's GRPOTrainer fed by trace-rl's multi-turn episode loop.

What is implemented from TRACE (paper §3.4): a LoRA Δ_c per capability on a frozen base; each iteration samples G
groups of K trajectories that share a seed; advantage `(r − mean_g) / (std_g + ε)` with every token of a rollout getting
its trajectory's advantage; constant groups dropped; PPO-style clipped loss averaged per sequence then over the batch
(`loss_type="grpo"`); no KL (`beta=0`); one optimizer step per iteration (gradient accumulation over the G·K rollouts);
rollouts on-policy from the adapter being trained.

Where it departs, and the switch for the other behaviour:
- advantage scale: per-group std (paper) by default; the released code's batch std is `scale_rewards="batch"`;
  TRL adds 1e-4 to the std, not the paper's unspecified ε;
- ratio: per token (paper); the released code's per-sequence ratio is `importance_sampling_level="sequence"`;
- clip: ε = 0.2 below, 0.28 above (the code's DAPO clip), `epsilon` / `epsilon_high`;
- unit of a sample: the whole multi-turn trajectory with environment tokens masked (paper), not the code's per-turn
  samples;
- group filtering on the success label by default and dynamic re-sampling (released code), see `grouping.py`;
- hints (released code) only with `hint_fraction > 0` or an environment that sets its own fraction.

Generation (`train.sampler`): a vLLM server with the adapter being trained hot-swapped in after every optimizer step
(`vllm_sync.py`, on-policy, checked), or the trainer's own PEFT model in process (`engine.sampler.HFSampler`); `auto`
takes vLLM where it can. `train.shared_prefix` forwards each group's prompt once (`shared_prefix.py`). One process or
several via `accelerate launch -m trace_rl.cli.train ...` (G must be a multiple of the process count, so that no group
is split across processes; the vLLM sampler serves one process).

`TRLBackend.train` reads as its steps (`GRPORun`): prepare the device, load the policy, build the dataset, build the
trainer, write the training config, evaluate the base model, train (resuming from the newest complete checkpoint),
save the adapter, evaluate it, plot, and write `done.json` last. The pieces are built by `trl_setup.py`. With
`tracking` (the run's `report_to`), transformers' integration callback logs the curves too, one tracker run per
capability in the run's project.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trace_rl.artifacts.adapters import (
    DoneRecord,
    TrainRecord,
    is_done,
    read_eval,
    write_done,
    write_eval,
    write_train_record,
)
from trace_rl.artifacts.layout import AdapterLayout, TrainWorkLayout
from trace_rl.artifacts.store import JsonlStore
from trace_rl.config.train import TrainConfig
from trace_rl.engine.chat_codec import ChatCodec, check_prefix_preserving
from trace_rl.engine.sampler import TurnSampler
from trace_rl.engine.token_driver import EpisodeRunner
from trace_rl.engine.vllm_sampler import VLLMSampler
from trace_rl.tracking import TrackingSettings
from trace_rl.training.checkpoints import checkpoint_keeper, last_complete_checkpoint
from trace_rl.training.grouping import GroupPlan
from trace_rl.training.protocol import AdapterResult, TrainEnv
from trace_rl.training.rollout_func import GroupRollout, env_reward
from trace_rl.training.trl_setup import (
    batch_layout,
    build_dataset,
    grpo_args,
    held_out_seeds,
    hf_sampler_for,
    hint_fraction,
    limits_of,
    load_policy,
    lora_config,
    quiet_dropped_group_warnings,
    resolve_bf16,
    resolve_device,
    world_size,
)
from trace_rl.training.vllm_sync import AdapterSync, choose_sampler, vllm_sampler_for


def save_adapter(model: Any, adapter_dir: Path) -> None:
    """PEFT `save_pretrained` into a temp folder, then each file renamed into place (a kill leaves old or new)."""
    tmp = adapter_dir / ".saving"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    for item in tmp.iterdir():
        os.replace(item, adapter_dir / item.name)
    shutil.rmtree(tmp, ignore_errors=True)


class TRLBackend:
    """`TrainerBackend` over TRL's GRPOTrainer + PEFT LoRA."""

    name = "trl"

    def __init__(
        self,
        *,
        sampler_for: Callable[[Any], TurnSampler] | None = None,
        callbacks: list[Any] | None = None,
        on_trainer: Callable[[Any], None] | None = None,
        tracking: TrackingSettings | None = None,
    ) -> None:
        self._sampler_for = sampler_for
        self._callbacks = list(callbacks or [])
        self._on_trainer = on_trainer
        self._tracking = tracking

    def train(self, env: TrainEnv, cfg: TrainConfig, *, adapter_dir: Path, work_dir: Path) -> AdapterResult:
        tracking = self._tracking.for_run(env.name) if self._tracking is not None else None
        run = GRPORun(env, cfg, adapter_dir=Path(adapter_dir), work_dir=Path(work_dir), tracking=tracking)
        if is_done(run.adapter_dir):
            return AdapterResult(capability=env.name, adapter_dir=run.adapter_dir, skipped=True)
        run.prepare()
        run.load_policy()
        run.build_dataset()
        run.build_trainer(self._sampler_for, self._callbacks, self._on_trainer)
        run.write_train_config(backend=self.name)
        run.evaluate_before()
        run.train_from_checkpoint()
        run.save_adapter()
        run.evaluate_after()
        run.plot()
        return run.write_done()


class GRPORun:
    """One adapter's GRPO training, one method per step (`TRLBackend.train` calls them in order). Only the main
    process writes files; every process trains."""

    def __init__(
        self,
        env: TrainEnv,
        cfg: TrainConfig,
        *,
        adapter_dir: Path,
        work_dir: Path,
        tracking: TrackingSettings | None = None,
    ) -> None:
        self.started = time.time()
        self.tracking = tracking
        self.env, self.cfg = env, cfg
        self.adapter_dir, self.work_dir = adapter_dir, work_dir
        self.files, self.work = AdapterLayout(adapter_dir), TrainWorkLayout(work_dir)
        self.before: dict[str, Any] | None = None
        self.after: dict[str, Any] | None = None

    def prepare(self) -> None:
        """Folders, CPU threads, device and precision; TRL's warning for each dropped group silenced."""
        import torch

        self.adapter_dir.mkdir(parents=True, exist_ok=True)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        if self.cfg.num_threads:
            torch.set_num_threads(self.cfg.num_threads)
        self.device = resolve_device(self.cfg)
        self.bf16 = resolve_bf16(self.cfg, self.device)
        quiet_dropped_group_warnings()

    def load_policy(self) -> None:
        """The base model and tokenizer, and the chat codec (checked to extend a conversation's tokens as a prefix)."""
        self.model, self.tokenizer, self.model_path = load_policy(self.cfg, self.device, self.bf16)
        self.codec = ChatCodec(self.tokenizer)
        check_prefix_preserving(self.codec)
        self.limits = limits_of(self.cfg)

    def build_dataset(self) -> None:
        self.dataset, self.table, self.data_info = build_dataset(self.env, self.cfg, self.limits)

    def build_trainer(
        self,
        sampler_for: Callable[[Any], TurnSampler] | None,
        callbacks: list[Any],
        on_trainer: Callable[[Any], None] | None,
    ) -> None:
        """The group rollout (episodes of G seeds × K samples, filtered and re-sampled) feeding TRL's GRPOTrainer with
        a LoRA on the policy; metrics logged per step."""
        from trace_rl.training.metrics import MetricsCallback
        from trace_rl.training.shared_prefix import trainer_class

        env, cfg = self.env, self.cfg
        runner = EpisodeRunner(env, self.codec, self.limits, temperature=cfg.temperature, top_p=cfg.top_p)
        self.plan = GroupPlan(
            k=cfg.num_generations,
            filter_on=cfg.filter_on,
            resample_attempts=cfg.resample_attempts,
            min_informative_fraction=cfg.min_informative_fraction,
            hint_fraction=hint_fraction(env, cfg),
            resample_seed_start=getattr(env, "resample_seed_start", None) or cfg.resample_seed_start,
        )
        main = int(os.environ.get("RANK", "0")) == 0
        rollout = GroupRollout(
            env,
            runner,
            self.plan,
            self.table,
            sampler_for or self.default_sampler_for(),
            trajectories=JsonlStore(self.work.trajectories) if cfg.log_trajectories and main else None,
        )
        metrics = MetricsCallback(self.files.metrics, rollout, capability=env.name)
        args = grpo_args(cfg, self.work.checkpoints, device=self.device, bf16=self.bf16, tracking=self.tracking)
        self.trainer = trainer_class(cfg.shared_prefix)(
            model=self.model,
            reward_funcs=[env_reward],
            args=args,
            train_dataset=self.dataset,
            processing_class=self.tokenizer,
            peft_config=lora_config(cfg, self.model),
            rollout_func=rollout,
            callbacks=[metrics, *self.keeper(), *callbacks],
        )
        if on_trainer is not None:
            on_trainer(self.trainer)
        self.is_main = self.trainer.accelerator.is_main_process

    def keeper(self) -> list[Any]:
        """The callback copying the adapter at the config's kept steps to `kept/step-N/`, when it has any."""
        steps = self.cfg.kept_steps()
        return [checkpoint_keeper(self.work.kept, steps)] if steps else []

    def default_sampler_for(self) -> Callable[[Any], TurnSampler]:
        """The vLLM server with the adapter hot-swapped after every step (`vllm_sync.py`), or the trainer's own model
        in process (`cfg.sampler`; `auto` logs why it fell back)."""
        self.sampler = choose_sampler(self.cfg, world_size=world_size())
        if self.sampler == "transformers":
            self.sync: AdapterSync | None = None
            return hf_sampler_for(self.tokenizer)
        self.sync = vllm_sampler_for(
            self.cfg, self.model_path, work_dir=self.work.served_adapters, capability=self.env.name, save=save_adapter
        )
        return self.sync

    def eval_sampler(self, *, adapter: bool) -> TurnSampler | None:
        """The held-out evaluation's sampler: the server (the final adapter loaded under `<cap>-final`, or the base
        model) when training sampled through it, else None (the in-process model)."""
        sync = getattr(self, "sync", None)
        if sync is None:
            return None
        if not adapter:
            return VLLMSampler(sync.client)
        name = f"{self.env.name}-final"
        sync.client.load_adapter(name, self.adapter_dir)
        return VLLMSampler(sync.client, adapter=name)

    def write_train_config(self, *, backend: str) -> None:
        """`train_config.json`: the config and the setup it runs on (device, precision, batch layout, dataset)."""
        cfg, accelerator = self.cfg, self.trainer.accelerator
        micro, accumulation = batch_layout(cfg, accelerator.num_processes)
        record = TrainRecord(
            config=cfg.model_dump(mode="json"),
            capability=self.env.name,
            model_path=str(self.model_path),
            device=self.device,
            bf16=self.bf16,
            world_size=accelerator.num_processes,
            batch={"micro": micro, "accumulation": accumulation, "groups": cfg.groups_per_step},
            dataset=self.data_info,
            backend=backend,
            sampler=getattr(self, "sampler", "custom"),
            hint_fraction=self.plan.hint_fraction,
        )
        if self.is_main:
            write_train_record(self.files, record)

    def evaluate_before(self) -> None:
        """The base model on the held-out seeds (once: a resumed run reads `eval_before.json` back)."""
        from trace_rl.training.evaluate_adapter import evaluate_policy

        cfg = self.cfg
        self.held_out = held_out_seeds(self.env, cfg)
        self.eval_runner = EpisodeRunner(self.env, self.codec, self.limits, temperature=cfg.eval_temperature, top_p=1.0)
        stored = read_eval(self.files.eval_before)
        self.before = stored.model_dump(mode="json", exclude_none=True) if stored is not None else None
        if cfg.eval and self.is_main and self.before is None and self.held_out:
            self.before, episodes = evaluate_policy(
                self.eval_runner,
                self.trainer.model,
                self.tokenizer,
                self.held_out,
                trials=cfg.eval_trials,
                label="base",
                use_adapter=False,
                sampler=self.eval_sampler(adapter=False),
            )
            _write_episodes(self.work.eval_before, self.env.name, episodes)
            write_eval(self.files.eval_before, self.before)
        self.trainer.accelerator.wait_for_everyone()

    def train_from_checkpoint(self) -> None:
        """GRPO to `max_steps`, resuming from the newest complete checkpoint (a kill mid-save leaves a torn one)."""
        self.last = last_complete_checkpoint(self.work.checkpoints)
        self.trainer.train(resume_from_checkpoint=self.last)
        self.unwrapped = self.trainer.accelerator.unwrap_model(self.trainer.model)

    def save_adapter(self) -> None:
        if self.is_main:
            save_adapter(self.unwrapped, self.adapter_dir)

    def evaluate_after(self) -> None:
        """The adapter on the same held-out seeds; with the base model's figures, the before/after plot."""
        from trace_rl.training.evaluate_adapter import evaluate_policy, plot_before_after

        cfg = self.cfg
        if not (self.is_main and cfg.eval and self.held_out):
            return
        self.after, episodes = evaluate_policy(
            self.eval_runner,
            self.unwrapped,
            self.tokenizer,
            self.held_out,
            trials=cfg.eval_trials,
            label="adapter",
            use_adapter=True,
            sampler=self.eval_sampler(adapter=True),
        )
        _write_episodes(self.work.eval_after, self.env.name, episodes)
        write_eval(self.files.eval_after, self.after)
        if self.before is not None and _has_matplotlib():
            title = f"{self.env.name}: base vs adapter"
            plot_before_after(self.before, self.after, self.files.eval_plot, title=title)

    def plot(self) -> None:
        """The training curves from `metrics.jsonl` (with the `report` extra)."""
        from trace_rl.training.metrics import plot_training

        if self.is_main and _has_matplotlib():
            title = f"{self.env.name}: GRPO"
            plot_training(self.files.metrics, self.files.training_plot, title=title)

    def write_done(self) -> AdapterResult:
        """`done.json` last (its presence marks the adapter finished), then the result."""
        steps = self.trainer.state.global_step
        summary = {
            "steps": steps,
            "resumed_from": self.last,
            "wall_s": time.time() - self.started,
            "eval_before": _headline(self.before),
            "eval_after": _headline(self.after),
        }
        if self.is_main:
            write_done(self.files, DoneRecord(capability=self.env.name, finished_at=time.time(), **summary))
        self.trainer.accelerator.wait_for_everyone()
        return AdapterResult(
            capability=self.env.name,
            adapter_dir=self.adapter_dir,
            steps=steps,
            resumed_from=self.last,
            wall_s=summary["wall_s"],
            eval_before=self.before,
            eval_after=self.after,
            summary=summary,
        )


def _has_matplotlib() -> bool:
    """Figures need the `report` extra; without it the numbers are still written."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def _headline(summary: dict[str, Any] | None) -> dict[str, float] | None:
    if summary is None:
        return None
    keys = ("mean_reward", "success_rate", "episodes", "gold_call_logprob")
    return {k: summary[k] for k in keys if k in summary}


def _write_episodes(path: Path, env_name: str, episodes: list[Any]) -> None:
    store = JsonlStore(path)
    store.append(
        [ep.trajectory(env=env_name, split="held_out", trial=i, capability=env_name) for i, ep in enumerate(episodes)]
    )


__all__ = ["GRPORun", "TRLBackend", "save_adapter"]
