"""What the SDK's clients raise: one base class, and the protocol's errors as data.

- :class:`CallError`: the daemon refused a request. ``code`` is the protocol's stable error code
  (``stale_turn``, ``unknown_combat``, ...), ``message`` English for people, ``field`` the
  offending parameter's path (``""`` when the request as a whole was refused). Branch on ``code``.
- :class:`ConnectionLost`: the connection dropped and could not be brought back in time (or the
  client is closed). A command it interrupts may or may not have been applied: send it again
  with the same ``request_id``.
- :class:`CallTimeoutError`: no answer within the client's call timeout, on a connection that is
  still open. Same rule for commands as ``ConnectionLost``.
- :class:`TooFarBehindError`: a subscription's buffer was full when an event arrived; the events
  before the gap have been delivered, and ``seqs`` says where to subscribe again from.
"""

from __future__ import annotations


class TurnkeeperError(Exception):
    """Base class of the errors the async client (and the bots on it) raise for the daemon's
    answers and the connection; the small synchronous client raises ``CallError`` for refusals
    and plain socket and decoding errors otherwise."""


class CallError(TurnkeeperError):
    """An error response: the protocol's stable ``code``, a ``message`` and the ``field``."""

    def __init__(self, code: str, message: str, field: str = "") -> None:
        super().__init__(f"{code}: {message}" + (f" ({field})" if field else ""))
        self.code = code
        self.message = message
        self.field = field


class ConnectionLost(TurnkeeperError):  # noqa: N818 - the name the SDK's users were promised
    """The connection is gone for good: reconnecting failed or timed out, or the client closed.

    ``code`` is the protocol error code that ended it when there was one (the final error
    notification, or the refusal of a repeated ``hello``), else ``""``. ``request_id`` is set
    when a command was interrupted: it may or may not have been applied, and sending it again
    with this ``request_id`` is safe.
    """

    def __init__(self, message: str, code: str = "", request_id: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.request_id = request_id


class CallTimeoutError(TurnkeeperError, TimeoutError):
    """No answer within the call timeout. ``request_id`` as for :class:`ConnectionLost`."""

    def __init__(self, message: str, request_id: str | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


class TooFarBehindError(TurnkeeperError):
    """A subscriber did not keep up: its buffer was full when an event arrived, or it was too far
    behind to resume after a reconnect (``too_far_behind``).

    Raised once the events before the gap have been delivered. ``seqs`` maps each combat to the
    last seq delivered (none for a combat whose events never arrived); read ``get_combat`` (or
    page ``history``) and subscribe again from there.
    """

    def __init__(self, message: str, seqs: dict[str, int]) -> None:
        super().__init__(message)
        self.seqs = seqs
