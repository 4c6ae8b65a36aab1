"""The agent's prompt is part of the domain: versioned, short, with the tool list, the policy and worked examples."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json

from trace_rl.engine.text_driver import domain_agent
from trace_rl.envs.library import PROMPT_VERSION, LibraryDomain, system_prompt
from trace_rl.envs.library.prompt import (
    PROMPT_EXAMPLES,
    WORKED_EXAMPLES,
    Exchange,
    example_messages,
    policy_text,
    prompt_sha,
    worked_example_text,
)
from trace_rl.envs.library.tools import LibraryTools
from trace_rl.envs.library.user import is_confirmation
from trace_rl.envs.library.world import world
from trace_rl.envs.toolkit import ToolType
from trace_rl.models.base import ModelResponse
from trace_rl.models.toolcall_parse import parse_completion
from trace_rl.types import Message


def test_prompt_is_versioned_and_recorded(domain: LibraryDomain):
    assert domain.prompt_version == PROMPT_VERSION and PROMPT_VERSION.startswith("library-agent-")
    assert domain.system_prompt() == system_prompt()
    assert domain.prompt_record() == {"prompt_version": PROMPT_VERSION, "prompt_sha": prompt_sha()}


def test_prompt_lists_every_tool_and_the_policy_and_stays_short():
    prompt = system_prompt()
    for name in LibraryTools.tool_methods():
        assert f"- {name}(" in prompt
    for line in policy_text().splitlines():
        if line and not line.startswith("#"):
            assert line in prompt
    assert "2025-03-14" in prompt
    assert len(prompt) < 4000  # roughly 900 tokens: the default model has an 8k context


def test_worked_examples_are_real_exchanges():
    messages = example_messages()
    assert [m.role for m in messages].count("user") == len(WORKED_EXAMPLES) >= 3
    for example in WORKED_EXAMPLES:
        for name, arguments, _ in example.calls():
            assert name in LibraryTools.tool_methods()
            assert set(arguments) <= set(inspect.signature(LibraryTools.tool_methods()[name]).parameters)
    # every call is followed by its result; every exchange ends with an answer quoting its last result
    for call, result in itertools.pairwise(messages):
        if call.role == "assistant" and call.tool_calls:
            assert result.role == "tool" and result.tool_call_id == call.tool_calls[0].id
    _user, call, result, answer = messages[:4]
    assert json.loads(result.content)[0]["author"] in answer.content
    message = parse_completion(worked_example_text().splitlines()[1].removeprefix("agent: "))
    assert message.tool_calls and message.tool_calls[0].arguments == call.tool_calls[0].arguments
    assert example_messages()[1] is not call  # fresh copies: callers may mutate them


def test_worked_examples_use_ids_the_worlds_never_generate(domain: LibraryDomain):
    """An agent that copies an example's id must fail, not hit a real record."""
    text = worked_example_text()
    assert all(i in text for i in ("B090", "B091", "B092", "M0410"))
    for seed in sorted({int(t.metadata.get("world_seed", 0)) for t in domain.tasks("test")})[:5]:
        db = world(seed)
        assert not {"B090", "B091", "B092"} & set(db.books) and "M0410" not in db.members


def test_prompt_v3_adds_a_renewal_with_its_confirmation_and_is_recorded():
    domain = LibraryDomain({"prompt": "library-agent-v3"})
    assert domain.prompt_version == "library-agent-v3"
    assert domain.prompt_record() == {
        "prompt_version": "library-agent-v3",
        "prompt_sha": prompt_sha("library-agent-v3"),
    }
    assert prompt_sha("library-agent-v3") != prompt_sha()
    v2, v3 = example_messages(), domain.example_messages()
    # the renewal goes between the third example and the last lookup
    assert v3[: len(v2) - 4] == v2[:-4] and [m.content for m in v3[-4:]] == [m.content for m in v2[-4:]]
    assert [type(s) is Exchange for s in PROMPT_EXAMPLES["library-agent-v3"][3].steps] == [False, False, True, False]
    # the confirmation is a text turn and the yes a member turn, between the record read and the write
    roles = [(m.role, bool(m.tool_calls)) for m in v3[len(v2) - 4 : -4]]
    assert roles == [
        ("user", False),
        ("assistant", True),
        ("tool", False),
        ("assistant", True),
        ("tool", False),
        ("assistant", False),
        ("user", False),
        ("assistant", True),
        ("tool", False),
        ("assistant", False),
    ]
    for name, arguments, _ in PROMPT_EXAMPLES["library-agent-v3"][3].calls():
        assert set(arguments) <= set(inspect.signature(LibraryTools.tool_methods()[name]).parameters)
    text = worked_example_text("library-agent-v3")
    assert "agent: I will renew your loan" in text and "member: Yes, please go ahead." in text
    for seed in sorted({int(t.metadata.get("world_seed", 0)) for t in domain.tasks("test")})[:5]:
        db = world(seed)  # the renewal's ids are made up too
        assert "M0522" not in db.members and "B093" not in db.books


