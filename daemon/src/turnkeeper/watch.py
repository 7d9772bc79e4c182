"""``turnkeeper watch COMBAT``: the live initiative order in a terminal.

It reads the combat as its user may see it, subscribes from that point, and redraws whenever
events arrive: round, current turn, the order with numbers, holds, reservations, conditions.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from turnkeeper_sdk.client import Client

CLEAR = "\x1b[H\x1b[2J"
"""ANSI: cursor home, clear screen. Used only when printing to a terminal."""


def render(combat: Mapping[str, Any]) -> str:
    """The initiative board for a ``get_combat`` result."""
    view = combat["view"]
    names = {c["id"]: c["name"] for c in view["combatants"]}
    by_id = {c["id"]: c for c in view["combatants"]}
    phase = view["phase"]
    round_no = view["round"]
    heading = f"{view['combat_id']} ({view['ruleset']}) — {phase}"
    if round_no is not None:
        heading += " — bonus round" if round_no == 0 else f" — round {round_no}"
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
        status = "" if c["status"] == "active" else f" [{c['status']}]"
        place = c["place"] if c["place"] is not None else "-"
        line = f"{marker} {place:>4}{fantastic:2} {c['name']}{status}"
        hold = holding.get(cid)
        if hold is not None:
            plan = hold["plan"]
            if plan in ("before", "after"):
                line += f"  (holding: {plan} {names.get(hold['target'], '?')})"
            elif plan == "at":
                line += f"  (holding at {hold['number']})"
            else:
                line += "  (holding)"
        lines.append(line)
    if view["reservations"]:
        lines.append("")
        lines.append("Reserved / readied:")
        for r in view["reservations"]:
            what = r["action"]["description"] or r["action"]["kind"]
            who = names.get(r["combatant"], r["combatant"])
            lines.append(f"  {who}: {what} — when {r['trigger']['text']}")
    if view["conditions"]:
        lines.append("")
        lines.append("Conditions:")
        for k in view["conditions"]:
            left = ", ".join(
                f"{n['remaining']} more {n['boundary']} of {names.get(n['anchor'], '?')}'s turn"
                for n in k["clocks"]
            )
            lines.append(f"  {names.get(k['target'], k['target'])}: {k['type']} ({left})")
    window = view["window"]
    if window is not None:
        lines.append("")
        offered = ", ".join(names.get(i, i) for i in window["offered"]) or "anyone"
        lines.append(f"Reaction window open ({window['status']}): offered to {offered}")
    if turn and turn.get("deadline"):
        lines.append("")
        lines.append(f"Turn ends by {turn['deadline']:.0f} (epoch seconds)")
    return "\n".join(lines)


def watch(
    client: Client, combat_id: str, out: Callable[[str], None], *, once: bool = False
) -> None:
    """Draw the board, then redraw after every batch of events until the connection ends."""
    tty = sys.stdout.isatty()
    current = client.call("get_combat", combat=combat_id)
    out((CLEAR if tty else "") + render(current))
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
        out((CLEAR if tty else "") + render(current))
