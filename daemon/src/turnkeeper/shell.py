"""``turnkeeper create``, ``add``, ``roll``, ``next``, ``show``…: the protocol from the shell.

A verb per engine command, in the words tables know from chat bots' initiative trackers, and a
few reads (``show``, ``list``, ``log``). Each run is one connection to a running daemon (its
Unix socket by default, or ``--connect``), one ``hello``, one command, one answer. A verb's
arguments come from the method table (:mod:`turnkeeper_sdk.methods`): its params become
positionals or flags by their types, so a field added to a command is a flag here with no
change; only the records (an action, a trigger, a trigger's facts) are spelled out as flags.
What a shell user cannot know offhand is filled in from the combat as it stands, unless a flag
gives it: the current turn (``--turn``), the open reaction window (``--window``), a claimant's
reservation (``--reservation``); and a fresh request id for each command unless
``--request-id`` gives one. When the answer is lost, the shell prints the command line to send
again, with those values written out, so that the daemon sees the same command and applies it
once.

Output is what the daemon says: each event's ``summary`` in the chosen language, or with
``--json`` the answer as JSON. A refusal prints its code, message and field and exits with
``EXIT_REFUSED``; a daemon that cannot be reached exits with ``cli.EXIT_UNREACHABLE``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import textwrap
import types
import typing
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from turnkeeper_engine import BUNDLED_RULES
from turnkeeper_engine.errors import Arg
from turnkeeper_sdk.client import CallError, Client
from turnkeeper_sdk.methods import METHODS, Param

from . import i18n
from .cli import (
    CONNECT,
    DEBUG,
    EXIT_UNREACHABLE,
    LOCALE,
    SOCKET,
    TOKEN,
    Commands,
    Setting,
    _locale,
    _why,
    cannot_connect,
    connect,
)

EXIT_REFUSED = 1
"""The daemon (or the command line's own check of the combat) refused the command."""
HISTORY_PAGE = 1000
"""Events ``log`` asks for at a time: the most a ``history`` page may hold."""


AS_USER = Setting(
    ("--as-user",),
    "a bridge's token: the user to act for (the command's as)",
    kwargs={"metavar": "USER"},
)
REQUEST_ID = Setting(
    ("--request-id",),
    "the command's request id (default: a fresh one); the daemon applies an id once, so a "
    "script that retries after a lost answer gives the same one",
    kwargs={"metavar": "ID"},
)
JSON = Setting(("--json",), "print the daemon's answer as JSON", switch=True, default=lambda: False)
QUERY_SETTINGS = (DEBUG, SOCKET, CONNECT, TOKEN, JSON, LOCALE)
COMMAND_SETTINGS = (*QUERY_SETTINGS, AS_USER, REQUEST_ID)


# Fields made from the combat or from several flags ------------------------------------------

Fill = Callable[[argparse.Namespace, "Combat"], Any]
"""A field's value from the parsed arguments and the combat as it stands."""


class Combat:
    """The combat a command is about, read from the daemon only if a field needs it."""

    def __init__(self, client: Client, combat: str | None, locale: str) -> None:
        self.client = client
        self.combat = combat
        self.locale = locale
        self._view: Mapping[str, Any] | None = None

    @property
    def view(self) -> Mapping[str, Any]:
        if self._view is None:
            self._view = self.client.call("get_combat", combat=self.combat)["view"]
        return self._view

    def turn(self) -> dict[str, Any]:
        """The current turn as a ``TurnRef``, with its number: a command meant for this turn
        is refused as ``stale_turn`` if another begins between this read and the command."""
        turn = self.view["turn"]
        if turn is None:
            raise CallError(
                "no_turn", i18n.message(self.locale, "No turn is in progress.", ()), "turn"
            )
        return {"round": turn["round"], "combatant": turn["combatant"], "number": turn["number"]}

    def window(self) -> str:
        window = self.view["window"]
        if window is None:
            raise CallError(
                "no_window",
                i18n.message(self.locale, "No reaction window is open.", ()),
                "window",
            )
        return str(window["id"])

    def reservation(self, combatant: str) -> str | None:
        """The combatant's first reservation (or readied action), if it has one."""
        mine = (r["id"] for r in self.view["reservations"] if r["combatant"] == combatant)
        return next(mine, None)


def _action(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "kind": args.kind,
        "type": args.type,
        "description": args.description,
        "targets": args.target,
        "tags": args.tag,
        "zone": args.zone,
    }


def _action_flags(parser: argparse.ArgumentParser, *, kind: bool = True) -> None:
    """An ``ActionSpec``: its kind (a positional, or ``--action`` where it is optional) and the
    rest as flags."""
    if kind:
        parser.add_argument("kind", metavar="KIND", help="the action's kind: attack, move, cast…")
    else:
        parser.add_argument(
            "--action", dest="kind", metavar="KIND", help="the action stated with the claim"
        )
    parser.add_argument("--type", help="its action type (needed for a kind the rules lack)")
    parser.add_argument("--description", "-d", default="", help="free text")
    _list_flag(parser, "--target", "a combatant it targets")
    _list_flag(parser, "--tag", "a tag predicates match")
    parser.add_argument("--zone", help="where it happens")


def _trigger_flags(parser: argparse.ArgumentParser) -> None:
    """A ``Trigger``: its words, and a predicate the engine can match, flag by flag."""
    parser.add_argument("trigger", metavar="TRIGGER", help="the trigger as people say it")
    _list_flag(
        parser, "--on", "a trigger event that fires it: action_declared, move, turn_started…"
    )
    _list_flag(parser, "--on-actor", "a combatant whose moments fire it")
    _list_flag(parser, "--on-kind", "an action kind that fires it")
    _list_flag(parser, "--on-target", "fires when the moment targets this combatant")
    _list_flag(parser, "--on-tag", "fires when the moment has this tag")
    _list_flag(parser, "--on-zone", "fires in this zone")


def _trigger(args: argparse.Namespace) -> dict[str, Any]:
    predicate = {
        "events": args.on,
        "actors": args.on_actor,
        "kinds": args.on_kind,
        "targets": args.on_target,
        "tags": args.on_tag,
        "zones": args.on_zone,
    }
    # Without a predicate only the narrator can offer the trigger a window: say none, not an
    # empty one that would match every moment.
    return {"text": args.trigger, "predicate": predicate if any(predicate.values()) else None}


def _facts_flags(parser: argparse.ArgumentParser) -> None:
    """A ``TriggerFacts``: the moment's event, and the rest as flags."""
    parser.add_argument(
        "event", metavar="EVENT", help="the kind of moment: action_declared, move, or your own word"
    )
    parser.add_argument("--actor", help="the combatant whose moment it is")
    parser.add_argument("--kind", help="the action kind, if any")
    _list_flag(parser, "--target", "a combatant the moment targets")
    _list_flag(parser, "--tag", "a tag of the moment")
    parser.add_argument("--zone", help="where it happens")
    parser.add_argument("--text", default="", help="a description")


def _facts(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "event": args.event,
        "actor": args.actor,
        "kind": args.kind,
        "targets": args.target,
        "tags": args.tag,
        "zone": args.zone,
        "text": args.text,
    }


def _list_flag(parser: argparse.ArgumentParser, flag: str, help: str) -> None:
    parser.add_argument(flag, action="append", default=[], help=help + " (repeatable)")


@dataclass(frozen=True, slots=True)
class Record:
    """A field built from several arguments (a record), or from the combat."""

    add: Callable[[argparse.ArgumentParser], object]
    """Adds the arguments it is made of."""
    value: Fill
    spell: Callable[[Any], str] | None = None
    """For a field the combat may fill in: its value as the field's own flag (``--turn``,
    ``--window``…) takes it, so that the retry of a command whose answer was lost names what
    was sent rather than what the combat holds by then."""


def _options(args: argparse.Namespace) -> list[list[Any]]:
    """Rule options as ``[name, value]`` pairs: an option whose values are a list of words
    (``ready``: ``3.0`` or ``3.5``) takes its value as written, any other as ``--value`` reads
    it; a ruleset the command line does not ship (a plugin's) is read the same way."""
    rules = BUNDLED_RULES.ruleset(args.ruleset)
    known = rules.all_options() if rules is not None else {}
    pairs = []
    for name, raw in args.option:
        spec = known.get(name, (None, object))[1]
        pairs.append([name, raw if isinstance(spec, tuple) else _value(raw)])
    return pairs


def _turn_ref(value: str) -> dict[str, Any]:
    """``ROUND:COMBATANT:NUMBER`` as a ``TurnRef``; a combatant's id may hold colons, the
    round and the number cannot."""
    round_, _, rest = value.partition(":")
    combatant, _, number = rest.rpartition(":")
    if not (round_.isdigit() and number.isdigit() and combatant):
        raise argparse.ArgumentTypeError("expected ROUND:COMBATANT:NUMBER, e.g. 1:spidey:3")
    return {"round": int(round_), "combatant": combatant, "number": int(number)}


TURN = Record(
    lambda p: p.add_argument(
        "--turn",
        type=_turn_ref,
        metavar="ROUND:COMBATANT:NUMBER",
        help="the turn (default: the current one); the turn's number is show --json's turn.number",
    ),
    lambda args, combat: args.turn or combat.turn(),
    lambda turn: f"{turn['round']}:{turn['combatant']}:{turn['number']}",
)
WINDOW = Record(
    lambda p: p.add_argument("--window", metavar="ID", help="the window (default: the open one)"),
    lambda args, combat: args.window or combat.window(),
    str,
)
ACTION = Record(_action_flags, lambda args, _: _action(args))
CLAIMED_ACTION = Record(
    lambda p: _action_flags(p, kind=False),
    lambda args, _: _action(args) if args.kind else None,
)
RESERVATION = Record(
    lambda p: p.add_argument(
        "--reservation",
        metavar="ID",
        help="the reservation to claim with (default: the claimant's own, unless --action)",
    ),
    lambda args, combat: (
        args.reservation or (None if args.kind else combat.reservation(args.combatant))
    ),
    str,
)
OPTIONS = Record(
    lambda p: p.add_argument(
        "--option",
        type=_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a rule option, e.g. turn_time_limit=60 or ready=3.5 (repeatable)",
    ),
    lambda args, _: _options(args),
)
OFF = ("off", "none")
"""How a command line turns the turn timer off: ``timer COMBAT off`` sends ``seconds`` nil."""


def _seconds(value: str) -> int | None:
    """``SECONDS`` as whole seconds, or None for ``off``; the daemon checks the range."""
    if value.lower() in OFF:
        return None
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("expected whole seconds, or off") from None


SECONDS = Record(
    lambda p: p.add_argument(
        "seconds",
        type=_seconds,
        metavar="SECONDS",
        help="whole seconds a turn may last from the next turn on, 1 to 86400; off: no timer "
        "(the running turn's stops too)",
    ),
    lambda args, _: args.seconds,
)
TRIGGER = Record(_trigger_flags, lambda args, _: _trigger(args))
FACTS = Record(_facts_flags, lambda args, _: _facts(args))


# The verbs ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verb:
    """A ``turnkeeper`` subcommand that sends one engine command."""

    name: str
    method: str
    help: str
    positional: tuple[str, ...] = ()
    """Params given in this order after the combat; the others are flags."""
    aliases: tuple[str, ...] = ()
    flags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """A param's own flags, where its name makes a poor one (``init_mod``: ``--mod``)."""
    defaults: Mapping[str, Any] = field(default_factory=dict)
    """Values of required params a user may leave out (``None``: made from the others)."""
    records: Mapping[str, Record] = field(default_factory=dict)


VERBS = (
    Verb(
        "create",
        "create_combat",
        "open a combat under a ruleset (marvel, dnd3e)",
        ("combat_id", "ruleset"),
        aliases=("begin",),
        records={"options": OPTIONS},
    ),
    Verb(
        "add",
        "add_combatant",
        "add a combatant (NAME defaults to its ID)",
        ("id", "display_name"),
        defaults={"display_name": None},
        flags={
            "init_mod": ("--mod", "--init-mod"),
            "dexterity": ("--dex", "--dexterity"),
            "player_character": ("--pc", "--player-character"),
        },
    ),
    Verb("remove", "remove_combatant", "take a combatant out for good", ("combatant",)),
    Verb("defeat", "defeat_combatant", "mark a combatant defeated", ("combatant",)),
    Verb("revive", "revive_combatant", "bring a defeated combatant back", ("combatant",)),
    Verb("reveal", "reveal_combatant", "show a hidden combatant to the players", ("combatant",)),
    Verb("surprised", "mark_surprised", "marvel: mark a combatant surprised", ("combatant",)),
    Verb(
        "roll",
        "roll_initiative",
        "roll a combatant's initiative, or enter the dice rolled at the table (--faces)",
        ("combatant",),
        flags={"edges": ("--edge", "--edges"), "troubles": ("--trouble", "--troubles")},
    ),
    Verb("ties", "order_ties", "order tied combatants, first to last", ("combatants",)),
    Verb(
        "reorder",
        "reorder_group",
        "set the order a group's members act in",
        ("group", "combatants"),
    ),
    Verb("start", "start_combat", "roll what is unrolled, fix the order and begin"),
    Verb(
        "next",
        "end_turn",
        "end the current turn",
        aliases=("end-turn",),
        records={"turn": TURN},
    ),
    Verb(
        "act",
        "declare_action",
        "take an action in the current turn",
        records={"turn": TURN, "action": ACTION},
    ),
    Verb(
        "hold",
        "hold",
        "hold (marvel) or delay (dnd3e) the current turn",
        flags={"number": ("--at", "--number")},
        records={"turn": TURN},
    ),
    Verb(
        "take",
        "take_held_turn",
        "take a held turn just before or after another combatant",
        ("combatant", "when", "other"),
    ),
    Verb(
        "reserve",
        "reserve",
        "reserve (marvel) or ready (dnd3e) an action with a trigger",
        aliases=("ready",),
        defaults={"reserved_type": "standard"},
        records={"turn": TURN, "action": ACTION, "trigger": TRIGGER},
    ),
    Verb("refocus", "refocus", "dnd3e: refocus for the round", records={"turn": TURN}),
    Verb(
        "trigger",
        "announce_trigger",
        "name a moment and open a reaction window for it",
        records={"facts": FACTS},
    ),
    Verb(
        "claim",
        "claim_reaction",
        "claim a reaction in the open window",
        ("combatant",),
        records={"window": WINDOW, "action": CLAIMED_ACTION, "reservation": RESERVATION},
    ),
    Verb(
        "pass",
        "pass_reaction",
        "let the open window's moment pass",
        ("combatant",),
        records={"window": WINDOW},
    ),
    Verb("close", "close_window", "close the open reaction window now", records={"window": WINDOW}),
    Verb(
        "done",
        "finish_reaction",
        "the reacting combatant is done",
        ("combatant",),
        aliases=("finish",),
        records={"window": WINDOW},
    ),
    Verb(
        "condition",
        "apply_condition",
        "apply a condition (a custom one, told by its note) for some rounds",
        ("target", "note"),
        aliases=("effect",),
        defaults={"type": "custom"},
    ),
    Verb("uncondition", "remove_condition", "remove a condition by its id", ("condition",)),
    Verb(
        "surprise", "surprise", "marvel: TARGET is surprised mid-combat by others", ("target", "by")
    ),
    Verb(
        "outcome",
        "record_outcome",
        "record an outcome computed elsewhere",
        ("kind", "text"),
        flags={"values": ("--value",), "args": ("--arg",)},
    ),
    Verb("disable-plugin", "disable_plugin", "stop a plugin's hooks for this combat", ("plugin",)),
    Verb("enable-plugin", "enable_plugin", "call a disabled plugin's hooks again", ("plugin",)),
    Verb(
        "timer",
        "set_turn_timer",
        "set the turn timer for the turns that start from now on, or turn it off",
        records={"seconds": SECONDS},
    ),
    Verb("tick", "tick", "let time pass: due timers and deadlines fire"),
    Verb("undo", "undo", "undo the last command"),
    Verb("end", "end_combat", "end the combat"),
)
"""Every engine command has one (a test holds it so)."""
QUERIES = {
    "show": "the combat's initiative order, as your role may see it",
    "list": "every combat you may see",
    "log": "the combat's events so far, told as sentences",
}
TAKES: Mapping[str, tuple[Setting, ...]] = {
    **{verb.name: COMMAND_SETTINGS for verb in VERBS},
    **dict.fromkeys(QUERIES, QUERY_SETTINGS),
}
"""Each subcommand's options, as ``cli.TAKES`` holds the other commands'."""
_BY_NAME = {name: verb for verb in VERBS for name in (verb.name, *verb.aliases)}


# Arguments from the method table -------------------------------------------------------------


def _comma(item: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    def parse(value: str) -> list[Any]:
        try:
            return [item(v.strip()) for v in value.split(",")]
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from e

    return parse


def _pair(value: str) -> tuple[str, str]:
    """``NAME=VALUE``, the value as written."""
    name, sep, raw = value.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError("expected NAME=VALUE")
    return name, raw


def _value(raw: str) -> Any:
    """A plain value as written: a number, ``true``, ``false`` or ``null`` where it reads as
    one (JSON's spelling), else the text itself."""
    try:
        parsed = json.loads(raw)
    except ValueError:
        return raw
    return raw if isinstance(parsed, list | dict) else parsed


def _values(raw: str) -> list[Any]:
    """``NAME=VALUE`` as a ``[name, value]`` pair, the value read by ``_value``."""
    name, value = _pair(raw)
    return [name, _value(value)]


def _bare(hint: Any) -> Any:
    """A type without its ``| None``: leaving a field out is how a command line says nil."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


def _argument(param: Param) -> dict[str, Any]:
    """``add_argument`` keywords for a param, by its type."""
    hint = _bare(param.type)
    origin = typing.get_origin(hint)
    if hint is bool:
        return {"action": "store_true"}
    if hint in (int, float):
        return {"type": hint, "metavar": "N"}
    if hint is str:
        return {"type": str}
    if origin is Literal:
        return {"choices": typing.get_args(hint)}
    if origin is tuple:
        item = typing.get_args(hint)[0]
        if item in (str, int):
            return {"type": _comma(item), "metavar": "A,B…" if item is str else "N,N…"}
        if typing.get_origin(item) is tuple:
            return {"type": _values, "action": "append", "metavar": "NAME=VALUE"}
    raise TypeError(f"no argument for {param.name}: {param.type}")


def _positional(param: Param, verb: Verb) -> dict[str, Any]:
    """``add_argument`` keywords for a positional: a list takes the rest of the line
    (``ties c1 a b c``); one with a default may be left out."""
    is_list = typing.get_origin(_bare(param.type)) is tuple
    kwargs = {"nargs": "+"} if is_list else _argument(param)
    if "choices" not in kwargs:  # a choice's metavar lists its choices
        kwargs["metavar"] = param.name.upper()
    if param.name in verb.defaults:
        kwargs |= {"nargs": "?", "default": verb.defaults[param.name]}
    return kwargs


def _add_verb(verb: Verb, parser: argparse.ArgumentParser) -> None:
    method = METHODS[verb.method]
    parser.set_defaults(verb=verb.name)
    if verb.method != "create_combat":
        parser.add_argument("combat", metavar="COMBAT", help="the combat's id")
    params = {p.name: p for p in method.params}
    for name in verb.positional:
        parser.add_argument(name, **_positional(params[name], verb))
    for param in method.params:
        if param.name in verb.positional:
            continue
        record = verb.records.get(param.name)
        if record is not None:
            record.add(parser)
            continue
        flags = verb.flags.get(param.name, ("--" + param.name.replace("_", "-"),))
        kwargs = _argument(param)
        if param.name in verb.defaults:
            kwargs["default"] = verb.defaults[param.name]
        else:
            kwargs |= {"required": param.required, "default": argparse.SUPPRESS}
        parser.add_argument(*flags, dest=param.name, **kwargs)
    for setting in COMMAND_SETTINGS:
        setting.add(parser)


def _add_query(name: str, parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(verb=name)
    if name != "list":
        parser.add_argument("combat", metavar="COMBAT", help="the combat's id")
    for setting in QUERY_SETTINGS:
        setting.add(parser)


def add_commands(sub: Commands) -> None:
    """Add every verb and query to ``turnkeeper``'s subcommands, their arguments made only for
    the one that is given (``cli.Commands``)."""
    for verb in VERBS:
        sub.add_command(
            verb.name, partial(_add_verb, verb), aliases=list(verb.aliases), help=verb.help
        )
    for name, text in QUERIES.items():
        sub.add_command(name, partial(_add_query, name), help=text)


def command_name(name: str) -> str:
    """A subcommand's own name for one of its aliases (``ready`` is ``reserve``)."""
    verb = _BY_NAME.get(name)
    return verb.name if verb is not None else name


# Running ---------------------------------------------------------------------------------------


def _params(
    verb: Verb, args: argparse.Namespace, combat: Combat, request_id: str
) -> tuple[dict[str, Any], list[str]]:
    """The command's params (its fields from the arguments and the combat, its envelope), and
    the flags that name what was filled in from the combat, for a retry."""
    params: dict[str, Any] = {}
    filled: list[str] = []
    for param in METHODS[verb.method].params:
        record = verb.records.get(param.name)
        if record is not None:
            value = record.value(args, combat)
            if record.spell is not None and value is not None and not getattr(args, param.name):
                filled += ["--" + param.name, record.spell(value)]
        elif param.name == "display_name":
            value = args.display_name or args.id  # called by its id unless given a name
        else:
            value = getattr(args, param.name, None)
        # Left out, a field takes the daemon's default: the command line never restates it.
        # A required field has no default: its nil is said (``timer COMBAT off``).
        if param.required or (value is not None and value is not False):
            params[param.name] = value
    if verb.method != "create_combat":
        params["combat"] = args.combat
    if args.as_user is not None:
        params["as"] = args.as_user
    params["request_id"] = request_id
    return params, filled


def _retry(argv: Sequence[str], flags: Sequence[str]) -> list[str]:
    """The command line ``argv`` with ``flags`` added where they still read as flags: before a
    ``--`` that makes the rest positional, else at the end."""
    words = _without_secret(argv)
    at = words.index("--") if "--" in words else len(words)
    return ["turnkeeper", *words[:at], *flags, *words[at:]]


SECRET = "<token>"
"""What a retry line shows in place of a ``--token`` given on the command line: the line is
printed on the terminal and may be logged, and without the token the retry fails on hello
rather than running as another principal, which would apply the command twice."""


def _without_secret(argv: Sequence[str]) -> list[str]:
    words: list[str] = []
    hidden = False
    for at, word in enumerate(argv):
        if word == "--" and not hidden:
            return words + list(argv[at:])  # the rest is positional, not flags
        if hidden:
            words.append(SECRET)
            hidden = False
        elif word.startswith("--token="):
            words.append(f"--token={SECRET}")
        else:
            words.append(word)
            hidden = word == "--token"
    return words


def _print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2))


