"""Server components of the guess environment."""

from .guess_environment import GuessEnvironment

__all__ = ["GuessEnvironment"]
