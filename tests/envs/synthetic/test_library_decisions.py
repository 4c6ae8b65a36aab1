"""Decision environments over the library (`library_decisions`, TRACE's Definition 2): each task opens at its
decision point with the target's history replayed; the right move scores 1 and succeeds, moves that skip the
capability score lower; the choice of decisions follows the capability's type and the evidence families; an episode
through the engine sees the history and is scored on its first move."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from trace_rl.artifacts.environments import write_env_spec
from trace_rl.artifacts.layout import EnvLayout
from trace_rl.config import EnvConfig
from trace_rl.config.synthesize import SynthesizeConfig
from trace_rl.engine.text_driver import Agent, EpisodeSpec, run_episode
from trace_rl.envs.library.splits import SplitOptions, split_seeds
from trace_rl.envs.registry import load_domain
from trace_rl.envs.synthetic import CapabilityEnvironment, load_capability_env
from trace_rl.envs.synthetic.library_decisions import DECISIONS, Case, confirmation_text, decisions_for, moves
from trace_rl.errors import UserError
from trace_rl.models.scripted import ScriptedClient
from trace_rl.synthesize.evidence import Evidence
from trace_rl.synthesize.from_target import target_spec
from trace_rl.synthesize.validate import validate
from trace_rl.types import Capability, Message, ToolCall

# one capability type per decision (the first of its types) and the evidence family that leads to it
CASES = {
    "identify_first": ("tool_calling_precision", "authenticated_write"),
    "confirm_before_change": ("multi_step_completion", "multi_step"),
    "quote_blocking_value": ("precondition_verification", "precondition_refusal"),
    "choose_lendable_copy": ("structured_data_reasoning", "copy_selection"),
    "answer_from_record": ("structured_data_reasoning", "lookup_answer"),
    "finish_every_request": ("multi_step_completion", "multi_step"),
}


@pytest.fixture(scope="module")
def library():
    cfg = EnvConfig(name="library", options={"n_train": 40, "n_test": 10})
    return cfg, load_domain("library", cfg)


def build(tmp: Path, library, decision: str, difficulty: int = 1) -> CapabilityEnvironment:
    cfg, domain = library
    kind, family = CASES[decision]
    cap = Capability(name=decision, definition=f"The {decision.replace('_', ' ')} capability, defined precisely.")
    evidence = Evidence(cap, tasks=[t for t in domain.tasks("train") if t.metadata["family"] == family][:3])
    spec, why = target_spec(evidence, kind, cfg, domain, SynthesizeConfig(train_seeds=12, test_seeds=6))
    assert spec is not None, why
    spec.generator.params["decisions"] = {decision: 1.0}
    spec.generator.difficulty = difficulty
    write_env_spec(EnvLayout(tmp / decision), spec)
    return load_capability_env(tmp / decision, target=domain)


def after_history(env: CapabilityEnvironment, task, played: list[Message]) -> list[Message]:
    return [*env.make_env().reset(task), *played, Message(role="user", content="###STOP###")]


@pytest.mark.parametrize("decision", list(DECISIONS))
def test_each_decision_validates_and_the_capability_is_necessary(tmp_path, library, decision):
    env = build(tmp_path, library, decision)
    assert env.spec.generator.kind == "library_decisions" and env.spec.reward.success == "decision"
    report = validate(env, list(range(6)))
    assert report.ok and report.sensitivity == 1.0, report.feedback()
    for check in report.checks:
        assert check.gold_reward == 1.0 and check.ablated_reward is not None and check.ablated_reward < 1.0
    task = own_task(env)
    case = Case.of(task)
    history = task.initial_state.message_history
    assert case.kind == decision and case.history == len(history)
    assert history[0] == {"role": "user", "content": task.metadata["user_script"]["opening"]}
    calls = [c["name"] for m in history for c in m.get("tool_calls") or []]
    if decision != "finish_every_request":  # a history replays reads only, but for a first request handled whole
        assert not {"check_out", "renew_loan", "place_hold", "cancel_hold", "pay_fine", "return_copy"} & set(calls)
    if decision == "identify_first":
        assert len(history) == 1  # the opening only: the lookup is the agent's to make
    elif decision == "finish_every_request":  # the first request handled whole; the member reminds of the next
        assert (
            sum(c in ("check_out", "renew_loan", "place_hold", "cancel_hold", "pay_fine", "return_copy") for c in calls)
            == 1
        )
        assert [m["content"] for m in history if m["role"] == "user"][1] == "Yes, please go ahead."
        requests = task.metadata["user_script"]["requests"]
        assert history[-1] == {"role": "user", "content": requests[1]["text"]}
        member = env.scripted_user(task)
        assert member.confirmed == {0} and member.pending()[0] == 1  # caught up with the history
    else:
        assert history[-1]["role"] == "tool" and not history[-1]["error"]


def own_seeds(env: CapabilityEnvironment, n: int = 1) -> list[int]:
    """The first `n` seeds whose tasks are not contrast tasks (catalog questions) of the environment's decisions."""
    contrast = {f for name in env.spec.generator.params["decisions"] for f in DECISIONS[name].contrast}
    return [s for s in range(40) if env.make_task(s).metadata["family"] not in contrast][:n]


