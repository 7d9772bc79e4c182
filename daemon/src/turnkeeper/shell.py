"""``turnkeeper create``, ``add``, ``roll``, ``next``, ``show``…: the protocol from the shell.

A verb per engine command, in the words tables know from chat bots' initiative trackers, and a
few reads (``show``, ``list``, ``log``). Each run is one connection to a running daemon (its
Unix socket by default, or ``--connect``), one ``hello``, one command, one answer. A verb's
arguments come from the method table (:mod:`turnkeeper_sdk.methods`): its params become
positionals or flags by their types, so a field added to a command is a flag here with no
change; only the records (an action, a trigger, a trigger's facts) are spelled out as flags.
What a shell user cannot know offhand is filled in from the combat as it stands: the current
turn (``turn``), the open reaction window (``window``), a claimant's reservation; and a fresh
request id for each command unless ``--request-id`` gives one.

Output is what the daemon says: each event's ``summary`` in the chosen language, or with
``--json`` the answer as JSON. A refusal prints its code, message and field and exits with
``EXIT_REFUSED``; a daemon that cannot be reached exits with ``EXIT_UNREACHABLE``.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
import typing
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from turnkeeper_engine import BUNDLED_RULES
from turnkeeper_engine.errors import Arg
from turnkeeper_sdk.client import CallError, Client
from turnkeeper_sdk.methods import METHODS, Param

from . import i18n
from .cli import DEBUG, LOCALE, SOCKET, Setting, _locale, _tcp, _why

EXIT_REFUSED = 1
"""The daemon (or the command line's own check of the combat) refused the command."""
EXIT_UNREACHABLE = 3
"""No daemon answered at the address: distinct from a refusal, so a script can wait and retry."""
HISTORY_PAGE = 1000
"""Events ``log`` asks for at a time: the most a ``history`` page may hold."""


def _address(value: str) -> str:
    """``unix:PATH``, ``tcp://HOST:PORT`` or ``ws://HOST:PORT[/PATH]``, checked now so that a
    typo is a usage error rather than a failed connection."""
    scheme, _, rest = value.partition(":")
    if scheme == "unix" and rest.removeprefix("//"):
        return value
    if scheme in ("tcp", "ws") and rest.startswith("//"):
        _tcp(urlsplit(value).netloc)
        return value
    raise argparse.ArgumentTypeError("expected unix:PATH, tcp://HOST:PORT or ws://HOST:PORT[/PATH]")


CONNECT = Setting(
    ("--connect",),
    "the daemon at unix:PATH, tcp://HOST:PORT or ws://HOST:PORT[/PATH] (env TURNKEEPER_CONNECT; "
    "default: the Unix socket, --socket)",
    env="TURNKEEPER_CONNECT",
    parse=_address,
    kwargs={"metavar": "URL"},
)
TOKEN = Setting(
    ("--token",),
    "a token (env TURNKEEPER_TOKEN); over the Unix socket, none needed: its own uid is narrator",
    env="TURNKEEPER_TOKEN",
)
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
        is still refused as ``stale_turn`` if another has begun meanwhile."""
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

    add: Callable[[argparse.ArgumentParser], object] | None
    """Adds the arguments it is made of; ``None``: it takes none."""
    value: Fill


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


TURN = Record(None, lambda _, combat: combat.turn())
WINDOW = Record(
    lambda p: p.add_argument("--window", metavar="ID", help="the window (default: the open one)"),
    lambda args, combat: args.window or combat.window(),
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


def _add_verb(sub: argparse._SubParsersAction[argparse.ArgumentParser], verb: Verb) -> None:
    method = METHODS[verb.method]
    parser = sub.add_parser(verb.name, aliases=list(verb.aliases), help=verb.help)
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
            if record.add is not None:
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


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add every verb and query to ``turnkeeper``'s subcommands."""
    for verb in VERBS:
        _add_verb(sub, verb)
    for name, text in QUERIES.items():
        parser = sub.add_parser(name, help=text)
        parser.set_defaults(verb=name)
        if name != "list":
            parser.add_argument("combat", metavar="COMBAT", help="the combat's id")
        for setting in QUERY_SETTINGS:
            setting.add(parser)


def command_name(name: str) -> str:
    """A subcommand's own name for one of its aliases (``ready`` is ``reserve``)."""
    verb = _BY_NAME.get(name)
    return verb.name if verb is not None else name


# Running ---------------------------------------------------------------------------------------


def connect(args: argparse.Namespace, locale: str) -> Client:
    """A connection to the daemon that has said hello, with summaries unless ``--json``."""
    address = args.connect or f"unix:{args.socket}"
    parts = urlsplit(address)
    if parts.scheme == "unix":
        client = Client.unix(Path(address.partition(":")[2].removeprefix("//")))
    elif parts.scheme == "tcp":
        client = Client.tcp(*_tcp(parts.netloc))
    else:
        from .wsclient import WebSocketSocket

        client = Client(WebSocketSocket(*_tcp(parts.netloc), parts.path or "/ws"))
    try:
        client.hello(
            args.token, name="turnkeeper", kind="tool", locale=locale, narrate=not args.json
        )
    except BaseException:
        client.close()
        raise
    return client


def _params(verb: Verb, args: argparse.Namespace, combat: Combat) -> dict[str, Any]:
    """The command's params: its fields from the arguments (and the combat), its envelope."""
    params: dict[str, Any] = {}
    for param in METHODS[verb.method].params:
        record = verb.records.get(param.name)
        if record is not None:
            value = record.value(args, combat)
        elif param.name == "display_name":
            value = args.display_name or args.id  # called by its id unless given a name
        else:
            value = getattr(args, param.name, None)
        # Left out, a field takes the daemon's default: the command line never restates it.
        if value is not None and value is not False:
            params[param.name] = value
    if verb.method != "create_combat":
        params["combat"] = args.combat
    if args.as_user is not None:
        params["as"] = args.as_user
    params["request_id"] = args.request_id
    return params


def _print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2))


