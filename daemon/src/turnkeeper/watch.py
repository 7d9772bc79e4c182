"""``turnkeeper watch COMBAT``: the live initiative order in a terminal.

It reads the combat as its user may see it, subscribes from that point, and redraws whenever
events arrive: round, current turn, the order with numbers, holds, reservations, conditions.
A quiet combat is not an ended one: watch stays up through any silence, and when the daemon
goes away (a restart, an upgrade) it reconnects and carries on; it stops only when the daemon
stays out of reach for ``RECONNECT_FOR`` seconds.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from turnkeeper_engine import BUNDLED_RULES
from turnkeeper_engine.errors import Arg
from turnkeeper_sdk.client import Client

from . import i18n

CLEAR = "\x1b[H\x1b[2J"
"""ANSI: cursor home, clear screen. Used only when printing to a terminal."""
RECONNECT_FOR = 300.0
"""Seconds watch keeps trying to reach a daemon that went away: a restart or an upgrade takes
seconds; a daemon out of reach for minutes has been stopped, and the watcher should be told."""
RETRY_FIRST = 0.1
"""Seconds before the first reconnection attempt; each later wait doubles, up to RETRY_MOST."""
RETRY_MOST = 5.0
"""The longest wait between two attempts: a daemon that is back is seen within seconds."""


class GaveUp(Exception):  # noqa: N818 - what happened, not a fault of the caller
    """The daemon stayed out of reach for the whole reconnection period."""


def render(combat: Mapping[str, Any], locale: str = i18n.DEFAULT, *, ids: bool = False) -> str:
    """The initiative board for a ``get_combat`` result, in ``locale``. With ``ids``, each
    reservation, condition and window shows its id, which the shell's commands name."""

    def tag(item: Mapping[str, Any]) -> str:
        return f" [{item['id']}]" if ids else ""

    def say(template: str, **args: Arg) -> str:
        return i18n.message(locale, template, args)

    view = combat["view"]
    names = {c["id"]: c["name"] for c in view["combatants"]}
    by_id = {c["id"]: c for c in view["combatants"]}
    phase = view["phase"]
    round_no = view["round"]
    # A client knows the rulesets Turnkeeper ships; another shows by its name, in marvel's words.
    rules = BUNDLED_RULES.ruleset(view["ruleset"])
    title = rules.title if rules is not None else view["ruleset"]
    heading = f"{view['combat_id']} ({title}) — {i18n.term(locale, 'phase', phase)}"
    # The bonus round is its own phase, already named: only the rounds after it are numbered.
    if round_no:
        heading += " — " + say("round {n}", n=round_no)
    lines = [heading, ""]
    turn = view["turn"]
    holding = {h["combatant"]: h for h in view["holds"]}
    # D&D 3e delays a turn where Marvel holds one: the board uses the ruleset's word.
    delays = rules is not None and not rules.holds_carry_over
    for cid in view["order"]:
        c = by_id.get(cid)
        if c is None:
            continue
        marker = ">" if turn and turn["combatant"] == cid else " "
        check = c.get("check") or {}
        fantastic = " F" if check.get("fantastic") else ""
        status = "" if c["status"] == "active" else f" [{i18n.term(locale, 'status', c['status'])}]"
        place = c["place"] if c["place"] is not None else "-"
        line = f"{marker} {place:>4}{fantastic:2} {c['name']}{status}"
        hold = holding.get(cid)
        if hold is not None:
            line += "  " + _hold(say, hold, names, delays)
        lines.append(line)
    if view["reservations"]:
        lines.append("")
        lines.append(say("Reserved / readied:"))
        for r in view["reservations"]:
            what = r["action"]["description"] or r["action"]["kind"]
            who = names.get(r["combatant"], r["combatant"])
            when = say("when {trigger}", trigger=r["trigger"]["text"])
            lines.append(f"  {who}: {what} — {when}{tag(r)}")
    if view["conditions"]:
        lines.append("")
        lines.append(say("Conditions:"))
        for k in view["conditions"]:
            left = ", ".join(_clock(say, n, names) for n in k["clocks"])
            # A narrator's own condition reads by its note ("Webbed to the wall"), not its type.
            what = k.get("note") or i18n.term(locale, "condition", k["type"])
            lines.append(
                f"  {names.get(k['target'], k['target'])}: {what}"
                + (f" ({left})" if left else "")
                + tag(k)
            )
    window = view["window"]
    if window is not None:
        lines.append("")
        if window["status"] == "resolving":
            # Closed with claims: what the board owes the table now is who reacts, in order.
            order = ", ".join(names.get(i, i) for i in window["sequence"])
            lines.append(say("Reactions resolve in order: {names}.", names=order) + tag(window))
        else:
            offered = ", ".join(names.get(i, i) for i in window["offered"]) or say("anyone")
            lines.append(
                say("Reaction window open: offered to {names}", names=offered) + tag(window)
            )
    if turn and turn.get("deadline"):
        lines.append("")
        at = time.strftime("%H:%M:%S", time.localtime(turn["deadline"]))
        lines.append(say("Turn ends at {time} (local time)", time=at))
    # The length the next turns get, which set_turn_timer may have changed since this one began.
    limit = dict(view.get("options", ())).get("turn_time_limit")
    if isinstance(limit, int | float) and phase != "ended":
        lines.append(say("Turn timer: {seconds} s a turn", seconds=f"{limit:g}"))
    return "\n".join(lines)


