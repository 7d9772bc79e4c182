"""Events as one actor may see them (R16), numbered, told in a locale and packed for the wire:
what a command's caller, a subscriber and a ``history`` page are shown."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from itertools import accumulate

import msgpack  # type: ignore[import-untyped]

from turnkeeper_engine import Actor, RuleBook, State, view, visible
from turnkeeper_engine import events as ev
from turnkeeper_engine.plain import Plain, event_from_plain, event_to_plain
from turnkeeper_sdk import wire

from ..narrate import narrate


def audience(actor: Actor) -> tuple[str, str | None]:
    """Actors who see exactly the same events and views (R16 depends on role and user only)."""
    return ("narrator", None) if actor.role == "narrator" else (actor.role, actor.user)


def telling(state: State, actor: Actor) -> State:
    """The state a line for ``actor`` is told against: it lends names, and whether a turn is
    under way. Both come from what the actor may see now (R16): a hidden combatant's turn is
    none, and a combatant hidden now lends no name, not even to an event of a visible one
    that had its id before an undo (that line shows the id)."""
    if actor.role == "narrator":
        return state
    seen = view(state, actor)
    return dataclasses.replace(state, turn=seen.turn, combatants=seen.combatants)


def numbered(
    events: list[tuple[int, ev.Event]],
    state: State,
    actor: Actor,
    plains: list[dict[str, Plain]] | None = None,
    locale: str | None = None,
    *,
    rules: RuleBook,
) -> list[Plain]:
    """Events as ``actor`` may see them, each with its sequence number, judged by what was
    hidden when each happened, not by ``state``, the latest (R16). ``plains`` are
    the events already encoded, reused wherever the actor sees an event unchanged. With a
    ``locale``, each carries its ``summary``, told from the event as the actor sees it, so a
    line never names what the event left out."""
    told = telling(state, actor) if locale is not None else state
    shown: list[Plain] = []
    for i, (seq, event) in enumerate(events):
        seen = visible(event, state, actor, seq)
        if seen is not None:
            body = plains[i] if plains is not None and seen is event else event_to_plain(seen)
            item: dict[str, Plain] = {"seq": seq, **body}
            if locale is not None:
                item["summary"] = narrate(seen, told, locale, rules=rules)
            shown.append(item)
    return shown


_SEQ = msgpack.packb("seq")
_FIXMAP_HEADS = tuple(bytes((0x80 + n,)) for n in range(16))
"""The head of a msgpack map of n entries, for n up to 15."""


def _in_front(row: bytes, added: int, entries: bytes) -> bytes | None:
    """``row``, a packed map, with ``added`` more ``entries`` (packed keys and values) before
    its own, without unpacking it; None unless its head is a fixmap's (an event's map has a
    handful of entries) with room for them under it."""
    had = row[0] - 0x80
    if 0 <= had <= 15 - added:
        return b"".join((_FIXMAP_HEADS[had + added], entries, row[1:]))
    return None


def numbered_packed(
    events: list[tuple[int, ev.Event]],
    state: State,
    actor: Actor,
    plains: list[dict[str, Plain]],
    rows: Sequence[bytes],
    packer: msgpack.Packer,
) -> tuple[list[Plain], list[bytes]]:
    """``numbered`` without a locale, with each shown event's msgpack encoding: one the actor
    sees as it is was packed already (``rows``, its plain form as stored) and is not packed
    again, its ``seq`` put in front of that map's entries, as ``numbered``'s dict has them.
    ``packer`` packs the rest (a seq, an event the actor sees changed)."""
    pack = packer.pack
    shown: list[Plain] = []
    encoded: list[bytes] = []
    for i, (seq, event) in enumerate(events):
        seen = visible(event, state, actor, seq)
        if seen is None:
            continue
        if seen is event:
            body = plains[i]
            item: dict[str, Plain] = {"seq": seq, **body}
            spliced = None if "seq" in body else _in_front(rows[i], 1, _SEQ + pack(seq))
            encoded.append(pack(item) if spliced is None else spliced)
        else:
            item = {"seq": seq, **event_to_plain(seen)}
            encoded.append(pack(item))
        shown.append(item)
    return shown, encoded


def told(state: State, events: Plain, actor: Actor, locale: str, rules: RuleBook) -> list[Plain]:
    """A command result's ``events`` (as shown to ``actor``) with their narrated lines, told
    against ``state``: results are kept encoded for retries, so these are decoded to be told."""
    assert isinstance(events, list)
    against = telling(state, actor)
    lines: list[Plain] = []
    for item in events:
        assert isinstance(item, dict)
        body = {k: v for k, v in item.items() if k != "seq"}
        summary = narrate(event_from_plain(body), against, locale, rules=rules)
        lines.append({**item, "summary": summary})
    return lines


class Batch:
    """A command's events as one audience is shown them, packed once: every subscriber of the
    audience is handed this very object, so what a subscriber costs does not grow with the
    events' size or number."""

    __slots__ = ("_framed", "messages")

    def __init__(self, messages: list[bytes]) -> None:
        self.messages = messages
        """One packed ``event`` notification per event, in order."""
        self._framed: dict[Callable[[bytes], bytes], tuple[bytes, tuple[int, ...]]] = {}

    def framed(self, frame: Callable[[bytes], bytes]) -> tuple[bytes, tuple[int, ...]]:
        """The messages each framed by ``frame`` (a transport's framing), in one piece, with
        where each ends in it: made once per framing, however many subscribers write it."""
        found = self._framed.get(frame)
        if found is None:
            frames = [frame(message) for message in self.messages]
            found = self._framed[frame] = (b"".join(frames), tuple(accumulate(map(len, frames))))
        return found