def own_task(env: CapabilityEnvironment):
    return env.make_task(own_seeds(env)[0])


def test_tasks_are_deterministic_and_never_target_worlds(tmp_path, library):
    env = build(tmp_path, library, "confirm_before_change")
    again = load_capability_env(env.folder, target=library[1])
    assert env.make_task(5).model_dump_json() == again.make_task(5).model_dump_json()
    assert env.make_task(5).model_dump_json() != env.make_task(6).model_dump_json()
    used = {s for split in ("train", "test") for _, s in split_seeds(split, SplitOptions(n_train=40, n_test=10))}
    assert not {env.make_task(s).metadata["world_seed"] for s in range(10)} & used


def test_difficulty_adds_look_alike_records_to_the_replayed_state(tmp_path, library):
    easy, hard = build(tmp_path / "a", library, "identify_first"), build(tmp_path / "b", library, "identify_first", 3)
    seed = next(s for s in range(20) if hard.make_task(s).metadata["family"] != "lookup_answer")  # not a contrast
    plain, harder = easy.make_task(seed), hard.make_task(seed)
    assert "distractors" not in plain.metadata and len(harder.metadata["distractors"]) >= 1
    assert harder.initial_state.message_history[0]["role"] == "user"


def score(env: CapabilityEnvironment, task, *played: Message):
    return env.rewarder.score_messages(task, after_history(env, task, list(played)))


def say(text: str) -> Message:
    return Message(role="assistant", content=text)


def call(name: str, **arguments) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(id=f"t_{name}", name=name, arguments=arguments)])


def test_judges_grade_partial_and_wrong_moves(tmp_path, library):
    confirm = build(tmp_path, library, "confirm_before_change")
    task = own_task(confirm)
    e = Case.of(task).expected
    write = call(e["write"]["name"], **e["write"]["arguments"])
    asked = say(confirmation_text(confirm_request(task)))
    assert score(confirm, task, asked, write).success  # the question first, then the write: right
    assert score(confirm, task, write, asked).reward == 0.0  # the write before the question
    assert score(confirm, task, say("Shall I renew something else for you? Please confirm.")).reward in (0.0, 0.5)
    assert score(confirm, task, say("Done.")).reward == 0.0

    refusal = build(tmp_path, library, "quote_blocking_value")
    task = refusal.make_task(0)
    value = Case.of(task).expected["value"]
    assert score(refusal, task, say(f"Sorry, that is not possible ({value}).")).success
    assert score(refusal, task, say("Sorry, that is not possible.")).reward == 0.25  # no change, but no reason

    answer = build(tmp_path, library, "answer_from_record")
    task = answer.make_task(0)
    value = Case.of(task).expected["value"]
    again = call("search_catalog", query="x")
    assert score(answer, task, again, say(f"{value}.")).reward == 0.5  # the record already had it
    assert not score(answer, task, again, say(f"{value}.")).success

    identify = build(tmp_path, library, "identify_first")
    task = identify.make_task(0)
    email = Case.of(task).expected["call"]["arguments"]["email"]
    assert score(identify, task, call("find_member_by_email", email=email.upper())).success  # case is not a fact
    assert score(identify, task, call("find_member_by_email", email="x" + email)).reward == 0.5
    assert score(identify, task, say("What is your email?")).reward == 0.0


