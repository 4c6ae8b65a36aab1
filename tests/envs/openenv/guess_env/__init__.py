"""A small OpenEnv environment in OpenEnv's package layout, for the import tests: guess the seed's hidden digit."""

from .models import GuessAction, GuessObservation

__all__ = ["GuessAction", "GuessObservation"]
