"""The ``turnkeeper`` command."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from . import __version__, demo


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="turnkeeper", description="The combat clock for tabletop RPG encounters."
    )
    parser.add_argument("--version", action="version", version=f"turnkeeper {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="play the rule books' worked examples and narrate them")
    args = parser.parse_args(argv)
    if args.command == "demo":
        demo.run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