def confirm_request(task):
    from trace_rl.envs.library.scenario import Request

    return Request.model_validate(Case.of(task).expected["request"])


def test_decisions_follow_the_type_and_the_evidence_families():
    chosen, how = decisions_for("precondition_verification", {"precondition_refusal": 3, "lookup_answer": 2})
    assert chosen == {"identify_first": 3.0, "quote_blocking_value": 3.0} and "covering" in how
    chosen, how = decisions_for("multi_step_completion", {"lookup_answer": 4})
    assert chosen == {"answer_from_record": 1.0} and "every decision that does" in how
    chosen, _ = decisions_for("structured_data_reasoning", {})
    assert set(chosen) == {"choose_lendable_copy", "answer_from_record"}


def test_a_capability_named_after_a_decision_trains_that_decision_alone(library):
    """The probe analyzer names capabilities after their decisions: the type and the families choose nothing else."""
    cfg, domain = library
    cap = Capability(name="confirm_before_change", definition=DECISIONS["confirm_before_change"].definition)
    evidence = Evidence(cap, tasks=[t for t in domain.tasks("train") if t.metadata["family"] == "multi_step"][:3])
    spec, why = target_spec(evidence, "multi_step_completion", cfg, domain, SynthesizeConfig())
    assert spec is not None, why
    assert spec.generator.params["decisions"] == {"confirm_before_change": 1.0}
    assert "named after" in spec.generator.params["decisions_from"]
    other = Capability(name="multi_step_task_completion", definition=cap.definition)
    spec, _ = target_spec(
        Evidence(other, tasks=evidence.tasks), "multi_step_completion", cfg, domain, SynthesizeConfig()
    )
    assert spec is not None and set(spec.generator.params["decisions"]) == {
        "confirm_before_change",
        "finish_every_request",
    }


def test_unknown_or_missing_decisions_are_one_clear_error(tmp_path, library):
    env = build(tmp_path, library, "answer_from_record")
    env.spec.generator.params["decisions"] = {"guess_the_weather": 1.0}
    write_env_spec(EnvLayout(env.folder), env.spec)
    with pytest.raises(UserError, match="guess_the_weather"):
        load_capability_env(env.folder, target=library[1]).make_task(0)


def test_an_episode_sees_the_history_and_is_scored_on_its_move(tmp_path, library):
    env = build(tmp_path, library, "choose_lendable_copy")
    task = env.make_task(2)
    right, wrong = moves(Case.of(task))
    views: list[list[Message]] = []

    def episode(move: Message):
        client = ScriptedClient([move, say("Thank you, goodbye.")], on_exhausted="repeat_last")
        target_env = env.make_env()
        agent = Agent(client, env.system_prompt(), target_env.tool_schemas())
        spec = EpisodeSpec(env=f"synthetic:{env.name}", split="train")
        trajectory = asyncio.run(
            run_episode(env=target_env, task=task, agent=agent, user=env.scripted_user(task), spec=spec)
        )
        views.append(client.calls[0].messages)
        return env.score(task, trajectory)

    good, bad = episode(right[0]), episode(wrong[0])
    assert good.success and good.reward == 1.0 and not bad.success and bad.reward == 0.0
    first_view = views[0]
    assert any(c.id == "history_3" for m in first_view for c in m.tool_calls or [])  # the copies were looked up
    assert first_view[-1].role == "tool"  # the agent speaks right after the replayed copy listing


