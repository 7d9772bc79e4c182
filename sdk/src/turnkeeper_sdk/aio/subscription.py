"""A subscription: the events of one combat or of every combat, buffered (bounded) and
delivered once each, in seq order per combat, across the client's reconnects."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

import anyio

from ..errors import TooFarBehindError, TurnkeeperError
from .types import Event

if TYPE_CHECKING:
    from . import AsyncClient


class Subscription:
    """The events of one combat (``subscribe``) or of every combat (``subscribe_all``).

    Enter it with ``async with`` to subscribe (``result`` is then the daemon's answer:
    ``{"combat", "seq"}`` or ``{"seqs"}``), iterate it with ``async for`` for event dicts, leave
    the block to unsubscribe. Iteration ends when the subscription is left or unsubscribed; it
    raises :class:`TooFarBehindError` or :class:`ConnectionLost` once the events delivered
    before the failure have been read.
    """

    def __init__(self, client: AsyncClient, combat: str | None, after: int, size: int) -> None:
        self.combat = combat
        """The combat followed, or ``None`` for every combat."""
        self.result: dict[str, Any] = {}
        """The daemon's answer to the subscription request, once entered."""
        self._client = client
        self._after = after
        self._size = size
        self._send, self._receive = anyio.create_memory_object_stream[Event](size)
        # The last seq delivered per combat: events at or below it are not delivered again.
        self._last: dict[str, int] = {} if combat is None else {combat: after}
        self._held: list[Event] | None = None
        self._confirmed = False
        self._entered = False
        self._ended = False
        self._error: TurnkeeperError | None = None

    async def __aenter__(self) -> Self:
        self._entered = True
        await self._client._join(self)
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._client._leave(self)
        self._receive.close()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Event:
        if not self._entered:
            raise RuntimeError("enter the subscription with `async with` before iterating it")
        try:
            # No deadline: a combat may stay quiet for hours; the end of the subscription or of
            # the connection wakes this wait.
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            if self._error is not None:
                raise self._error from None
            raise StopAsyncIteration from None

    # The client's side ---------------------------------------------------------------------

    def _last_seq(self, combat: str) -> int:
        return self._last.get(combat, 0)

    def _push(self, event: Event) -> None:
        """An event notification for this subscription, as it arrives."""
        if self._held is None:
            self._deliver(event)
        elif len(self._held) >= self._size:
            self._fail_behind("more live events than it buffers arrived while catching up")
        else:
            self._held.append(event)

    def _deliver(self, event: Event) -> None:
        if self._ended:
            return
        combat, seq = event.get("combat"), event.get("seq")
        if not isinstance(combat, str) or not isinstance(seq, int):
            return  # not an event this client can place; a newer daemon's business
        if seq <= self._last.get(combat, 0):
            return  # delivered already: a catch-up overlapping what came before
        try:
            self._send.send_nowait(event)
        except anyio.WouldBlock:
            self._fail_behind(f"its buffer of {self._size} unread events was full")
            return
        self._last[combat] = seq

    def _hold(self) -> None:
        """Keep live events aside while a gap before them is filled from history."""
        self._held = []

    def _release(self) -> None:
        held, self._held = self._held or [], None
        for event in held:
            self._deliver(event)

    def _fail_behind(self, why: str) -> None:
        what = self.combat or "every combat"
        self._end(
            TooFarBehindError(f"the subscription to {what} fell behind: {why}", dict(self._last))
        )

    def _end(self, error: TurnkeeperError | None) -> None:
        if not self._ended:
            self._ended = True
            self._error = error
            self._send.close()
