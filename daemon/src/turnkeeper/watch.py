"""``turnkeeper watch COMBAT``: the live initiative order in a terminal.

It reads the combat as its user may see it, subscribes from that point, and redraws whenever
events arrive: round, current turn, the order with numbers, holds, reservations, conditions.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from turnkeeper_engine.errors import Arg
from turnkeeper_sdk.client import Client

from . import i18n

CLEAR = "\x1b[H\x1b[2J"
"""ANSI: cursor home, clear screen. Used only when printing to a terminal."""


def render(combat: Mapping[str, Any], locale: str = i18n.DEFAULT) -> str:
    """The initiative board for a ``get_combat`` result, in ``locale``."""

    def say(template: str, **args: Arg) -> str:
        return i18n.message(locale, template, args)

    view = combat["view"]
    names = {c["id"]: c["name"] for c in view["combatants"]}
    by_id = {c["id"]: c for c in view["combatants"]}
    phase = view["phase"]
    round_no = view["round"]
    heading = f"{view['combat_id']} ({view['ruleset']}) — {i18n.term(locale, 'phase', phase)}"
    if round_no is not None:
        heading += " — " + (say("bonus round") if round_no == 0 else say("round {n}", n=round_no))
    lines = [heading, ""]
    turn = view["turn"]
    holding = {h["combatant"]: h for h in view["holds"]}
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
            plan = hold["plan"]
            other = names.get(hold["target"], "?")
            if plan == "before":
                line += "  " + say("(holding: before {name})", name=other)
            elif plan == "after":
                line += "  " + say("(holding: after {name})", name=other)
            elif plan == "at":
                line += "  " + say("(holding at {number})", number=hold["number"])
            else:
                line += "  " + say("(holding)")
        lines.append(line)
    if view["reservations"]:
        lines.append("")
        lines.append(say("Reserved / readied:"))
        for r in view["reservations"]:
            what = r["action"]["description"] or r["action"]["kind"]
            who = names.get(r["combatant"], r["combatant"])
            when = say("when {trigger}", trigger=r["trigger"]["text"])
            lines.append(f"  {who}: {what} — {when}")
    if view["conditions"]:
        lines.append("")
        lines.append(say("Conditions:"))
        for k in view["conditions"]:
            left = ", ".join(_clock(say, n, names) for n in k["clocks"])
            lines.append(f"  {names.get(k['target'], k['target'])}: {k['type']} ({left})")
    window = view["window"]
    if window is not None:
        lines.append("")
        offered = ", ".join(names.get(i, i) for i in window["offered"]) or say("anyone")
        lines.append(say("Reaction window open: offered to {names}", names=offered))
    if turn and turn.get("deadline"):
        lines.append("")
        lines.append(say("Turn ends by {at:.0f} (epoch seconds)", at=turn["deadline"]))
    return "\n".join(lines)


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
) -> None:
    """Draw the board, then redraw after every batch of events until the connection ends."""
    tty = sys.stdout.isatty()
    current = client.call("get_combat", combat=combat_id)
    out((CLEAR if tty else "") + render(current, locale))
    if once:
        return
    client.call("subscribe", combat=combat_id, after=current["seq"])
    while True:
        try:
            note = client.notification()
        except (EOFError, OSError):
            return
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
