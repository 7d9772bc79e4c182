"""The ``turnkeeper`` command."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import __version__, demo

if TYPE_CHECKING:
    from .loader import PluginChoice, PluginPath

PAGES_PER_MIB = 256
"""SQLite's default page is 4 KiB."""


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
    return host or "127.0.0.1", int(port)


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError("expected a whole number of at least 1")
    return int(value)


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


def _plugin_flags(parser: argparse.ArgumentParser) -> None:
    """The flags that choose plugins: ``serve`` and ``plugins`` take the same, so the listing
    shows what the daemon would run."""
    env = os.environ.get
    # String defaults go through ``type`` too, so a bad environment value is a usage error.
    parser.add_argument(
        "--plugins",
        type=_names,
        default=env("TURNKEEPER_PLUGINS") or None,
        metavar="NAME[,NAME...]",
        help="load only these installed plugins (env TURNKEEPER_PLUGINS; default: all)",
    )
    parser.add_argument(
        "--no-plugins",
        type=_names,
        default=env("TURNKEEPER_NO_PLUGINS") or None,
        metavar="NAME[,NAME...]",
        help="never load these installed plugins (env TURNKEEPER_NO_PLUGINS)",
    )
    parser.add_argument(
        "--plugin",
        type=_plugin_path,
        action="append",
        default=[],
        metavar="[NAME=]MODULE[:ATTR]",
        help="also load a plugin by import path, without installing it (repeatable)",
    )
    parser.add_argument(
        "--plugin-budget-ms",
        type=_positive,
        default=env("TURNKEEPER_PLUGIN_BUDGET_MS") or "50",
        metavar="N",
        help="milliseconds one hook call may take (env TURNKEEPER_PLUGIN_BUDGET_MS)",
    )


def _plugin_choice(args: argparse.Namespace) -> PluginChoice:
    from .loader import PluginChoice

    return PluginChoice(
        allow=args.plugins,
        block=args.no_plugins or frozenset(),
        paths=tuple(args.plugin),
        budget=args.plugin_budget_ms / 1000,
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="turnkeeper", description="The combat clock for tabletop RPG encounters."
    )
    parser.add_argument("--version", action="version", version=f"turnkeeper {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    env = os.environ.get
    demo_parser = sub.add_parser(
        "demo", help="play the rule books' worked examples and narrate them"
    )
    demo_parser.add_argument(
        "--locale",
        default=env("TURNKEEPER_LOCALE", "en"),
        help="the narrated log's language: en or pt-BR (env TURNKEEPER_LOCALE)",
    )
    serve = sub.add_parser("serve", help="run the daemon")
    serve.add_argument(
        "--data-dir",
        type=Path,
        default=Path(env("TURNKEEPER_DATA_DIR") or default_data_dir()),
        help="where combats are stored (env TURNKEEPER_DATA_DIR)",
    )
    serve.add_argument(
        "--socket",
        type=Path,
        default=Path(env("TURNKEEPER_SOCKET") or default_socket()),
        help="the Unix socket path (env TURNKEEPER_SOCKET)",
    )
    serve.add_argument(
        "--tcp",
        type=_tcp,
        default=_tcp(env("TURNKEEPER_TCP", "")) if env("TURNKEEPER_TCP") else None,
        help="also listen on HOST:PORT; every TCP client needs a token (env TURNKEEPER_TCP)",
    )
    web = serve.add_mutually_exclusive_group()
    web.add_argument(
        "--ws",
        type=_tcp,
        default=_tcp(env("TURNKEEPER_WS", "")) if env("TURNKEEPER_WS") else None,
        metavar="HOST:PORT",
        help="also serve the protocol over WebSocket at ws://HOST:PORT/ws; every client needs "
        "a token (env TURNKEEPER_WS)",
    )
    web.add_argument(
        "--http",
        type=_tcp,
        default=_tcp(env("TURNKEEPER_HTTP", "")) if env("TURNKEEPER_HTTP") else None,
        metavar="HOST:PORT",
        help="like --ws, and serve the table view at http://HOST:PORT/ (env TURNKEEPER_HTTP)",
    )
    serve.add_argument(
        "--snapshot-every",
        type=_positive,
        default=int(env("TURNKEEPER_SNAPSHOT_EVERY", "1000")),
        help="events between two snapshots of a combat (env TURNKEEPER_SNAPSHOT_EVERY)",
    )
    serve.add_argument(
        "--max-db-mib",
        type=_positive,
        default=int(env("TURNKEEPER_MAX_DB_MIB", "0")) or None,
        help="a quota on the database size; past it commands fail with store_full "
        "(env TURNKEEPER_MAX_DB_MIB; default: none)",
    )
    serve.add_argument(
        "--no-peer-narrator",
        action="store_true",
        default=env("TURNKEEPER_NO_PEER_NARRATOR") == "1",
        help="peers with the daemon's own uid need a token too (env TURNKEEPER_NO_PEER_NARRATOR=1)",
    )
    serve.add_argument(
        "--log-format",
        choices=("auto", "console", "json"),
        default=env("TURNKEEPER_LOG_FORMAT", "auto"),
        help="console on a terminal, JSON otherwise (env TURNKEEPER_LOG_FORMAT)",
    )
    _plugin_flags(serve)

    plugins = sub.add_parser(
        "plugins", help="load plugins as serve would and list them, with what failed and why"
    )
    _plugin_flags(plugins)
    plugins.add_argument("--json", action="store_true", help="machine-readable output")

    watch = sub.add_parser("watch", help="show a combat's live initiative order")
    watch.add_argument("combat")
    watch.add_argument(
        "--socket",
        type=Path,
        default=Path(env("TURNKEEPER_SOCKET") or default_socket()),
        help="the daemon's Unix socket (env TURNKEEPER_SOCKET)",
    )
    watch.add_argument("--tcp", type=_tcp, help="connect over TCP to HOST:PORT instead")
    watch.add_argument(
        "--token",
        default=env("TURNKEEPER_TOKEN"),
        help="a token (env TURNKEEPER_TOKEN); without one, the socket's own uid is narrator",
    )
    watch.add_argument("--once", action="store_true", help="print the board once and exit")
    watch.add_argument(
        "--locale",
        default=env("TURNKEEPER_LOCALE", "en"),
        help="the board's language: en or pt-BR (env TURNKEEPER_LOCALE)",
    )

    token = sub.add_parser("token", help="manage access tokens")
    token.add_argument(
        "--data-dir",
        type=Path,
        default=Path(env("TURNKEEPER_DATA_DIR") or default_data_dir()),
        help="the daemon's data directory (env TURNKEEPER_DATA_DIR)",
    )
    actions = token.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="make a token and print its secret once")
    add.add_argument("role", choices=("narrator", "player", "observer", "bridge"))
    add.add_argument("--user", help="the user id a player token is bound to")
    add.add_argument("--narrator", action="store_true", help="a bridge that may act as narrator")
    actions.add_parser("list", help="list tokens (never their secrets)")
    revoke = actions.add_parser("revoke", help="revoke a token by id")
    revoke.add_argument("id")
    return parser