def test_calibration_moves_weight_toward_the_decisions_the_base_gets_right():
    from trace_rl.envs.synthetic.library_decisions import reweighted

    # identify_first 0/10 right, answer_from_record 8/10: equal weights expect 0.4 · 0 + … = 0.4
    params = {"decisions": {"identify_first": 3.0, "answer_from_record": 1.0}}  # expected success 0.2
    outcomes = (
        [("identify_first", False)] * 10 + [("answer_from_record", True)] * 8 + [("answer_from_record", False)] * 2
    )
    easier = reweighted(params, outcomes, "too_hard", target=0.4)
    assert easier is not None and sum(easier["decisions"].values()) == pytest.approx(4.0)
    share = easier["decisions"]["answer_from_record"] / 4.0
    assert share * 0.8 == pytest.approx(0.4, abs=1e-3)  # just far enough: expected success at the target
    assert easier["moves"][0]["direction"] == "too_hard" and easier["moves"][0]["success"]["identify_first"] == 0.0
    harder = reweighted({"decisions": {"identify_first": 1.0, "answer_from_record": 3.0}}, outcomes, "too_easy")
    assert harder["decisions"]["identify_first"] / 4.0 == pytest.approx(0.5, abs=1e-3)  # 0.6 → 0.4
    assert reweighted(params, outcomes, "no_signal") is None
    assert reweighted({"decisions": {"identify_first": 1.0}}, outcomes, "too_hard") is None  # nothing to move
    stuck = [("identify_first", False), ("answer_from_record", False)]
    assert reweighted(params, stuck, "too_hard") is None  # every decision at the same rate: nothing to move toward
    on_target = reweighted({"decisions": {"identify_first": 1.0, "answer_from_record": 1.0}}, outcomes, "too_hard")
    assert on_target["decisions"]["answer_from_record"] == pytest.approx(1.5)  # all-zero groups: half-way
    # the next attempt drew no identify_first task: its rate is the last move's, so the move back still can happen
    back = reweighted(on_target, [("answer_from_record", True)] * 10, "too_easy")
    assert back is not None and back["decisions"]["identify_first"] > on_target["decisions"]["identify_first"]


def test_decision_episodes_end_after_the_moves_the_judge_reads(tmp_path, library):
    from trace_rl.engine.episode import EpisodeLimits
    from trace_rl.envs.synthetic.environment import DECISION_TURNS
    from trace_rl.synthesize.calibrate import bounded

    env = build(tmp_path, library, "identify_first")
    assert env.agent_turns == DECISION_TURNS
    assert bounded(EpisodeLimits(max_steps=24), env.agent_turns).max_turns == DECISION_TURNS
    assert bounded(EpisodeLimits(max_turns=1), env.agent_turns).max_turns == 1
    assert bounded(EpisodeLimits(max_steps=24), None) == EpisodeLimits(max_steps=24)


def test_identify_first_has_catalog_questions_where_identifying_is_wrong(tmp_path, library):
    """Trained only on account requests, an adapter learns to look the member up first on every request (measured:
    it broke the catalog lookups). A quarter of `identify_first` tasks are catalog questions whose right move is the
    search."""
    env = build(tmp_path, library, "identify_first")
    tasks = [env.make_task(s) for s in range(40)]
    contrast = [t for t in tasks if t.metadata["family"] == "lookup_answer"]
    assert 4 <= len(contrast) <= 18 and len(contrast) < len(tasks)
    task = contrast[0]
    query = task.evaluation_criteria.actions[0].arguments["query"]
    assert score(env, task, call("search_catalog", query=f'"{query}"')).success
    assert score(env, task, call("find_member_by_email", email="a@b.c")).reward == 0.0


