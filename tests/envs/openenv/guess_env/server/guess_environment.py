"""The guess environment: the hidden digit is (7 * seed + 3) mod 10; a right guess pays 1 - 0.25 * wrong guesses
so far (at least 0) and ends the episode; a wrong one pays 0 and says higher or lower."""

from uuid import uuid4

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import State

try:
    from ..models import GuessAction, GuessObservation
except ImportError:
    from models import GuessAction, GuessObservation


def hidden_digit(seed: int) -> int:
    return (7 * seed + 3) % 10


class GuessEnvironment(Environment[GuessAction, GuessObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self.target = 0
        self.wrong = 0

    def reset(self, seed=None, episode_id=None, **kwargs) -> GuessObservation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        self.target, self.wrong = hidden_digit(seed or 0), 0
        return GuessObservation(message="I am thinking of a digit from 0 to 9. Guess it.", reward=0.0)

    def step(self, action: GuessAction, timeout_s=None, **kwargs) -> GuessObservation:
        self._state.step_count += 1
        if action.guess == self.target:
            return GuessObservation(message="Right!", done=True, reward=max(0.0, 1.0 - 0.25 * self.wrong))
        self.wrong += 1
        hint = "higher" if action.guess < self.target else "lower"
        return GuessObservation(message=f"Wrong: the digit is {hint}.", reward=0.0)

    @property
    def state(self) -> State:
        return self._state