def test_prompt_v4_adds_a_confirmed_fine_payment_whose_result_the_real_tool_gives():
    domain = LibraryDomain({"prompt": "library-agent-v4"})
    assert domain.prompt_record()["prompt_sha"] == prompt_sha("library-agent-v4") != prompt_sha("library-agent-v3")
    v3, v4 = PROMPT_EXAMPLES["library-agent-v3"], PROMPT_EXAMPLES["library-agent-v4"]
    assert v4[:4] == v3[:4] and v4[-1] == v3[-1] and len(v4) == len(v3) + 1  # the payment after the renewal
    payment = v4[4]
    assert [type(s) is Exchange for s in payment.steps] == [False, False, True, False]
    assert "Shall I go ahead?" in payment.steps[2].agent and "2.00" in payment.steps[2].agent
    # the payment's shown result is what the library's own tool returns for that member
    db = world(0)
    record = payment.steps[1][2]
    member = next(iter(db.members.values())).model_copy(update={"member_id": "M0617", "fines": float(record["fines"])})
    db.members["M0617"] = member
    name, arguments, shown = payment.steps[3]
    assert getattr(LibraryTools(db), name)(**arguments) == shown
    assert shown["fines"] in payment.answer and shown["paid"] in payment.answer
    for seed in sorted({int(t.metadata.get("world_seed", 0)) for t in domain.tasks("test")})[:5]:
        assert "M0617" not in world(seed).members  # made-up ids, as in the other examples


def test_prompt_v5_confirms_a_write_of_every_kind_before_making_it():
    writes = {n for n, fn in LibraryTools.tool_methods().items() if fn.__tool_type__ == ToolType.WRITE}
    examples = PROMPT_EXAMPLES["library-agent-v5"]
    made = set()
    for example in examples:
        for before, step in itertools.pairwise(example.steps):
            if not isinstance(step, Exchange) and step[0] in writes:
                made.add(step[0])
                assert isinstance(before, Exchange) and is_confirmation(before.agent)  # the judge's own test
    assert made == writes
    assert examples[-1] == WORKED_EXAMPLES[-1]  # the last example is still a catalog lookup
    for seed in sorted({int(t.metadata.get("world_seed", 0)) for t in LibraryDomain().tasks("test")})[:3]:
        db, text = world(seed), worked_example_text("library-agent-v5")
        assert not {i for i in (*db.members, *db.books, *db.copies) if i in text}  # every id made up


class Recorder:
    name = "recorder"

    def __init__(self) -> None:
        self.seen = []

    async def chat(self, messages, tools=None, *, adapter=None, sampling=None) -> ModelResponse:
        self.seen.append((messages, tools))
        return ModelResponse(message=Message(role="assistant", content="Hello"))

    async def aclose(self) -> None:
        return None


def test_domain_agent_sends_system_prompt_then_example_then_conversation(domain: LibraryDomain):
    client = Recorder()
    agent = domain_agent(domain, client)
    history = [Message(role="assistant", content="Hi!"), Message(role="user", content="Who wrote X?")]
    asyncio.run(agent.act(history))
    messages, tools = client.seen[0]
    assert messages[0].role == "system" and messages[0].content == system_prompt()
    n = len(example_messages())
    assert messages[1 : n + 1] == example_messages() and messages[n + 1 :] == history
    assert tools is None  # the prompt lists the tools