def _token(args: argparse.Namespace) -> int:
    from .auth import AuthError, Tokens

    tokens = Tokens(args.data_dir)
    if args.action == "add":
        try:
            record, secret = tokens.add(args.role, args.user, narrator=args.narrator)
        except AuthError as e:
            print(f"turnkeeper: {e.field}: {e.message}", file=sys.stderr)
            return 2
        narrator = " narrator" if record.narrator else ""
        print(f"{record.id} {record.role}{narrator} {record.user or '-'}")
        print(secret)
        return 0
    if args.action == "list":
        for r in tokens.load():
            narrator = " narrator" if r.narrator else ""
            print(f"{r.id} {r.role}{narrator} {r.user or '-'}")
        return 0
    if tokens.revoke(args.id):
        return 0
    print(f"turnkeeper: no token {args.id}", file=sys.stderr)
    return 1


def _serve(args: argparse.Namespace) -> int:
    import anyio

    from .logs import configure
    from .server import Config, serve

    configure(args.log_format)
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
        max_db_pages=args.max_db_mib * PAGES_PER_MIB if args.max_db_mib else None,
        narrator_uid=None if args.no_peer_narrator else os.getuid(),
        plugins=_plugin_choice(args),
        ws_host=ws_host,
        ws_port=ws_port,
        page=args.http is not None,
    )
    anyio.run(serve, config)
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


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        demo.run(locale=args.locale)
        return 0
    if args.command == "token":
        return _token(args)
    if args.command == "watch":
        return _watch(args)
    if args.command == "plugins":
        return _plugins(args)
    return _serve(args)


def _watch(args: argparse.Namespace) -> int:
    from turnkeeper_sdk.client import CallError, Client

    from .watch import watch

    try:
        client = Client.tcp(*args.tcp) if args.tcp else Client.unix(args.socket)
    except OSError as e:
        print(f"turnkeeper: cannot connect: {e}", file=sys.stderr)
        return 1
    with client:
        try:
            hello = client.hello(
                args.token, name="turnkeeper watch", kind="observer", locale=args.locale
            )
            locale = hello["session"]["locale"]
            watch(client, args.combat, print, once=args.once, locale=locale)
        except CallError as e:
            print(f"turnkeeper: {e}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
