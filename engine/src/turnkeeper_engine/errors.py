"""Rule errors: what the engine answers instead of events when a command is refused."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RuleError:
    """A refused command: a stable machine code, a message for people, the offending field.

    ``code`` never changes once released; clients branch on it. ``field`` names the command field
    that caused the refusal (``""`` when the command as a whole is out of place).
    """

    code: str
    message: str
    field: str = ""


class Rejected(Exception):  # noqa: N818 - it is raised as a control-flow signal, not an error class
    """Raised inside the engine to abandon a command; ``decide`` turns it into a ``RuleError``."""

    def __init__(self, code: str, message: str, field: str = "") -> None:
        super().__init__(message)
        self.error = RuleError(code, message, field)
