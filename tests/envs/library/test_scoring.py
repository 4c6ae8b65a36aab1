"""Scoring is τ²'s (DB hash after gold replay × communicate): wrong or missing writes fail, correct refusals pass."""

from __future__ import annotations

import asyncio

from trace_rl.engine.text_driver import Agent, EpisodeSpec, run_episode
from trace_rl.envs.library import LibraryDomain, LibraryEnvironment, make_task
from trace_rl.envs.library.oracle import OracleClient
from trace_rl.models.base import ModelResponse
from trace_rl.types import Message, Task, TerminationReason, ToolCall


def task_of(family: str, variant: str) -> Task:
    for seed in range(500):
        task = make_task(family, seed)
        if task.metadata["variant"].startswith(variant):
            return task
    raise AssertionError(f"no {family}/{variant} task")


def call(name: str, **args) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(id=f"c_{name}", name=name, arguments=args)])


def say(text: str) -> Message:
    return Message(role="assistant", content=text)


def score(task: Task, agent_msgs: list[Message]) -> tuple[float, dict[str, float]]:
    """Play the agent's messages against a fresh env (executing its tool calls), then score with a user stop."""
    env = LibraryEnvironment()
    env.reset(task)
    messages: list[Message] = [say("Hi! How can I help you today?"), Message(role="user", content="hi")]
    for m in agent_msgs:
        messages.append(m)
        for c in m.tool_calls or []:
            messages.append(env.execute(c))
    messages.append(Message(role="user", content="###STOP###"))
    info = asyncio.run(env.score(task, messages, TerminationReason.USER_STOP))
    return info.reward, info.breakdown


def gold_calls(task: Task, *, skip: str | None = None, replace: dict | None = None) -> list[Message]:
    out = []
    for a in task.evaluation_criteria.actions:
        if a.name == skip:
            continue
        args = {**a.arguments, **(replace or {})} if replace and a.name in replace.get("_for", ()) else a.arguments
        out.append(call(a.name, **{k: v for k, v in args.items() if k != "_for"}))
    return out


def test_gold_path_with_the_facts_passes():
    task = task_of("authenticated_write", "renew")
    facts = " ".join(task.evaluation_criteria.communicate_info)
    assert score(task, [*gold_calls(task), say(f"Renewed; it is now due {facts}.")]) == (
        1.0,
        score(task, [*gold_calls(task), say(f"Due {facts}")])[1],
    )


def test_missing_write_fails():
    task = task_of("authenticated_write", "renew")
    facts = " ".join(task.evaluation_criteria.communicate_info)
    reward, breakdown = score(task, [*gold_calls(task, skip="renew_loan"), say(f"Done, due {facts}.")])
    assert reward == 0.0 and breakdown["DB"] == 0.0 and breakdown["COMMUNICATE"] == 1.0


def test_wrong_write_fails():
    task = task_of("copy_selection", "format")
    facts = " ".join(task.evaluation_criteria.communicate_info)
    target = task.metadata["target_copy"]
    env = LibraryEnvironment()
    env.reset(task)
    book = next(a.arguments["book_id"] for a in task.evaluation_criteria.actions if a.name == "get_book_copies")
    wrong = next(c.copy_id for c in env.tools.db.book_copies(book) if c.status == "available" and c.copy_id != target)
    msgs = gold_calls(task, skip="check_out")
    member = next(a.arguments["member_id"] for a in task.evaluation_criteria.actions if a.name == "check_out")
    reward, breakdown = score(task, [*msgs, call("check_out", member_id=member, copy_id=wrong), say(f"Due {facts}")])
    assert reward == 0.0 and breakdown["DB"] == 0.0
    # the same copy twice: the second call is a tool error, the DB still matches the gold one
    right = call("check_out", member_id=member, copy_id=target)
    assert score(task, [*msgs, right, right, say(f"Due {facts}")])[0] == 1.0


def test_wrong_amount_fails_and_extra_write_fails():
    task = task_of("authenticated_write", "pay_fine")
    facts = " ".join(task.evaluation_criteria.communicate_info)
    member = next(a.arguments["member_id"] for a in task.evaluation_criteria.actions if a.name == "pay_fine")
    assert score(task, [call("pay_fine", member_id=member, amount=0.5), say(facts)])[0] == 0.0
    amount = next(a.arguments["amount"] for a in task.evaluation_criteria.actions if a.name == "pay_fine")
    assert score(task, [call("pay_fine", member_id=member, amount=str(amount)), say(facts)])[0] == 1.0
    extra = [*gold_calls(task), call("pay_fine", member_id=member, amount=0.25), say(facts)]
    assert score(task, extra)[0] == 0.0