_EVENT_HEAD = b"\x93" + msgpack.packb(2) + msgpack.packb("event") + b"\x91"
"""An ``event`` notification up to its params map: ``[2, "event", [params]]``, an array of
three holding an array of one."""
_COMBAT = msgpack.packb("combat")


def packed_rows(
    combat_id: str,
    events: list[tuple[int, ev.Event]],
    state: State,
    actor: Actor,
    plains: list[dict[str, Plain]],
    rows: Sequence[bytes],
    packer: msgpack.Packer,
) -> Batch:
    """``packed(combat_id, numbered(events, state, actor, plains))``, byte for byte, with no
    locale: an event the actor sees as it is was packed already (``rows``, as stored), and its
    notification is made of those bytes, ``combat`` and ``seq`` put in front of the row's
    entries, rather than packed again from a dict made for it. ``packer`` packs the rest."""
    pack = packer.pack
    combat = pack(combat_id)
    notes: list[bytes] = []
    for i, (seq, event) in enumerate(events):
        seen = visible(event, state, actor, seq)
        if seen is None:
            continue
        body = plains[i]
        if seen is event:
            if "seq" not in body and "combat" not in body:
                row = _in_front(rows[i], 2, b"".join((_COMBAT, combat, _SEQ, pack(seq))))
                if row is not None and len(_EVENT_HEAD) + len(row) <= wire.MAX_MESSAGE_BYTES:
                    notes.append(_EVENT_HEAD + row)
                    continue
        else:
            body = event_to_plain(seen)
        # As ``packed`` makes it from ``numbered``'s item (refused there if too large).
        params = {"combat": combat_id, "seq": seq, **body}
        notes.append(wire.pack(wire.Notification("event", params)))
    return Batch(notes)


def packed(combat_id: str, shown: list[Plain]) -> Batch:
    """Shown events as packed ``event`` notifications, one per event."""
    notes = []
    for item in shown:
        assert isinstance(item, dict)
        notes.append(wire.pack(wire.Notification("event", {"combat": combat_id, **item})))
    return Batch(notes)