def _summaries(events: Sequence[Mapping[str, Any]]) -> list[str]:
    return [e["summary"] for e in events if e.get("summary")]


def _run_verb(name: str, args: argparse.Namespace, client: Client, locale: str) -> None:
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
    if name == "log":
        events = _history(client, args.combat)
        if args.json:
            _print_json(events)
            return
        for line in _summaries(events):
            print(line)
        return
    verb = _BY_NAME[name]
    params = _params(verb, args, Combat(client, getattr(args, "combat", None), locale))
    result = client.call(verb.method, **params)
    if args.json:
        _print_json(result)
        return
    for line in _summaries(result["events"]):
        print(line)


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


def _history(client: Client, combat: str) -> list[dict[str, Any]]:
    """Every event of the combat the caller may see, a page at a time."""
    events: list[dict[str, Any]] = []
    after = 0
    while True:
        page = client.call("history", combat=combat, after=after, limit=HISTORY_PAGE)
        events.extend(page["events"])
        after = page["until"]
        if after >= page["seq"]:
            return events


def run(args: argparse.Namespace) -> int:
    """Run one verb or query; the exit code."""
    locale = _locale(args.locale)

    def say(template: str, **values: Arg) -> None:
        print("turnkeeper: " + i18n.message(locale, template, values), file=sys.stderr)

    def why(error: OSError | EOFError) -> str:
        return _why(error) if isinstance(error, OSError) else str(error)

    try:
        client = connect(args, locale)
    except (OSError, EOFError) as e:
        say("cannot connect to {where}: {why}", where=args.connect or str(args.socket), why=why(e))
        return EXIT_UNREACHABLE
    except CallError as e:
        return _refused(e, args.json)
    if hasattr(args, "request_id"):
        # Made here rather than by the client, so that a command whose answer is lost can be
        # named for a retry that the daemon will not apply twice.
        args.request_id = args.request_id or uuid.uuid4().hex
    with client:
        try:
            _run_verb(args.verb, args, client, locale)
        except CallError as e:
            return _refused(e, args.json)
        except (OSError, EOFError) as e:
            if hasattr(args, "request_id"):
                say(
                    "lost the daemon before its answer ({why}): the command may have been "
                    "applied; send it again with --request-id {request_id}, which the daemon "
                    "applies once",
                    why=why(e),
                    request_id=args.request_id,
                )
            else:
                say("lost the daemon before its answer ({why})", why=why(e))
            return EXIT_UNREACHABLE
    return 0


def _refused(error: CallError, as_json: bool) -> int:
    """A refusal: as data with ``--json`` (on standard output, where the answer would have
    been), else one line on standard error: code, message, and the field at fault."""
    if as_json:
        _print_json({"error": {"code": error.code, "message": error.message, "field": error.field}})
    else:
        print(f"turnkeeper: {error}", file=sys.stderr)
    return EXIT_REFUSED
