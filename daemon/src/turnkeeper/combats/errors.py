"""The protocol's refusal as the combats raise it: ``RequestError``."""

from __future__ import annotations

from turnkeeper_engine import RuleError
from turnkeeper_engine.errors import Arg, TemplatedError


class RequestError(TemplatedError):
    """A refused request, as the protocol reports it: ``code``, ``message``, ``field``.

    ``template`` is a string literal (the message catalogue is extracted from the source), its
    pieces passed by name: ``RequestError("unknown_combat", "no combat {id!r}", "combat",
    id=combat_id)``. ``message`` is the English text; ``turnkeeper.i18n`` translates.
    """

    def __init__(self, code: str, template: str, field: str = "", **args: Arg) -> None:
        super().__init__(template, args)
        self.code = code
        self.field = field

    @classmethod
    def relay(cls, error: RuleError | TemplatedError, code: str, field: str = "") -> RequestError:
        """Another layer's error (the engine's, the store's, a decoding error) as a request's,
        with its template and arguments, so it is translated like any."""
        return cls(code, error.template, field, **dict(error.args))
