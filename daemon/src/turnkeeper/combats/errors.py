"""The daemon's own member of the one error family (``turnkeeper_engine.errors.ProtocolError``):
``RequestError``."""

from __future__ import annotations

from turnkeeper_engine.errors import ProtocolError


class RequestError(ProtocolError):
    """A request the daemon refuses: ``code``, ``message``, ``field``.

    ``template`` is a string literal (the message catalogue is extracted from the source), its
    pieces passed by name: ``RequestError("unknown_combat", "no combat {id!r}", "combat",
    id=combat_id)``. ``message`` is the English text; ``turnkeeper.i18n`` translates.
    """
