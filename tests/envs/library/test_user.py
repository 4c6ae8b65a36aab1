"""The scripted member: opens with the request, answers known facts, confirms only matching changes, stops."""

from __future__ import annotations

import asyncio

from trace_rl.envs.library import LibraryDomain, make_task
from trace_rl.envs.library.scenario import Request, UserScript
from trace_rl.envs.library.user import STOP, LibraryScriptedUser, is_confirmation, matches
from trace_rl.envs.users import LLMUserSimulator, UserSimulator, is_stop, render_scenario
from trace_rl.models.base import ModelResponse
from trace_rl.types import Message

GREETING = Message(role="assistant", content="Hi! How can I help you today?")

SCRIPT = UserScript(
    opening='Hi! I\'d like to renew my loan of "The Quiet River".',
    facts={"first_name": "Ada", "last_name": "Costa", "postcode": "40213"},
    requests=[
        Request(
            kind="renew",
            text='I\'d like to renew "The Quiet River".',
            match=[["the quiet river"]],
            evidence=["2025-04-02"],
        ),
    ],
)


class Talk:
    """Drives a scripted user with agent lines; returns the user's replies."""

    def __init__(self, user: LibraryScriptedUser) -> None:
        self.user = user
        self.history: list[Message] = [GREETING]

    def first(self) -> str:
        return self._reply()

    def agent(self, text: str) -> str:
        self.history.append(Message(role="assistant", content=text))
        return self._reply()

    def _reply(self) -> str:
        reply = asyncio.run(self.user.reply(self.history))
        self.history.append(reply)
        return reply.content or ""


def test_protocol_and_opening():
    user = LibraryScriptedUser(SCRIPT)
    assert isinstance(user, UserSimulator)
    assert Talk(user).first() == SCRIPT.opening


def test_answers_known_facts_and_admits_unknown_ones():
    talk = Talk(LibraryScriptedUser(SCRIPT))
    talk.first()
    assert talk.agent("Could you give me your email address?") == "I don't remember my email."
    reply = talk.agent("Then what is your full name and postcode?")
    assert "Ada Costa" in reply and "40213" in reply
    assert "don't know my member number" in talk.agent("What is your member number?")


def test_yes_only_to_a_matching_confirmation():
    talk = Talk(LibraryScriptedUser(SCRIPT))
    talk.first()
    assert talk.agent('Shall I check out "The Quiet River" for you?').startswith("No")
    assert talk.agent('Shall I renew "The Hidden Atlas"?').startswith("No")
    assert talk.agent('Shall I renew "The Quiet River"?') == "Yes, please go ahead."
    assert talk.agent("Done! It is now due 2025-04-02.").endswith(STOP)


def test_confirmation_detection_and_amount_matching():
    assert is_confirmation("Shall I renew it for you?")
    assert is_confirmation("I will pay 2.00 toward your fines. Please confirm.")
    assert not is_confirmation("I renewed it. Anything else?")
    assert not is_confirmation("Who wrote it?")
    pay = Request(kind="pay_fine", text="pay 2", match=[["#2.0"]])
    assert matches(pay, "Shall I take a payment of $2.00?")
    assert matches(pay, "Should I pay 2 dollars toward your fines?")
    assert not matches(pay, "Shall I take a payment of $2.50?")
    hold = Request(kind="place_hold", text="hold", match=[["the quiet river"]])
    assert not matches(hold, 'Shall I cancel your hold on "The Quiet River"?')


def test_stops_when_done_or_stalled():
    # done: an answer that carries the evidence ends the conversation at once
    ask = UserScript(
        opening="Who wrote X?", requests=[Request(kind="ask", text="Who wrote X?", evidence=["Lena Park"])]
    )
    talk = Talk(LibraryScriptedUser(ask))
    talk.first()
    assert talk.agent("Let me check.") == "Who wrote X?"  # not done: the request is restated
    assert is_stop(talk.agent("X was written by Lena Park."))
    # stalled: statements that never get there, at most two reminders
    talk = Talk(LibraryScriptedUser(ask))
    talk.first()
    replies = [talk.agent(f"I am a helpful assistant ({i}).") for i in range(3)]
    assert replies[:2] == ["Who wrote X?", "Who wrote X?"] and replies[2] == STOP
    # stalled: the agent repeats itself
    talk = Talk(LibraryScriptedUser(ask))
    talk.first()
    talk.agent("Can you spell that?")
    assert talk.agent("Can you spell that?") == STOP
    # stalled: too many replies
    script = ask.model_copy(update={"max_replies": 3})
    talk = Talk(LibraryScriptedUser(script))
    talk.first()
    assert [is_stop(talk.agent(f"Question {i}?")) for i in range(4)] == [False, False, False, True]


def test_change_without_evidence_is_done_after_confirm_and_a_statement():
    task = next(
        t
        for t in (make_task("authenticated_write", s) for s in range(300))
        if t.metadata["variant"] == "cancel_hold/email"
    )
    title = task.metadata["user_script"]["requests"][0]["match"][0][0]
    talk = Talk(LibraryScriptedUser.for_task(task))
    assert "cancel my hold" in talk.first()
    assert not is_stop(talk.agent("I found your account."))
    assert talk.agent(f"Shall I cancel your hold on {title}?") == "Yes, please go ahead."
    assert is_stop(talk.agent("Your hold is cancelled."))


def test_multi_step_reminds_of_the_forgotten_request():
    task = next(t for t in (make_task("multi_step", s) for s in range(100)) if "renew" in t.metadata["variant"])
    script = UserScript.model_validate(task.metadata["user_script"])
    renew_index = next(i for i, r in enumerate(script.requests) if r.kind == "renew")
    other = next(r for i, r in enumerate(script.requests) if i != renew_index)
    talk = Talk(LibraryScriptedUser(script))
    talk.first()
    evidence = script.requests[renew_index].evidence[0]
    assert talk.agent(f"Renewed: it is now due {evidence}.") == other.text  # reminded of the next request


class EchoClient:
    name = "echo"

    def __init__(self) -> None:
        self.seen: list[list[Message]] = []

    async def chat(self, messages, tools=None, *, adapter=None, sampling=None) -> ModelResponse:
        self.seen.append(messages)
        return ModelResponse(message=Message(role="assistant", content="###STOP###"))

    async def aclose(self) -> None:
        return None


def test_llm_user_simulator_works_with_library_guidelines(domain: LibraryDomain):
    task = domain.tasks("test")[0]
    client = EchoClient()
    user = LLMUserSimulator(client, task, domain.guidelines())
    reply = asyncio.run(user.reply([GREETING]))
    assert is_stop(reply.content)
    system = client.seen[0][0].content
    assert "###STOP###" in system and "library" in system.lower()
    assert render_scenario(task.user_scenario) in system
    assert task.user_scenario["instructions"]["known_info"] or task.metadata["family"] == "lookup_answer"