def _hold(
    say: Callable[..., str], hold: Mapping[str, Any], names: Mapping[str, str], delays: bool
) -> str:
    """A holder's plan, in the ruleset's words: held (Marvel) or delayed (D&D 3e)."""
    plan = hold["plan"]
    other = names.get(hold["target"], "?")
    if delays:
        if plan == "before":
            return say("(delayed: before {name})", name=other)
        if plan == "after":
            return say("(delayed: after {name})", name=other)
        if plan == "at":
            return say("(delayed to {number})", number=hold["number"])
        return say("(delayed)")
    if plan == "before":
        return say("(holding: before {name})", name=other)
    if plan == "after":
        return say("(holding: after {name})", name=other)
    if plan == "at":
        return say("(holding at {number})", number=hold["number"])
    return say("(holding)")


def _clock(say: Callable[..., str], clock: Mapping[str, Any], names: Mapping[str, str]) -> str:
    """How long a condition's clock has left, counted in the anchor's turn boundaries."""
    name = names.get(clock["anchor"], "?")
    if clock["boundary"] == "start":
        return say("{n} more start of {name}'s turn", n=clock["remaining"], name=name)
    return say("{n} more end of {name}'s turn", n=clock["remaining"], name=name)


def watch(
    client: Client,
    combat_id: str,
    out: Callable[[str], None],
    *,
    once: bool = False,
    locale: str = i18n.DEFAULT,
    reconnect: Callable[[], Client] | None = None,
    reconnect_for: float = RECONNECT_FOR,
    status: Callable[[str], None] | None = None,
) -> None:
    """Draw the board, then redraw after every batch of events, for as long as the daemon is
    there.

    A silence as long as the client's call timeout is not an end: watch asks the daemon for the
    combat, which finds out a connection that died without a word. When the connection is lost,
    ``reconnect`` (a new connection that has said hello) is tried until it succeeds or
    ``reconnect_for`` seconds have passed, then ``GaveUp`` is raised; without ``reconnect``
    watch returns. ``status`` is told, in ``locale``, when the connection is lost.
    """
    while True:
        try:
            _follow(client, combat_id, out, once=once, locale=locale)
            return
        except (EOFError, OSError):
            client.close()
            if reconnect is None:
                return
            if status is not None:
                status(i18n.message(locale, "Lost the daemon; reconnecting…", {}))
            client = _reconnect(reconnect, reconnect_for, locale)


def _follow(
    client: Client, combat_id: str, out: Callable[[str], None], *, once: bool, locale: str
) -> None:
    """One connection's share of ``watch``: returns only with ``once``, else raises when the
    connection is lost."""
    tty = sys.stdout.isatty()
    current = client.call("get_combat", combat=combat_id)
    out((CLEAR if tty else "") + render(current, locale))
    if once:
        return
    client.call("subscribe", combat=combat_id, after=current["seq"])
    while True:
        try:
            note = client.notification()
        except TimeoutError:
            # Quiet, or gone without a word: a call tells the two apart (it times out if gone).
            seen = client.call("get_combat", combat=combat_id)
            if seen["seq"] != current["seq"]:
                current = seen
                out((CLEAR if tty else "") + render(current, locale))
            continue
        if note.method != "event" or note.params.get("combat") != combat_id:
            continue
        current = client.call("get_combat", combat=combat_id)
        # Events that arrived meanwhile are already in this picture: no redraw for them.
        client.notes = [
            n
            for n in client.notes
            if n.method != "event" or int(n.params.get("seq", 0)) > int(current["seq"])
        ]
        out((CLEAR if tty else "") + render(current, locale))


def _reconnect(connect: Callable[[], Client], reconnect_for: float, locale: str) -> Client:
    """A new connection, tried with growing waits until ``reconnect_for`` seconds have passed.
    A refusal (``CallError``: the token was revoked) is not retried: it would not change."""
    deadline = time.monotonic() + reconnect_for
    wait = RETRY_FIRST
    while True:
        try:
            return connect()
        except (EOFError, OSError) as e:
            if time.monotonic() + wait > deadline:
                raise GaveUp(
                    i18n.message(
                        locale,
                        "the daemon stayed out of reach for {seconds:g} s ({error}); giving up",
                        {"seconds": reconnect_for, "error": str(e) or type(e).__name__},
                    )
                ) from e
            time.sleep(wait)
            wait = min(wait * 2, RETRY_MOST)
