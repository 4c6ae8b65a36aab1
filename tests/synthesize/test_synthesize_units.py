"""Units of the synthesize stage: capability typing, calibration figures and acceptance, the leak index."""

from __future__ import annotations

import pytest

from trace_rl.config import EnvConfig
from trace_rl.config.synthesize import AcceptanceConfig
from trace_rl.envs.registry import load_domain
from trace_rl.envs.synthetic.leak_guard import LeakIndex
from trace_rl.synthesize.calibrate import Rollout, figures, judge, pass_at_k
from trace_rl.synthesize.design import HINTS, capability_type
from trace_rl.synthesize.leak import build_index, check
from trace_rl.types import Capability, Trajectory


def test_capability_type():
    cap = Capability(name="checking_rules_first", definition="Verifying eligibility preconditions before acting.")
    assert capability_type(cap)[0] == "precondition_verification"
    assert capability_type(cap, ["multi_step_completion"] * 2)[0] == "multi_step_completion"
    odd = Capability(name="being_helpful", definition="Something nobody can classify at all, really.")
    assert capability_type(odd) == ("tool_calling_precision", "default (no keyword matched)")


def test_pass_at_k():
    assert pass_at_k(4, 0, 1) == 0.0 and pass_at_k(4, 4, 2) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25) and pass_at_k(4, 1, 2) == pytest.approx(0.5)


def _rollouts(table: list[list[tuple[float, bool]]]) -> list[Rollout]:
    out = []
    for seed, group in enumerate(table):
        for k, (reward, success) in enumerate(group):
            traj = Trajectory(id=f"{seed}/{k}", env="x", split="calibration", task_id=str(seed), trial=k, seed=seed)
            out.append(Rollout(seed, k, reward, success, traj, "v"))
    return out


def test_figures_and_acceptance():
    acc = AcceptanceConfig()
    good = figures(_rollouts([[(1, True), (0.2, False)], [(0.3, False), (1, True)], [(0.1, False), (0.4, False)]]), 2)
    assert good["informative_groups"] == 1.0 and good["success_rate"] == pytest.approx(2 / 6, abs=1e-4)
    assert judge(good, acc)[1:] == (True, None)
    easy = figures(_rollouts([[(1, True), (1, True)], [(1, True), (0.5, False)]]), 2)
    assert judge(easy, acc)[1:] == (False, "too_easy")
    hard = figures(_rollouts([[(0, False), (0, False)], [(0.1, False), (0, False)]]), 2)
    assert judge(hard, acc)[1:] == (False, "too_hard")
    flat = figures(_rollouts([[(0.4, True), (0.4, True)], [(0.4, False), (0.4, False)]]), 2)
    checks, ok, direction = judge(flat, acc)
    assert not ok and direction == "too_easy" and not checks["informative_groups"]["ok"]


def test_leak_index_on_the_library_test_split(tmp_path):
    domain = load_domain("library", EnvConfig(name="library", options={"n_train": 10, "n_test": 10}))
    index, _ = build_index(domain)
    test_task = next(t for t in domain.tasks("test") if "email" in t.metadata["user_script"]["facts"])
    facts = test_task.metadata["user_script"]["facts"]
    hits = index.check_text(f"Please help {facts['first_name']} {facts['last_name']} today.", "prompt")
    assert [h.kind for h in hits] == ["name"] and facts["last_name"] not in hits[0].masked
    assert index.check_task_ids([test_task.id], "evidence")
    assert not index.check_task_ids([domain.tasks("train")[0].id], "evidence")
    report = check(index, {"hint": " ".join(HINTS.values())}, domain.tasks("train")[:3])
    assert report.ok, report.as_dict()
    index.save(tmp_path)
    again = LeakIndex.load(tmp_path)
    assert again.prints == index.prints and again.check_text(facts["email"], "x")
    assert facts["email"] not in (tmp_path / "leak_index.json").read_text()  # only fingerprints are stored


