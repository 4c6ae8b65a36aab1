"""Action and observation of the guess environment."""

from openenv.core.env_server.types import Action, Observation
from pydantic import Field


class GuessAction(Action):
    """Guess the hidden digit."""

    guess: int = Field(..., ge=0, le=9, description="A digit, 0 to 9.")


class GuessObservation(Observation):
    """What the environment says back."""

    message: str = Field("", description="The environment's reply.")
