"""`target_reseed`: capability environments over an imported target's fresh tasks — OpenEnv seeds past every test
seed, verifiers rows after train and test — scored by the environment's own reward, validated without a reference
path (doing nothing must not pay), and refused where the target has nothing fresh to give."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openenv")

from tests.envs.openenv.test_openenv_import import GUESS, act

from trace_rl.config import EnvConfig
from trace_rl.config.synthesize import SynthesizeConfig
from trace_rl.engine.text_driver import EpisodeSpec, domain_agent, run_episode
from trace_rl.envs.registry import load_domain
from trace_rl.envs.synthetic.environment import CapabilityEnvironment
from trace_rl.errors import UserError
from trace_rl.models.scripted import ScriptedClient
from trace_rl.synthesize.evidence import Evidence
from trace_rl.synthesize.from_target import target_spec
from trace_rl.synthesize.validate import validate
from trace_rl.types import Capability

CAPABILITY = Capability(name="multi_step_task_completion", definition="Keeps guessing until the digit is found.")


def capability_env(tmp_path: Path, name: str, options: dict[str, Any]) -> tuple[CapabilityEnvironment, Any]:
    cfg = EnvConfig(name=name, options=options)
    target = load_domain(name, cfg)
    evidence = Evidence(capability=CAPABILITY, tasks=target.tasks("train")[:2])
    spec, why = target_spec(evidence, "multi_step_completion", cfg, target, SynthesizeConfig())
    assert spec is not None, why
    return CapabilityEnvironment(spec, tmp_path, status="ready", target=target), target


def play(cap_env: CapabilityEnvironment, seed: int, script: list[Any]):
    task = cap_env.make_task(seed)
    env = cap_env.make_env()
    agent = domain_agent(cap_env.target, ScriptedClient(script), tools=env.tool_schemas())
    spec = EpisodeSpec(env=cap_env.name, split="train", seed=seed)
    return task, asyncio.run(run_episode(env=env, task=task, agent=agent, user=cap_env.scripted_user(task), spec=spec))


def test_openenv_fresh_seeds_lie_past_train_and_test_and_pay_the_environments_reward(tmp_path):
    from tests.envs.openenv.guess_env.server.guess_environment import hidden_digit

    cap_env, target = capability_env(tmp_path, f"openenv:{GUESS}", {"n_train": 8, "n_test": 4, "test_offset": 50})
    spec = cap_env.spec
    assert spec.generator.kind == "target_reseed" and spec.reward.source == "target"
    split_seeds = {t.metadata["seed"] for split in ("train", "test") for t in target.tasks(split)}
    tasks = [cap_env.make_task(s) for s in range(20)]
    seeds = [t.metadata["seed"] for t in tasks]
    assert len(set(seeds)) == 20 and not set(seeds) & split_seeds and min(seeds) >= 1_000_000
    assert [t.id for t in tasks] == [f"{CAPABILITY.name}-{s}" for s in range(20)]

    task, won = play(cap_env, 3, [act(guess=hidden_digit(cap_env.make_task(3).metadata["seed"])), "Found it."])
    assert won.reward == 1.0 and cap_env.reward(task, won) == (1.0, True)
    wrong = (hidden_digit(task.metadata["seed"]) + 1) % 10
    _, lost = play(cap_env, 3, [act(guess=wrong), "It is that one."])
    assert lost.reward == 0.0 and cap_env.reward(task, lost) == (0.0, False)


def test_validation_without_a_reference_path_requires_that_doing_nothing_does_not_pay(tmp_path):
    cap_env, _ = capability_env(tmp_path, f"openenv:{GUESS}", {"n_train": 4, "n_test": 2, "test_offset": 10})
    report = validate(cap_env, [0, 1, 2])
    assert report.ok and report.sensitivity == 1.0
    assert all(c.gold_reward is None and c.ablated_reward == 0.0 for c in report.checks)


def test_fresh_offset_inside_the_test_seeds_is_refused():
    with pytest.raises(UserError, match="fresh_offset"):
        load_domain(
            f"openenv:{GUESS}", EnvConfig(name="openenv", options={"n_train": 4, "test_offset": 10, "fresh_offset": 12})
        )


def test_verifiers_fresh_rows_follow_train_and_test_and_wrap(tmp_path, monkeypatch):
    pytest.importorskip("verifiers")
    from tests.envs.verifiers.test_verifiers_import import MODULE, PACKAGE

    (tmp_path / "pkgs" / MODULE).mkdir(parents=True)
    (tmp_path / "pkgs" / MODULE / "__init__.py").write_text(textwrap.dedent(PACKAGE))
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    name = f"verifiers:{MODULE}"
    cap_env, target = capability_env(tmp_path, name, {"n_train": 2, "n_test": 2})
    assert [t.id for t in target.tasks("test")] == ["sum-2", "sum-3"]  # fresh rows stay out of the test split
    assert target.fresh_count() == 2
    rows = [cap_env.make_task(s).metadata["row"] for s in range(4)]
    assert rows == [4, 5, 4, 5]

    cfg = EnvConfig(name=name, options={"n_train": 4, "n_test": 2})
    full = load_domain(name, cfg)
    spec, why = target_spec(Evidence(capability=CAPABILITY), "multi_step_completion", cfg, full, SynthesizeConfig())
    assert spec is None and "no fresh seeds or rows" in why
