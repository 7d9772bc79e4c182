"""The ``turnkeeper`` command."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from argparse import _ArgumentGroup
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from turnkeeper_engine.errors import TemplatedError
from turnkeeper_sdk.client import CallError, Client

from . import __version__, i18n
from .logs import LOG_FORMATS

if TYPE_CHECKING:
    from .auth import TokenRecord
    from .loader import PluginChoice, PluginPath

EXIT_INTERRUPTED = 128 + signal.SIGINT
"""A shell's code for a command ended by Ctrl-C."""
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
"""A shell's code for a command whose reader went away, as for any tool killed by SIGPIPE."""
EXIT_UNREACHABLE = 3
"""No daemon answered at the address, or it went away before answering: distinct from a
refusal (1), so a script can wait and retry."""
LOOPS = ("auto", "asyncio", "uvloop")
"""``serve --loop``'s choices (``_loop_options``)."""


def default_data_dir() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "turnkeeper"


def default_socket() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "turnkeeper" if runtime else Path(f"/tmp/turnkeeper-{os.getuid()}")
    return base / "turnkeeper.sock"


def _tcp(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError("expected HOST:PORT, e.g. 127.0.0.1:7616")
    # An IPv6 host is written in brackets, as in a URL: [::1]:7616.
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or "127.0.0.1", int(port)


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


def _tcp_address(value: str) -> str:
    """``watch --tcp HOST:PORT``, its flag from before ``--connect``: ``tcp://HOST:PORT``."""
    _tcp(value)
    return f"tcp://{value}"


def _store(value: str) -> str:
    from .stores import POSTGRESQL_SCHEMES

    if not value.startswith(POSTGRESQL_SCHEMES):
        raise argparse.ArgumentTypeError("expected a postgresql:// URI")
    return value


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError("expected a whole number of at least 1")
    return int(value)


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not 0.5 <= seconds <= 3600:
        raise argparse.ArgumentTypeError("expected seconds between 0.5 and 3600")
    return seconds


def _names(value: str) -> frozenset[str]:
    names = frozenset(n.strip() for n in value.split(","))
    if not value.strip() or "" in names:
        raise argparse.ArgumentTypeError("expected NAME[,NAME...]")
    return names


def _plugin_path(value: str) -> PluginPath:
    from .loader import PluginPath

    try:
        return PluginPath.parse(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


@dataclass(frozen=True, slots=True)
class Setting:
    """An option that falls back to an environment variable, then to a default.

    The environment is read only after the command line is parsed, and only for the command's
    own options: a bad value can never stop ``--help`` or another command, and it is reported
    as a usage error naming the variable.
    """

    flags: tuple[str, ...]
    help: str
    env: str | None = None
    parse: Callable[[str], Any] = str
    """Turns a command-line or environment value into the option's value."""
    default: Callable[[], Any] = lambda: None
    """Called only when neither gives a value: the default paths read the environment too."""
    switch: bool = False
    """A flag without a value; its variable is ``1`` (on) or ``0`` (off)."""
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Further ``add_argument`` arguments (``metavar``, ``action``)."""

    @property
    def dest(self) -> str:
        return self.flags[0].removeprefix("--").replace("-", "_")

    def add(self, parser: argparse.ArgumentParser | _ArgumentGroup) -> None:
        """Add the option with no default: what is absent after parsing was not given."""
        if self.switch:
            parser.add_argument(
                *self.flags, action="store_true", default=argparse.SUPPRESS, help=self.help
            )
            return
        parser.add_argument(
            *self.flags, type=self.parse, default=argparse.SUPPRESS, help=self.help, **self.kwargs
        )

    def resolve(self, args: argparse.Namespace) -> None:
        """Fill in the value from the environment or the default when the command line had
        none; raises ``EnvironmentValueError`` for a value that does not parse."""
        if hasattr(args, self.dest):
            return
        raw = os.environ.get(self.env) if self.env else None
        if not raw:
            setattr(args, self.dest, self.default())
            return
        try:
            value = _switch(raw) if self.switch else self.parse(raw)
        except argparse.ArgumentTypeError as e:
            raise EnvironmentValueError(f"{self.env}={raw!r}: {e}") from e
        setattr(args, self.dest, value)


class EnvironmentValueError(Exception):
    """A ``TURNKEEPER_*`` variable that the command reads holds a value it cannot use."""


def _switch(value: str) -> bool:
    if value not in ("0", "1"):
        raise argparse.ArgumentTypeError("expected 1 (on) or 0 (off)")
    return value == "1"


def _snapshot_every() -> int:
    from .combats.rebuild import SNAPSHOT_EVERY

    return SNAPSHOT_EVERY


def _max_connections() -> int:
    from .transport.listeners import MAX_CONNECTIONS

    return MAX_CONNECTIONS


def _max_web_connections() -> int:
    from .transport.listeners import MAX_WEB_CONNECTIONS

    return MAX_WEB_CONNECTIONS


def _choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value not in choices:
            raise argparse.ArgumentTypeError("expected one of " + ", ".join(choices))
        return value

    return parse


DEBUG = Setting(
    ("--debug",),
    "log every request, and show a traceback when the command fails (env TURNKEEPER_DEBUG=1)",
    env="TURNKEEPER_DEBUG",
    switch=True,
    default=lambda: False,
)
DATA_DIR = Setting(
    ("--data-dir",),
    "where combats and tokens are stored (env TURNKEEPER_DATA_DIR)",
    env="TURNKEEPER_DATA_DIR",
    parse=Path,
    default=default_data_dir,
    kwargs={"metavar": "DIR"},
)
SOCKET = Setting(
    ("--socket",),
    "the daemon's Unix socket (env TURNKEEPER_SOCKET)",
    env="TURNKEEPER_SOCKET",
    parse=Path,
    default=default_socket,
    kwargs={"metavar": "PATH"},
)
STORE = Setting(
    ("--store",),
    "keep combats in PostgreSQL at this postgresql:// URI instead of SQLite in the data "
    "directory (env TURNKEEPER_STORE)",
    env="TURNKEEPER_STORE",
    parse=_store,
    kwargs={"metavar": "URI"},
)
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
LOCALE = Setting(
    ("--locale",),
    "the language: en or pt-BR (env TURNKEEPER_LOCALE)",
    env="TURNKEEPER_LOCALE",
    default=lambda: i18n.DEFAULT,
)
GLOBAL = (DEBUG, DATA_DIR, SOCKET)
"""Options that may come before the command as well as after it (or after its action)."""

PLUGIN_SETTINGS = (
    Setting(
        ("--plugins",),
        "load only these installed plugins (env TURNKEEPER_PLUGINS; default: all)",
        env="TURNKEEPER_PLUGINS",
        parse=_names,
        kwargs={"metavar": "NAME[,NAME...]"},
    ),
    Setting(
        ("--no-plugins",),
        "never load these installed plugins (env TURNKEEPER_NO_PLUGINS)",
        env="TURNKEEPER_NO_PLUGINS",
        parse=_names,
        default=frozenset,
        kwargs={"metavar": "NAME[,NAME...]"},
    ),
    Setting(
        ("--plugin",),
        "also load a plugin by import path, without installing it (repeatable)",
        parse=_plugin_path,
        default=list,
        kwargs={"action": "append", "metavar": "[NAME=]MODULE[:ATTR]"},
    ),
    Setting(
        ("--plugin-budget-ms",),
        "milliseconds one hook call may take (env TURNKEEPER_PLUGIN_BUDGET_MS)",
        env="TURNKEEPER_PLUGIN_BUDGET_MS",
        parse=_positive,
        default=lambda: 50,
        kwargs={"metavar": "N"},
    ),
)
"""The flags that choose plugins: ``serve`` and ``plugins`` take the same, so the listing shows
what the daemon would run."""

SERVE_SETTINGS = (
    DATA_DIR,
    SOCKET,
    STORE,
    Setting(
        ("--tcp",),
        "also listen on HOST:PORT; every TCP client needs a token (env TURNKEEPER_TCP)",
        env="TURNKEEPER_TCP",
        parse=_tcp,
        kwargs={"metavar": "HOST:PORT"},
    ),
    Setting(
        ("--snapshot-every",),
        "events between two snapshots of a combat (env TURNKEEPER_SNAPSHOT_EVERY)",
        env="TURNKEEPER_SNAPSHOT_EVERY",
        parse=_positive,
        default=_snapshot_every,
        kwargs={"metavar": "N"},
    ),
    Setting(
        ("--lease-seconds",),
        "PostgreSQL store: how long a combat's lease outlives its daemon's last renewal, so "
        "how soon another daemon serves the combats of one that died "
        "(env TURNKEEPER_LEASE_SECONDS; default: 3)",
        env="TURNKEEPER_LEASE_SECONDS",
        parse=_seconds,
        kwargs={"metavar": "S"},
    ),
    Setting(
        ("--max-db-mib",),
        "a quota on the store (SQLite: the database and its write-ahead log together; "
        "PostgreSQL: the store's tables and indexes); past it commands fail with store_full "
        "(env TURNKEEPER_MAX_DB_MIB; default: none)",
        env="TURNKEEPER_MAX_DB_MIB",
        parse=_positive,
        kwargs={"metavar": "N"},
    ),
    Setting(
        ("--max-connections",),
        "sessions the daemon holds at once, all transports together; 32 of them are kept for "
        "the Unix socket (env TURNKEEPER_MAX_CONNECTIONS)",
        env="TURNKEEPER_MAX_CONNECTIONS",
        parse=_positive,
        default=_max_connections,
        kwargs={"metavar": "N"},
    ),
    Setting(
        ("--max-web-connections",),
        "of those, the most over WebSocket (env TURNKEEPER_MAX_WEB_CONNECTIONS)",
        env="TURNKEEPER_MAX_WEB_CONNECTIONS",
        parse=_positive,
        default=_max_web_connections,
        kwargs={"metavar": "N"},
    ),
    Setting(
        ("--no-peer-narrator",),
        "peers with the daemon's own uid need a token too (env TURNKEEPER_NO_PEER_NARRATOR=1)",
        env="TURNKEEPER_NO_PEER_NARRATOR",
        switch=True,
        default=lambda: False,
    ),
    Setting(
        ("--loop",),
        "the event loop: uvloop where it is installed (the daemon's uvloop extra), asyncio's "
        "own otherwise (env TURNKEEPER_LOOP)",
        env="TURNKEEPER_LOOP",
        parse=_choice(LOOPS),
        default=lambda: "auto",
        kwargs={"metavar": "{" + ",".join(LOOPS) + "}"},
    ),
    Setting(
        ("--log-format",),
        "console on a terminal, JSON otherwise (env TURNKEEPER_LOG_FORMAT)",
        env="TURNKEEPER_LOG_FORMAT",
        parse=_choice(LOG_FORMATS),
        default=lambda: "auto",
        kwargs={"metavar": "{" + ",".join(LOG_FORMATS) + "}"},
    ),
    *PLUGIN_SETTINGS,
)
WEB_SETTINGS = (
    Setting(
        ("--ws",),
        "also serve the protocol over WebSocket at ws://HOST:PORT/ws; every client needs "
        "a token (env TURNKEEPER_WS)",
        env="TURNKEEPER_WS",
        parse=_tcp,
        kwargs={"metavar": "HOST:PORT"},
    ),
    Setting(
        ("--http",),
        "like --ws, and serve the table view at http://HOST:PORT/ (env TURNKEEPER_HTTP)",
        env="TURNKEEPER_HTTP",
        parse=_tcp,
        kwargs={"metavar": "HOST:PORT"},
    ),
)
WATCH_SETTINGS = (
    SOCKET,
    CONNECT,
    TOKEN,
    Setting(("--once",), "print the board once and exit", switch=True, default=lambda: False),
    LOCALE,
)
TAKES: Mapping[str, tuple[Setting, ...]] = {
    "demo": (DEBUG, LOCALE),
    "serve": (DEBUG, *SERVE_SETTINGS, *WEB_SETTINGS),
    "plugins": (DEBUG, *PLUGIN_SETTINGS),
    "watch": (DEBUG, *WATCH_SETTINGS),
    "token": (DEBUG, DATA_DIR, STORE),
    "migrate": (DEBUG, STORE),
    "table": (DEBUG, DATA_DIR, STORE),
}
"""Each command's options, the global ones it uses included; the protocol's verbs (``create``,
``next``, ``show``…) have theirs in ``shell.TAKES``."""


def _takes(command: str) -> tuple[Setting, ...]:
    if command in TAKES:
        return TAKES[command]
    from . import shell

    return shell.TAKES[shell.command_name(command)]


def _plugin_choice(args: argparse.Namespace) -> PluginChoice:
    from .loader import PluginChoice

    return PluginChoice(
        allow=args.plugins,
        block=args.no_plugins,
        paths=tuple(args.plugin),
        budget=args.plugin_budget_ms / 1000,
    )


Fill = Callable[[argparse.ArgumentParser], object]
"""Adds a command's arguments to its parser."""

if TYPE_CHECKING:
    _SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]
else:  # not subscriptable at run time
    _SubParsers = argparse._SubParsersAction


class Commands(_SubParsers):
    """``turnkeeper``'s commands, each one's parser made only when it is the command given
    (``add_command``). Every name, alias and help line is there from the start, so
    ``turnkeeper --help`` and an unknown command's error list them all; but making the parsers
    of about 40 commands with their options (the shell's verbs, with flags from the method
    table) took 40 ms of CPU on a 2-core EPYC, against 3 ms for one, at every start of the
    daemon as of any command (``bench/bench_startup.py``): argparse looks for its translations
    on disk for each parser it makes."""

    _UNMADE = cast(argparse.ArgumentParser, None)
    """A command's place in the choices until its parser is made: only ``__call__`` reads it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._unmade: dict[str, tuple[str, tuple[str, ...], Fill]] = {}

    def add_command(self, name: str, fill: Fill, *, help: str, aliases: Sequence[str] = ()) -> None:
        """Add a command whose parser ``fill`` completes once the command is given."""
        self._choices_actions.append(self._ChoicesPseudoAction(name, aliases, help))
        for known in (name, *aliases):
            self._name_parser_map[known] = self._UNMADE
            self._unmade[known] = (name, tuple(aliases), fill)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        if values and values[0] in self._unmade:
            self.parser(values[0])
        super().__call__(parser, namespace, values, option_string)

    def parser(self, name: str) -> argparse.ArgumentParser:
        """Command (or alias) ``name``'s parser, made now if it was not."""
        unmade = self._unmade.get(name)
        if unmade is None:
            return self._name_parser_map[name]
        command, aliases, fill = unmade
        for known in (command, *aliases):
            del self._name_parser_map[known], self._unmade[known]
        made = self.add_parser(command, aliases=aliases)
        fill(made)
        return made


def _options(name: str, parser: argparse.ArgumentParser) -> None:
    """Add command ``name``'s options to its parser; the web pair are exclusive."""
    for setting in TAKES[name]:
        if setting not in WEB_SETTINGS:
            setting.add(parser)
    if name == "serve":
        web = parser.add_mutually_exclusive_group()
        for setting in WEB_SETTINGS:
            setting.add(web)


def _parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser, for ``argv`` if it is known (every command otherwise)."""
    parser = argparse.ArgumentParser(
        prog="turnkeeper",
        description="The combat clock for tabletop RPG encounters.",
        epilog="--debug, --data-dir and --socket may also come after the command.",
    )
    parser.add_argument("--version", action="version", version=f"turnkeeper {__version__}")
    for setting in GLOBAL:
        setting.add(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", action=Commands)
    assert isinstance(sub, Commands)
    sub.add_command(
        "demo",
        partial(_options, "demo"),
        help="play the rule books' worked examples and narrate them",
    )
    sub.add_command("serve", partial(_options, "serve"), help="run the daemon")
    sub.add_command(
        "plugins",
        _plugins_arguments,
        help="load plugins as serve would and list them, with what failed and why",
    )
    sub.add_command("watch", _watch_arguments, help="show a combat's live initiative order")
    sub.add_command(
        "migrate",
        partial(_options, "migrate"),
        help="bring the PostgreSQL store (--store) to this version's schema and exit",
    )
    sub.add_command("token", _token_arguments, help="manage access tokens")
    sub.add_command(
        "table", _table_arguments, help="manage tables (groups whose combats are kept apart)"
    )
    # A line whose first word is one of the commands above has chosen it, and nothing else
    # lists the shell's verbs (the usage says COMMAND): their table is not even imported, 0.9%
    # of the instructions a daemon's start ran to its first answer (bench_startup.py).
    if not argv or argv[0] not in TAKES:
        from . import shell

        shell.add_commands(sub)
    return parser


def _plugins_arguments(plugins: argparse.ArgumentParser) -> None:
    _options("plugins", plugins)
    plugins.add_argument("--json", action="store_true", help="machine-readable output")


def _watch_arguments(watch: argparse.ArgumentParser) -> None:
    _options("watch", watch)
    watch.add_argument("combat")
    watch.add_argument(
        "--tcp",
        dest=CONNECT.dest,
        type=_tcp_address,
        default=argparse.SUPPRESS,
        metavar="HOST:PORT",
        help="the same as --connect tcp://HOST:PORT",
    )


def _token_arguments(token: argparse.ArgumentParser) -> None:
    _options("token", token)
    actions = token.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="make a token and print its secret once")
    add.add_argument("role", choices=("narrator", "player", "observer", "bridge"))
    add.add_argument("--user", help="the user id a player token is bound to")
    add.add_argument("--narrator", action="store_true", help="a bridge that may act as narrator")
    add.add_argument(
        "--table", default="default", help="the table the token belongs to (default: default)"
    )
    add.add_argument(
        "--host",
        action="store_true",
        help="a bridge that makes tables and manages the tokens of those it made or was granted",
    )
    listing = actions.add_parser("list", help="list tokens (never their secrets)")
    revoke = actions.add_parser("revoke", help="revoke a token by id")
    revoke.add_argument("id")
    imported = actions.add_parser(
        "import",
        help="copy the data directory's tables and tokens into the PostgreSQL store (--store)",
    )
    for action in (add, listing, revoke, imported):
        for setting in TAKES["token"]:
            setting.add(action)


def _table_arguments(table: argparse.ArgumentParser) -> None:
    _options("table", table)
    table_actions = table.add_subparsers(dest="action", required=True)
    table_add = table_actions.add_parser("add", help="make a table and print its id")
    table_add.add_argument("name", help="a name for people: the group's, the campaign's")
    table_list = table_actions.add_parser("list", help="list tables and who manages them")
    grant = table_actions.add_parser("grant", help="let a hosting bridge's token manage a table")
    ungrant = table_actions.add_parser("ungrant", help="take a grant back")
    for action in (grant, ungrant):
        action.add_argument("table")
        action.add_argument("token", help="the id of a token made with --host")
    for action in (table_add, table_list, grant, ungrant):
        for setting in TAKES["table"]:
            setting.add(action)


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line, completed from the environment and the defaults. A global option
    the command does not use, or a bad environment value, is a usage error (exit 2)."""
    parser = _parser(argv)
    args = parser.parse_args(argv)
    takes = _takes(args.command)
    for setting in GLOBAL:
        if setting not in takes and hasattr(args, setting.dest):
            parser.error(f"{args.command} takes no {setting.flags[0]}")
    try:
        for setting in takes:
            setting.resolve(args)
    except EnvironmentValueError as e:
        parser.error(str(e))
    return args


def _token(args: argparse.Namespace) -> int:
    from .auth import AuthError
    from .stores import open_tokens

    if args.action == "import":
        return _import(args)
    _log_to_stderr(args)
    tokens = open_tokens(args.store, args.data_dir)
    try:
        if args.action == "add":
            try:
                record, secret = tokens.add(
                    args.role, args.user, narrator=args.narrator, table=args.table, host=args.host
                )
            except AuthError as e:
                print(f"turnkeeper: {e.field}: {e.message}", file=sys.stderr)
                return 2
            print(_token_line(record))
            print(secret)
            return 0
        if args.action == "list":
            for r in tokens.read().tokens:
                print(_token_line(r))
            return 0
        if tokens.revoke(args.id):
            return 0
    finally:
        tokens.close()
    print(f"turnkeeper: no token {args.id}", file=sys.stderr)
    return 1


def _import(args: argparse.Namespace) -> int:
    """``token import``: the data directory's token file into the PostgreSQL store."""
    from .auth import AuthError, Tokens
    from .stores import is_postgresql, open_tokens
    from .stores.tokens import SharedTokens

    if not is_postgresql(args.store):
        print(
            "turnkeeper: token import needs --store postgresql://... (or TURNKEEPER_STORE)",
            file=sys.stderr,
        )
        return 2
    _log_to_stderr(args)
    source = Tokens(args.data_dir)
    contents = source.read()
    tokens = open_tokens(args.store, args.data_dir)
    assert isinstance(tokens, SharedTokens)
    try:
        tables, added = tokens.import_contents(contents)
    except AuthError as e:
        print(f"turnkeeper: {e.field}: {e.message}", file=sys.stderr)
        return 2
    finally:
        tokens.close()
    print(f"imported {tables} tables and {added} tokens from {source.path}")
    return 0


def _log_to_stderr(args: argparse.Namespace) -> None:
    """On a PostgreSQL store, what the database said goes to stderr as log lines (the
    error line says only what failed); stdout keeps what the command prints."""
    from .stores import is_postgresql

    if is_postgresql(args.store):
        from .logs import configure

        configure(debug=args.debug)


def _token_line(r: TokenRecord) -> str:
    """A token as ``token add`` and ``token list`` show it: id, role (and narrator, host),
    user, and its table unless it is the default one."""
    flags = "".join((" narrator" if r.narrator else "", " host" if r.host else ""))
    table = f" table={r.table}" if r.table != "default" else ""
    return f"{r.id} {r.role}{flags} {r.user or '-'}{table}"


def _table(args: argparse.Namespace) -> int:
    from .auth import AuthError
    from .stores import open_tokens

    _log_to_stderr(args)
    tokens = open_tokens(args.store, args.data_dir)
    try:
        if args.action == "add":
            print(tokens.add_table(args.name).id)
        elif args.action == "list":
            print("default default")
            for t in tokens.read().tables:
                managers = f" managers={','.join(t.managers)}" if t.managers else ""
                print(f"{t.id} {t.name}{managers}")
        else:
            tokens.grant(args.table, args.token, granted=args.action == "grant")
    except AuthError as e:
        print(f"turnkeeper: {e.field}: {e.message}", file=sys.stderr)
        return 2
    finally:
        tokens.close()
    return 0


def _serve(args: argparse.Namespace) -> int:
    import anyio

    from .app import Config, serve
    from .combats import tune_collector
    from .logs import configure
    from .transport.listeners import ConnectionLimits

    configure(args.log_format, debug=args.debug)
    tune_collector()
    host, port = args.tcp if args.tcp else (None, None)
    if args.http and args.ws:
        # Only possible through the environment: argparse keeps the two flags apart.
        print(
            "turnkeeper: give --ws or --http, not both (TURNKEEPER_WS, TURNKEEPER_HTTP)",
            file=sys.stderr,
        )
        return 2
    ws_host, ws_port = args.http or args.ws or (None, None)
    config = Config(
        args.data_dir,
        args.socket,
        host,
        port,
        snapshot_every=args.snapshot_every,
        max_db_mib=args.max_db_mib,
        store=args.store,
        lease_seconds=args.lease_seconds,
        narrator_uid=None if args.no_peer_narrator else os.getuid(),
        plugins=_plugin_choice(args),
        ws_host=ws_host,
        ws_port=ws_port,
        page=args.http is not None,
        limits=ConnectionLimits(args.max_connections, args.max_web_connections),
    )
    try:
        backend = _loop_options(args.loop)
    except ImportError:
        print(
            "turnkeeper: --loop uvloop: uvloop is not installed (pip install uvloop)",
            file=sys.stderr,
        )
        return 2
    anyio.run(serve, config, backend_options=backend)
    return 0


def _loop_options(choice: str) -> dict[str, Any]:
    """anyio's options for the loop ``--loop`` names. uvloop's transports are written in C: a
    durable command costs the daemon 6 to 9% less CPU on it (docs/benchmarks.md); ``auto`` takes
    it where the ``uvloop`` extra is installed. Raises ``ImportError`` for ``uvloop`` when it
    is not."""
    if choice == "asyncio":
        return {}
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise
        return {}
    return {"loop_factory": uvloop.new_event_loop}


def _migrate(args: argparse.Namespace) -> int:
    """Apply the PostgreSQL store's missing migrations (``serve`` applies them too, on start),
    one line per migration applied."""
    if args.store is None:
        print(
            "turnkeeper: migrate needs --store postgresql://... (or TURNKEEPER_STORE)",
            file=sys.stderr,
        )
        return 2
    from .logs import configure
    from .stores import load_postgresql

    configure(debug=args.debug)  # its log lines to stderr; stdout says what was applied
    store = load_postgresql()
    for migration in store.migrate(args.store):
        print(f"applied {migration.version}: {migration.name}")
    print(f"{store.shown(args.store)} is at schema version {store.SCHEMA_VERSION}")
    return 0


def _plugins(args: argparse.Namespace) -> int:
    """Failures are the listing's to show, not errors: the exit code is 0 all the same."""
    from .loader import load

    listing = load(_plugin_choice(args), report=_quiet).listing()
    if args.json:
        print(json.dumps(listing, indent=2))
        return 0
    for line in _plugin_lines(listing):
        print(line)
    return 0


def _quiet(what: str, **details: Any) -> None:
    """Problems met while listing are in the listing itself."""


def _plugin_lines(listing: dict[str, Any]) -> list[str]:
    lines = ["loaded:"]
    for p in listing["loaded"]:
        lines.append(f"  {p['name']} {p['version'] or '(no version)'}")
        lines.append(f"    hooks: {', '.join(p['hooks']) or '-'}")
        if p["provides"]:
            lines.append(f"    provides: {', '.join(p['provides'])}")
        if p["unknown_hooks"]:
            lines.append(f"    unknown hooks: {', '.join(p['unknown_hooks'])}")
    if not listing["loaded"]:
        lines.append("  (none)")
    if listing["failed"]:
        lines.append("failed:")
        lines += [f"  {f['name']}: {f['error']}" for f in listing["failed"]]
    if listing["skipped"]:
        lines.append("skipped:")
        lines += [f"  {s['name']}: {s['reason']}" for s in listing["skipped"]]
    return lines


def _locale(tag: str) -> str:
    """The supported locale for ``tag``, with a warning when its language is not spoken."""
    locale = i18n.negotiate(tag)
    if locale.split("-")[0].lower() != tag.strip().replace("_", "-").split("-")[0].lower():
        supported = ", ".join(i18n.SUPPORTED)
        print(
            f"turnkeeper: warning: no {tag!r} translation (supported: {supported}); using {locale}",
            file=sys.stderr,
        )
    return locale


def connect(
    args: argparse.Namespace, locale: str, *, name: str, kind: str, narrate: bool = False
) -> Client:
    """A connection that has said hello to the daemon at ``--connect`` (or the Unix socket,
    ``--socket``): ``OSError`` or ``EOFError`` when none answers there, ``CallError`` when it
    refuses the hello."""
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
        client.hello(args.token, name=name, kind=kind, locale=locale, narrate=narrate)
    except BaseException:
        client.close()
        raise
    return client


def cannot_connect(args: argparse.Namespace, locale: str, error: OSError | EOFError) -> str:
    """Why ``connect`` failed, in ``locale``, naming the address it tried."""
    why = _why(error) if isinstance(error, OSError) else str(error)
    where = args.connect or str(args.socket)
    return i18n.message(locale, "cannot connect to {where}: {why}", {"where": where, "why": why})


def _watch(args: argparse.Namespace) -> int:
    from .watch import GaveUp, watch

    locale = _locale(args.locale)

    def reconnect() -> Client:
        return connect(args, locale, name="turnkeeper watch", kind="observer")

    try:
        client = reconnect()
    except (OSError, EOFError) as e:
        print(f"turnkeeper: {cannot_connect(args, locale, e)}", file=sys.stderr)
        return EXIT_UNREACHABLE

    def show(board: str) -> None:
        try:
            print(board, flush=True)
        except BrokenPipeError as e:
            # Not a lost connection to the daemon, which watch would retry: the reader is gone.
            raise ReaderGone from e

    def status(text: str) -> None:
        print(f"turnkeeper: {text}", file=sys.stderr, flush=True)

    try:
        with contextlib.suppress(KeyboardInterrupt):
            watch(
                client,
                args.combat,
                show,
                once=args.once,
                locale=locale,
                reconnect=reconnect,
                status=status,
            )
    except GaveUp as e:
        print(f"turnkeeper: {e}", file=sys.stderr)
        return EXIT_UNREACHABLE
    return 0


class ReaderGone(Exception):  # noqa: N818 - what happened, not a fault
    """Standard output's reader went away (``turnkeeper watch X | head``)."""


def _run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    # Each command imports what it runs only when it runs: a shell verb starts without the
    # demo's bots and the daemon's logging.
    if args.command == "demo":
        from . import demo

        demo.run(locale=_locale(args.locale))
        return 0
    if args.command == "token":
        return _token(args)
    if args.command == "table":
        return _table(args)
    if args.command == "watch":
        return _watch(args)
    if args.command == "plugins":
        return _plugins(args)
    if args.command == "migrate":
        return _migrate(args)
    if args.command == "serve":
        return _serve(args)
    from . import shell

    return shell.run(args, argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; a failure is one line on stderr and a non-zero exit, its traceback
    shown only with ``--debug`` (or ``TURNKEEPER_DEBUG=1``)."""
    words = sys.argv[1:] if argv is None else list(argv)
    args = _arguments(words)
    try:
        return _run(args, words)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except (BrokenPipeError, ReaderGone):
        # The reader went away (``turnkeeper plugins | head``): nothing is left to say, and
        # Python's own flush at exit must not say it either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as e:
        if args.debug:
            raise
        print(f"turnkeeper: {_why(e)}", file=sys.stderr)
        if not _explained(e):
            print("turnkeeper: run with --debug for the traceback", file=sys.stderr)
        return 1


def _leaf(error: BaseException) -> BaseException:
    """The one exception inside task-group wrappings, if there is exactly one."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _explained(error: BaseException) -> bool:
    """Whether the error's own message says what is wrong (no traceback would add to it)."""
    import sqlite3

    error = _leaf(error)
    return isinstance(error, OSError | TemplatedError | CallError | sqlite3.Error)


def _why(error: BaseException) -> str:
    """What went wrong, in one line: a system error names its file, a refused request its
    code; anything else is named by its type, being a fault of Turnkeeper's."""
    import sqlite3

    error = _leaf(error)
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(_why(e) for e in error.exceptions)
    if isinstance(error, OSError) and error.strerror:
        where = f"{error.filename}: " if error.filename is not None else ""
        return where + error.strerror
    if isinstance(error, TemplatedError):
        return error.message
    if isinstance(error, CallError):
        return str(error)
    if isinstance(error, OSError | sqlite3.Error):
        return str(error) or type(error).__name__
    return f"internal error: {type(error).__name__}: {error}"


if __name__ == "__main__":
    raise SystemExit(main())