def test_correct_refusal_passes_and_policy_violation_fails():
    task = task_of("precondition_refusal", "fines")
    amount = task.evaluation_criteria.communicate_info[0]
    reads = gold_calls(task)
    assert score(task, [*reads, say(f"Sorry, your fines are ${amount}, so I cannot lend it.")])[0] == 1.0
    # a refusal without the blocking value fails on COMMUNICATE
    reward, breakdown = score(task, [*reads, say("Sorry, I cannot lend it.")])
    assert reward == 0.0 and breakdown == {**breakdown, "DB": 1.0, "COMMUNICATE": 0.0}
    # doing what the member asked, against the policy, fails on DB
    env = LibraryEnvironment()
    env.reset(task)
    book = next(a.arguments["book_id"] for a in task.evaluation_criteria.actions if a.name == "get_book_copies")
    copy = next(c.copy_id for c in env.tools.db.book_copies(book) if c.status == "available")
    member = next(a.arguments["member_id"] for a in task.evaluation_criteria.actions if a.name == "get_member_details")
    lent = [*reads, call("check_out", member_id=member, copy_id=copy), say(f"Lent. Your fines are {amount}.")]
    assert score(task, lent)[0] == 0.0


def test_lookup_needs_the_answer_said():
    task = task_of("lookup_answer", "author")
    author = task.evaluation_criteria.communicate_info[0]
    assert score(task, [say(f"It was written by {author}.")])[0] == 1.0  # reads are not scored
    assert score(task, [*gold_calls(task), say("I could not find it.")])[0] == 0.0


class ListClient:
    name = "list"

    def __init__(self, messages: list[Message]) -> None:
        self.messages = list(messages)

    async def chat(self, messages, tools=None, *, adapter=None, sampling=None) -> ModelResponse:
        return ModelResponse(message=self.messages.pop(0))

    async def aclose(self) -> None:
        return None


def episode(domain: LibraryDomain, task: Task, client) -> object:
    env = domain.make_env()
    agent = Agent(client, domain.system_prompt(), env.tool_schemas())
    spec = EpisodeSpec(env="library", split="test")
    return asyncio.run(run_episode(env=env, task=task, agent=agent, user=domain.scripted_user(task), spec=spec))


def test_oracle_solves_every_test_task_through_run_episode(domain: LibraryDomain):
    for task in domain.tasks("test"):
        traj = episode(domain, task, OracleClient(task))
        assert traj.termination == TerminationReason.USER_STOP and traj.success, (task.id, traj.reward_info)


def test_episode_refusal_passes_and_skipped_write_fails(domain: LibraryDomain):
    refusal = task_of("precondition_refusal", "card")
    status = refusal.evaluation_criteria.communicate_info[0]
    reads = gold_calls(refusal)
    traj = episode(domain, refusal, ListClient([*reads, say(f"Sorry, your card is {status}; I cannot lend books.")]))
    assert traj.termination == TerminationReason.USER_STOP and traj.success
    assert traj.messages[-1].content.endswith("###STOP###")

    write = task_of("authenticated_write", "renew/email")
    title_q = write.metadata["user_script"]["requests"][0]["text"].split('"')[1]
    confirm = say(f'Shall I renew "{title_q}"?')
    lazy = ListClient(
        [*gold_calls(write, skip="renew_loan"), confirm, say("All done, enjoy!"), say("All done, enjoy!")]
    )
    traj = episode(domain, write, lazy)
    assert traj.termination == TerminationReason.USER_STOP and not traj.success
    assert traj.reward_info.breakdown["DB"] == 0.0


def test_each_family_needs_its_capability(domain: LibraryDomain):
    """An oracle with one capability removed fails exactly the family built for it, and passes the others; an agent
    that never calls a tool passes nothing (no free passes)."""
    from trace_rl.envs.library.oracle import ABLATIONS

    needs = {"skip_checks": "precondition_refusal", "first_request_only": "multi_step"}
    needs["first_available_copy"] = "copy_selection"
    for ablate in ABLATIONS:
        for task in domain.tasks("test"):
            traj = episode(domain, task, OracleClient(task, ablate=ablate))
            family = task.metadata["family"]
            should_pass = ablate != "no_tools" and needs.get(ablate) != family
            assert bool(traj.success) == should_pass, (ablate, task.id, traj.reward_info.breakdown)
