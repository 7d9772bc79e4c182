"""Rule errors: what the engine answers instead of events when a command is refused.

Every message Turnkeeper gives people is written once, in English, as a template whose pieces
are named arguments (``"no combatant {id!r}"`` with ``id="ock"``). An error keeps the template
and its arguments beside the filled-in English ``message``, so a host can tell it in another
language. The engine, like the SDK, only writes templates; translating is the daemon's work.
A template is always a string literal at the call: the translation catalogue is extracted from
the source.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Self

Arg = str | int | float
"""A value filled into a message template: plain, so an error stays plain data."""

Args = tuple[tuple[str, Arg], ...]
"""A template's arguments as ``(name, value)`` pairs: immutable, so errors can be frozen."""


@dataclass(frozen=True, slots=True)
class RuleError:
    """A refused command: a stable machine code, a message for people, the offending field.

    ``code`` never changes once released; clients branch on it. ``field`` names the command field
    that caused the refusal (``""`` when the command as a whole is out of place). ``message`` is
    ``template`` filled in with ``args``; those two take no part in comparisons, which are about
    what was refused.
    """

    code: str
    message: str
    field: str = ""
    template: str = dataclasses.field(default="", compare=False)
    """The message before its arguments are filled in."""
    args: Args = dataclasses.field(default=(), compare=False)

    def __post_init__(self) -> None:
        if not self.template:
            # A message written out in full is its own template, so the two always agree.
            own = self.message.replace("{", "{{").replace("}", "}}")
            object.__setattr__(self, "template", own)


class TemplatedError(Exception):
    """An exception whose ``message`` is ``template`` filled in with named arguments.

    ``args`` holds the template's arguments as ``(name, value)`` pairs (not, as on other
    exceptions, what the constructor was given); ``str()`` gives the message.
    """

    def __init__(self, template: str, args: Mapping[str, Arg]) -> None:
        self.message = template.format(**args)
        super().__init__(self.message)
        self.template = template
        self.args: Args = tuple(args.items())

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class ProtocolError(TemplatedError):
    """A refusal as a client is told it: a stable ``code``, the ``field`` at fault (``""`` for
    none), and the message's template and arguments, so a host tells it in any language.

    Every refusal a daemon sends is one, whichever layer refused: the pipeline's
    (``RefusedError``), the wire codec's (``WireError``), the store's, the tokens', the
    daemon's own requests'. A session turns any of them into a wire error in one place, the same
    way. ``template`` is a string literal, its pieces passed by name.
    """

    def __init__(self, code: str, template: str, field: str = "", **args: Arg) -> None:
        super().__init__(template, args)
        self.code = code
        self.field = field

    @classmethod
    def relay(cls, error: RuleError | TemplatedError, code: str, field: str = "") -> Self:
        """Another layer's error under ``code`` (and ``field``), with its template and
        arguments, so it is translated like any."""
        return cls(code, error.template, field, **dict(error.args))


class Rejected(TemplatedError):  # noqa: N818 - a control-flow signal, not an error class
    """Raised inside the engine to abandon a command; ``decide`` turns it into a ``RuleError``.

    ``template`` is a string literal, its pieces passed by name: ``Rejected(code, "no group
    {group!r}", "group", group=name)``.
    """

    def __init__(self, code: str, template: str, field: str = "", **args: Arg) -> None:
        super().__init__(template, args)
        self.error = RuleError(code, self.message, field, template, self.args)
