"""τ² retail variants: covered shapes, replay-verified gold, no test-split users, template user, capability need."""

from __future__ import annotations

import pytest

from trace_rl.artifacts.environments import write_env_spec
from trace_rl.artifacts.layout import EnvLayout
from trace_rl.config import EnvConfig
from trace_rl.config.synthesize import SynthesizeConfig
from trace_rl.envs.registry import load_domain
from trace_rl.envs.synthetic import load_capability_env
from trace_rl.envs.synthetic.tau2_variants import supported_shape
from trace_rl.errors import UserError
from trace_rl.synthesize.evidence import Evidence
from trace_rl.synthesize.from_target import target_spec
from trace_rl.synthesize.leak import build_index, check
from trace_rl.synthesize.validate import validate
from trace_rl.types import Capability


@pytest.fixture(scope="module")
def retail():
    cfg = EnvConfig(name="tau2:retail", reward_basis=["DB", "COMMUNICATE"])
    try:
        domain = load_domain(cfg.name, cfg)
        domain.tasks("train")
    except UserError as exc:
        pytest.skip(f"τ² data not available: {exc}")
    return cfg, domain


def test_covered_shapes(retail):
    _, domain = retail
    env = domain.make_env()
    covered = [t.id for t in domain.tasks("train") if supported_shape(t, env)]
    assert len(covered) >= 50  # 59 of 74 at HEAD; read-only refusals and transfers are not covered


@pytest.mark.parametrize("kind,knob", [("tool_calling_precision", 1), ("multi_step_completion", 3)])
def test_variants_validate_and_avoid_test_users(tmp_path, retail, kind, knob):
    cfg, domain = retail
    index, entities = build_index(domain)
    cap = Capability(name=kind, definition="A capability definition long enough to be precise.")
    spec, why = target_spec(Evidence(cap, tasks=domain.tasks("train")[:25]), kind, cfg, domain, SynthesizeConfig())
    assert spec is not None, why
    spec.generator.difficulty = knob
    write_env_spec(EnvLayout(tmp_path), spec)
    index.save(tmp_path)
    env = load_capability_env(tmp_path, target=domain)
    report = validate(env, list(range(6)))
    assert report.ok, report.feedback()
    tasks = [env.make_task(s) for s in range(6)]
    assert check(index, {}, tasks).ok
    for task in tasks:
        args = [a.arguments for a in task.evaluation_criteria.actions]
        assert not {a.get("user_id") for a in args} & entities.users
        assert not {a.get("order_id") for a in args} & entities.orders
        assert task.metadata["source_task_id"] in {t.id for t in domain.tasks("train")}
        user = env.scripted_user(task)
        assert user.name == "synthetic-template" and "I'd like to" in user.opening
        if knob >= 3:
            assert not any(a.name == "find_user_id_by_email" for a in task.evaluation_criteria.actions)