def _print_json_list(items: Iterable[Any]) -> None:
    """A list printed as ``_print_json`` prints it, an item at a time as it comes."""
    opened = False
    for item in items:
        print(",\n" if opened else "[\n", end="")
        print(textwrap.indent(json.dumps(item, ensure_ascii=False, indent=2), "  "), end="")
        opened = True
    print("\n]" if opened else "[]")


def _tell(events: Iterable[Mapping[str, Any]]) -> None:
    """Each event's summary, a line each, as the events come."""
    for event in events:
        if event.get("summary"):
            print(event["summary"])


def _query(name: str, args: argparse.Namespace, client: Client, locale: str) -> None:
    if name == "show":
        from .watch import render

        shown = client.call("get_combat", combat=args.combat)
        if args.json:
            _print_json(shown)
        else:
            print(render(shown, locale, ids=True))
        return
    if name == "list":
        rows = client.list_combats()
        if args.json:
            _print_json(rows)
            return
        for row in rows:
            print(_combat_line(row, locale))
        return
    events = _history(client, args.combat)
    if args.json:
        _print_json_list(events)
        return
    _tell(events)


def _command(
    verb: Verb, args: argparse.Namespace, argv: Sequence[str], client: Client, locale: str
) -> int:
    """Send the verb's command and print the answer; the exit code."""
    # Made here rather than by the client, so that a command whose answer is lost can be
    # named for a retry that the daemon will not apply twice.
    request_id = args.request_id or uuid.uuid4().hex
    combat = Combat(client, getattr(args, "combat", None), locale)
    params, filled = _params(verb, args, combat, request_id)
    try:
        result = client.call(verb.method, **params)
    except (OSError, EOFError) as e:
        if args.request_id is None:
            filled += ["--request-id", request_id]
        retry = _retry(argv, filled)
        message = i18n.message(
            locale,
            "lost the daemon before its answer ({why}): the command may have been applied; "
            "send it again as {command} (the daemon applies it once)",
            {"why": _lost(e), "command": shlex.join(retry)},
        )
        return _unreachable(args, "connection_lost", message, request_id=request_id, retry=retry)
    if args.json:
        _print_json(result)
        return 0
    _tell(result["events"])
    return 0


