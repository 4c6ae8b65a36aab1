"""What environments imported from other frameworks (OpenEnv, verifiers) share: the user that ends the episode on the
agent's text (their counterpart is the environment itself), and their reward in units of a success threshold."""

from __future__ import annotations

from typing import Any

from trace_rl.envs.users import STOP_TOKENS
from trace_rl.types import SCORED_TERMINATIONS, Message, RewardInfo, TerminationReason


class FinalAnswerUser:
    """A user with nothing to say but goodbye: the agent's text is its final answer, so the user ends the episode
    (environments imported from other frameworks, whose counterpart is the environment itself)."""

    def __init__(self, name: str = "final-answer") -> None:
        self.name = name

    async def reply(self, history: list[Message]) -> Message:
        return Message(role="user", content=STOP_TOKENS[0])


def threshold_reward(
    raw: float, threshold: float, termination: TerminationReason, details: dict[str, Any]
) -> RewardInfo:
    """`min(raw / threshold, 1)`, success when `raw >= threshold`; an episode cut off by a limit scores 0 (as every
    trace-rl episode does). `details` (the framework's own figures) are kept beside the threshold and termination."""
    scored = termination in SCORED_TERMINATIONS
    success = scored and raw >= threshold
    gate = {} if scored else {"gate": f"{termination}: an episode cut off by a limit scores 0"}
    return RewardInfo(
        reward=min(raw / threshold, 1.0) if scored else 0.0,
        breakdown={"success": float(success)},
        details={**details, "success_threshold": threshold, "termination": str(termination), **gate},
    )


__all__ = ["FinalAnswerUser", "threshold_reward"]