def test_template_phrases_are_not_leaks_but_a_test_tasks_own_words_are():
    """A family template filled in a way the few train tasks never were (a language, a format) is the generator's,
    not the test split's: the index learns templates from a sample of fresh tasks too (`template_sample`)."""
    from trace_rl.envs.library import make_task
    from trace_rl.envs.library.splits import fresh_train_seeds

    domain = load_domain("library", EnvConfig(name="library", options={"n_train": 10, "n_test": 40}))
    index, _ = build_index(domain)
    openings = [t.metadata["user_script"]["opening"] for t in domain.tasks("test")]
    assert any(h.kind == "phrase" for text in openings for h in index.check_text(text, "test opening"))
    fresh = [make_task("copy_selection", s) for s in fresh_train_seeds(30, start=5_000)]
    hits = [h for t in fresh for h in index.check_text(t.metadata["user_script"]["opening"], t.id)]
    assert not [h for h in hits if h.kind == "phrase"]


def test_collect_samples_through_the_given_adapter_and_records_it(tmp_path):
    """Calibration's sampler plays one adapter when asked (the decision profile of trained adapters uses it)."""
    import asyncio

    from trace_rl.artifacts.environments import write_env_spec
    from trace_rl.artifacts.layout import EnvLayout
    from trace_rl.config.synthesize import SynthesizeConfig
    from trace_rl.engine.episode import EpisodeLimits
    from trace_rl.envs.synthetic import load_capability_env
    from trace_rl.models.base import ModelResponse
    from trace_rl.synthesize.calibrate import bounded, collect
    from trace_rl.synthesize.evidence import Evidence
    from trace_rl.synthesize.from_target import target_spec

    from .synth_helpers import decision_move

    cfg = EnvConfig(name="library", options={"n_train": 20, "n_test": 5})
    domain = load_domain("library", cfg)
    cap = Capability(name="answer_from_record", definition="Answering from the record that was just looked up.")
    evidence = Evidence(cap, tasks=[t for t in domain.tasks("train") if t.metadata["family"] == "lookup_answer"][:3])
    spec, why = target_spec(evidence, "structured_data_reasoning", cfg, domain, SynthesizeConfig(train_seeds=4))
    assert spec is not None, why
    spec.generator.params["decisions"] = {"answer_from_record": 1.0}
    write_env_spec(EnvLayout(tmp_path / "env"), spec)
    env = load_capability_env(tmp_path / "env", target=domain)

    class Solver:
        name = "solver"

        def __init__(self) -> None:
            self.adapters: list[str | None] = []
            self.systems: set[str] = set()

        async def chat(self, messages, tools=None, *, adapter=None, sampling=None) -> ModelResponse:
            self.adapters.append(adapter)
            self.systems.add(messages[0].content)
            seed = (sampling.seed // 1000) // 1000
            return ModelResponse(message=decision_move(env.make_task(seed), messages, solve=adapter == "cap"))

        async def aclose(self) -> None:
            return None

    def run(adapter, hinted=False):
        client = Solver()
        limits = bounded(EpisodeLimits(max_steps=6), env.agent_turns)
        kw = dict(seeds=[0, 1], samples=2, temperature=0.7, max_tokens=32, concurrency=2, limits=limits)
        return client, asyncio.run(collect(env, client, adapter=adapter, hinted=hinted, **kw))

    client, played = run("cap")
    assert len(played) == 4 and all(r.success for r in played)
    assert set(client.adapters) == {"cap"} and {r.trajectory.adapter for r in played} == {"cap"}
    client, base = run(None)
    assert set(client.adapters) == {None} and not any(r.success for r in base)
    assert client.systems == {env.system_prompt(hinted=False)}
    client, _ = run(None, hinted=True)  # the hint goes into every prompt, not a fraction of them
    assert client.systems == {env.system_prompt(hinted=True)} and env.spec.hint.text in next(iter(client.systems))
