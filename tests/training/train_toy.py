"""A toy capability environment and scripted samplers for the training tests.

The task of seed s: the user asks to pick a colour; the tool `pick(color)` records it; success (reward 1) when the
colour is red (DB check against the gold action). A shaped reward variant adds seed noise so it varies even when the
outcome does not.
"""

from __future__ import annotations

from typing import Any

from trace_rl.engine.sampler import SampledTurn
from trace_rl.envs.base import ToolkitEnvironment
from trace_rl.envs.evaluator import is_success
from trace_rl.envs.toolkit import DB, ToolKit, ToolType, tool
from trace_rl.envs.users import ScriptedUser
from trace_rl.types import Action, EpisodeScore, EvaluationCriteria, RewardType, Task

RED = '<tool_call>\n{"name": "pick", "arguments": {"color": "red"}}\n</tool_call>'
BLUE = '<tool_call>\n{"name": "pick", "arguments": {"color": "blue"}}\n</tool_call>'
DONE = "Done, the color is set."


class ColorDB(DB):
    picked: str | None = None


class ColorTools(ToolKit):
    db: ColorDB

    @tool(ToolType.WRITE)
    def pick(self, color: str) -> str:
        """Pick a color.

        Args:
            color: The color.
        """
        self.db.picked = color
        return f"picked {color}"


class ToyEnv:
    """A `TrainEnv` over the colour toolkit."""

    def __init__(self, name: str = "toy", *, hint: str | None = None, noise: float = 0.0) -> None:
        self.name = name
        self.hint = hint
        self.noise = noise

    def make_task(self, seed: int) -> Task:
        return Task(
            id=f"toy-{seed}",
            user_scenario=f"request {seed}",
            evaluation_criteria=EvaluationCriteria(
                actions=[Action(action_id="0", name="pick", arguments={"color": "red"})],
                reward_basis=[RewardType.DB],
            ),
            metadata={"seed": seed},
        )

    def make_env(self, task: Task) -> ToolkitEnvironment:
        return ToolkitEnvironment(toolkit_cls=ColorTools, db=ColorDB(), policy="Pick colors.")

    def system_prompt(self, task: Task, *, hinted: bool = False) -> str:
        return "You pick colors." + (f" Hint: {self.hint}" if hinted and self.hint else "")

    def has_hint(self) -> bool:
        return bool(self.hint)

    def agent_tools(self, env: Any) -> list[dict[str, Any]]:
        return env.tool_schemas()

    def scripted_user(self, task: Task) -> ScriptedUser:
        seed = task.metadata["seed"]
        return ScriptedUser([f"Request {seed}: please pick a color.", "###STOP###"])

    async def score(self, env: Any, task: Task, messages: list, termination: Any) -> EpisodeScore:
        info = await env.score(task, messages, termination)
        noise = self.noise * ((hash((task.id, len(messages))) % 7) / 7.0)
        return EpisodeScore(shaped=info.reward + noise, success=is_success(info.reward))


class ScriptedSampler:
    """Returns scripted texts as token ids (tokenized with the tiny tokenizer, plus the stop token).

    `choose(context_ids, call_index) -> str` picks the text of each sampled turn. Records every context it saw.
    """

    def __init__(self, tokenizer: Any, choose: Any) -> None:
        self.tokenizer = tokenizer
        self.choose = choose
        self.eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.stop_ids = {self.eos}
        self.contexts: list[list[int]] = []
        self.calls = 0

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def sample(self, contexts, *, max_new_tokens, temperature, top_p=1.0):
        out = []
        for ctx in contexts:
            self.contexts.append(list(ctx))
            text = self.choose(ctx, self.calls)
            self.calls += 1
            ids = (text if isinstance(text, list) else self.encode(text)) + [self.eos]
            out.append(
                SampledTurn(
                    completion_ids=ids[:max_new_tokens],
                    logprobs=[0.0] * min(len(ids), max_new_tokens),
                    stopped=len(ids) <= max_new_tokens,
                )
            )
        return out


def alternating(tokenizer: Any) -> Any:
    """First turn of an episode: red, blue, red, blue, ...; later turns: DONE."""
    state = {"n": 0}

    def choose(ctx: list[int], call: int) -> str:
        if "picked" in tokenizer.decode(ctx[-40:]):
            return DONE
        state["n"] += 1
        return RED if state["n"] % 2 else BLUE

    return choose