def test_confirm_before_change_has_catalog_questions_where_asking_is_wrong(tmp_path, library):
    """Trained only on account requests opened after their reads, a confirmation adapter asked "Shall I go ahead?" on
    catalog questions and identified members nobody named (measured: lookups 48.3 → 3.3 % on the target). A quarter
    of its tasks are catalog questions: half open at the opening, where the right move is the search, half after the
    read, where it is the answer from the record."""
    env = build(tmp_path, library, "confirm_before_change")
    tasks = [env.make_task(s) for s in range(60)]
    contrast = [t for t in tasks if t.metadata["family"] == "lookup_answer"]
    assert 6 <= len(contrast) <= 27 and len(contrast) < len(tasks)
    opening = [t for t in contrast if len(t.initial_state.message_history) == 1]
    after_read = [t for t in contrast if len(t.initial_state.message_history) > 1]
    assert opening and after_read
    task = opening[0]
    query = task.evaluation_criteria.actions[0].arguments["query"]
    assert score(env, task, call("search_catalog", query=f'"{query}"')).success
    assert score(env, task, call("find_member_by_email", email="a@b.c")).reward == 0.0
    task = after_read[0]
    history = task.initial_state.message_history
    assert [c["name"] for m in history for c in m.get("tool_calls") or []] == ["search_catalog"]
    assert history[-1]["role"] == "tool" and not history[-1]["error"]
    value = Case.of(task).expected["value"]
    assert score(env, task, say(f"It is {value}.")).success
    asked = say(f"I will check out the book with {value} for you. Shall I go ahead?")
    assert score(env, task, asked).reward == 0.0  # a yes/no question where nothing was asked to change
    assert score(env, task, say("It is a fine book.")).reward == 0.0


def test_identify_first_is_made_once(tmp_path, library):
    """Trained on the first move alone, an adapter called the email lookup again and again on the target (measured).
    The judge reads the moves after it too: the lookup repeated is half a score and no success; going on is success."""
    env = build(tmp_path, library, "identify_first")
    task = next(t for t in (env.make_task(s) for s in range(40)) if t.metadata["family"] != "lookup_answer")
    email = task.evaluation_criteria.actions[0].arguments["email"]
    lookup = call("find_member_by_email", email=email)
    assert score(env, task, lookup).success
    assert score(env, task, lookup, say("Thanks! What would you like to do today?")).success
    again = score(env, task, lookup, call("find_member_by_email", email=email))
    assert not again.success and again.reward == pytest.approx(0.5)


def test_a_single_decision_environment_hints_its_own_move_and_calibration_hints_as_grpo_will(tmp_path, library):
    """The hint of a one-decision environment is that decision's right move (not its capability type's generic
    hint), and calibration samples `round(fraction × K)` of each group with it, as GRPO's groups are drawn: a base
    that confirms only when hinted gives informative groups, half successes, all of them hinted."""
    from trace_rl.config.synthesize import AcceptanceConfig
    from trace_rl.synthesize.calibrate import calibrate

    env = build(tmp_path, library, "confirm_before_change")
    assert env.spec.hint.text == DECISIONS["confirm_before_change"].hint
    assert env.spec.hint.text in env.system_prompt(hinted=True) and env.spec.hint.text not in env.system_prompt()
    seeds = own_seeds(env, 3)
    right = {}
    for seed in seeds:
        task = env.make_task(seed)
        right[task.metadata["user_script"]["opening"]] = moves(Case.of(task))[0][0]

    def base(messages: list[Message], tools) -> Message:
        opening = next(m.content for m in messages if m.role == "user" and not m.example)
        hinted = env.spec.hint.text in (messages[0].content or "")
        return right[opening] if hinted else say("Let me look into that for you.")

    env.spec.hint.fraction = 0.5
    result = asyncio.run(
        calibrate(
            env,
            ScriptedClient(base, on_exhausted="repeat_last"),
            groups=len(seeds),
            samples=4,
            acceptance=AcceptanceConfig(),
            seeds=seeds,
        )
    )
    fig = result.figures
    assert fig["hinted_share"] == 0.5 and fig["success_rate"] == 0.5
    assert fig["hinted_success_rate"] == 1.0 and fig["unhinted_success_rate"] == 0.0
    assert fig["informative_groups"] == 1.0
    assert sorted(r.sample for r in result.rollouts if r.success) == [0, 0, 0, 1, 1, 1]  # the first two of each group