def _combat_line(row: Mapping[str, Any], locale: str) -> str:
    """A ``list_combats`` row: id, ruleset, phase and round, or why it is quarantined."""

    def say(template: str, **args: Arg) -> str:
        return i18n.message(locale, template, args)

    if "quarantined" in row:
        return f"{row['combat']}  " + say("quarantined: {reason}", reason=row["quarantined"])
    line = f"{row['combat']}  {row['ruleset']}  {i18n.term(locale, 'phase', row['phase'])}"
    if row["round"]:
        line += "  " + say("round {n}", n=row["round"])
    return line


def _history(client: Client, combat: str) -> Iterator[dict[str, Any]]:
    """Every event of the combat the caller may see, a page at a time: each page is given out
    before the next is asked for, so a long log is never held whole."""
    after = 0
    while True:
        page = client.call("history", combat=combat, after=after, limit=HISTORY_PAGE)
        yield from page["events"]
        after = page["until"]
        if after >= page["seq"]:
            return


def _lost(error: OSError | EOFError) -> str:
    return _why(error) if isinstance(error, OSError) else str(error)


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Run one verb or query, given as the command line ``argv``; the exit code."""
    locale = _locale(args.locale)
    try:
        client = connect(args, locale, name="turnkeeper", kind="tool", narrate=not args.json)
    except (OSError, EOFError) as e:
        return _unreachable(args, "unreachable", cannot_connect(args, locale, e))
    except CallError as e:
        return _refused(e, args.json)
    with client:
        try:
            if args.verb in QUERIES:
                _query(args.verb, args, client, locale)
                return 0
            return _command(_BY_NAME[args.verb], args, argv, client, locale)
        except CallError as e:
            return _refused(e, args.json)
        except (OSError, EOFError) as e:
            # Lost while reading (a query, or the combat for a field to fill in): nothing was
            # sent that could have been applied.
            message = i18n.message(
                locale, "lost the daemon before its answer ({why})", {"why": _lost(e)}
            )
            return _unreachable(args, "connection_lost", message)


def _refused(error: CallError, as_json: bool) -> int:
    """A refusal: as data with ``--json`` (on standard output, where the answer would have
    been), else one line on standard error: code, message, and the field at fault."""
    if as_json:
        _print_json({"error": {"code": error.code, "message": error.message, "field": error.field}})
    else:
        print(f"turnkeeper: {error}", file=sys.stderr)
    return EXIT_REFUSED


def _unreachable(args: argparse.Namespace, code: str, message: str, **more: Any) -> int:
    """No daemon answered, or it went away before answering: with ``--json`` the refusal's
    shape on standard output, with the shell's own ``code`` (and, for a lost command, its
    ``request_id`` and the ``retry`` command line as a list of words); else the message on
    standard error."""
    if args.json:
        _print_json({"error": {"code": code, "message": message, "field": "", **more}})
    else:
        print(f"turnkeeper: {message}", file=sys.stderr)
    return EXIT_UNREACHABLE
