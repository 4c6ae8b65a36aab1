"""Error types shared by every stage.

`UserError` is bad input (config, model name, data directory, stage name): the CLI prints its one-line message
and exits non-zero without a traceback. `InfraError` is an infrastructure failure that survived retries (server down,
timeout): it is recorded on the trajectory, never counted as an agent failure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class UserError(Exception):
    """Bad input from the user; the message names the field or value that is wrong."""


class InfraError(Exception):
    """A model server or other infrastructure failed after all retries."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


def first_problem(exc: ValidationError) -> str:
    """The first problem of a pydantic validation error on one line: `field.path: message`."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "(top level)"
    return f"{where}: {err.get('msg', 'invalid')}"
