"""Writes the code made from the method table (:mod:`turnkeeper_sdk.methods`): the async
client's typed command methods (``aio/commands.py``) and the JavaScript client's method table
(``sdk/js/src/methods.js``). Run it after changing a command or the table::

    python -m turnkeeper_sdk.aio._generate          # rewrite both
    python -m turnkeeper_sdk.aio._generate --check  # exit 1, naming them, if either is stale

Both are rendered already in the shape ``ruff format`` and the JavaScript linters keep, so the
checked-in files are exactly a fresh render, which a test compares them to.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import textwrap
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from turnkeeper_engine import model
from turnkeeper_engine.commands import COMMANDS

from ..methods import (
    COMMAND_METHODS,
    QUERY_METHODS,
    SESSION_METHODS,
    TABLE_METHODS,
    WHO_TEXT,
    Method,
)

PYTHON_OUT = Path(__file__).with_name("commands.py")
JS_OUT = Path(__file__).resolve().parents[3] / "js" / "src" / "methods.js"
"""In a source checkout: sdk/src/turnkeeper_sdk/aio/ → sdk/js/src/methods.js."""

LINE = 100
"""The project's line length (ruff's ``line-length``)."""

RECORDS = (model.TurnRef, model.ActionSpec, model.Trigger, model.TriggerFacts)
"""Engine values a command method also takes as plain maps."""
ALIASES = {model.OptionValue: "OptionValue", model.Boundary: "Boundary"}
"""Types the methods name by their engine alias rather than spelled out."""


# Python -------------------------------------------------------------------------------------------


def _is_pairs(hint: Any) -> bool:
    """``tuple[tuple[str, OptionValue], ...]``: options and outcome values, as pairs."""
    args = typing.get_args(hint)
    return (
        typing.get_origin(hint) is tuple
        and len(args) == 2
        and args[1] is Ellipsis
        and typing.get_origin(args[0]) is tuple
    )


def python_type(hint: Any) -> str:
    """A field's type as a method parameter: tuples taken as any sequence, engine records also
    as plain maps, pairs also as a map."""
    for alias, name in ALIASES.items():
        if hint == alias:
            return name
    if hint is type(None):
        return "None"
    if hint in RECORDS:
        return f"{hint.__name__} | Mapping[str, Any]"
    if hint in (str, int, bool):
        return str(hint.__name__)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return f"Literal[{', '.join(json.dumps(a) for a in args)}]"
    if _is_pairs(hint):
        return "Mapping[str, OptionValue] | Sequence[tuple[str, OptionValue]]"
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return f"Sequence[{python_type(args[0])}]"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(python_type(a) for a in args)
    raise TypeError(f"no parameter type for {hint!r}: teach _generate.python_type it")


def _python_default(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if value is None or isinstance(value, bool | int) or value == ():
        return repr(value)
    raise TypeError(f"no literal for the default {value!r}: teach _generate._python_default it")


def _docstring(text: str, indent: str) -> list[str]:
    """``text``'s paragraphs as a docstring's lines, wrapped to the line length."""
    lines: list[str] = []
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n")]
    for number, paragraph in enumerate(paragraphs):
        first = indent + ('"""' if number == 0 else "")
        lines += textwrap.wrap(
            paragraph, LINE, initial_indent=first, subsequent_indent=indent, break_on_hyphens=False
        )
        lines.append("")
    lines.pop()
    if len(lines[-1]) + 3 <= LINE:
        lines[-1] += '"""'
    else:
        lines.append(indent + '"""')
    return lines


def _python_method(method: Method) -> list[str]:
    cls = COMMANDS[method.name]
    takes_combat = method.name != "create_combat"
    head = [f"    async def {method.name}(", "        self,"]
    if takes_combat:
        head.append("        combat: str,")
    head.append("        *,")
    for p in method.params:
        default = "" if p.required else f" = {_python_default(p.default)}"
        head.append(f"        {p.name}: {python_type(p.type)}{default},")
    head += [
        "        request_id: str | None = None,",
        "        as_user: str | None = None,",
        "    ) -> CommandResult:",
    ]
    doc = f"{inspect.cleandoc(cls.__doc__ or '')}\n\nWho: {WHO_TEXT[method.who]}."
    body = [
        "        return await self._command(",
        f'            "{method.name}",',
        f"            {'combat' if takes_combat else 'None'},",
        "            request_id,",
        "            as_user,",
    ]
    if method.params:
        body.append("            {")
        for p in method.params:
            value = f"_pairs({p.name})" if _is_pairs(p.type) else p.name
            body.append(f'                "{p.name}": {value},')
        body.append("            },")
    else:
        body.append("            {},")
    body.append("        )")
    return [*head, *_docstring(doc, "        "), *body]


PYTHON_HEAD = '''\
"""The async client's typed command methods: one per engine command, its keyword parameters the
command's fields (engine values or the same as plain maps), plus ``request_id`` and ``as_user``.

GENERATED by ``python -m turnkeeper_sdk.aio._generate`` from the method table
(:mod:`turnkeeper_sdk.methods`): do not edit; change the command and generate again.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from turnkeeper_engine.model import (
    ActionSpec,
    Boundary,
    OptionValue,
    Trigger,
    TriggerFacts,
    TurnRef,
)

from .types import CommandResult


def _pairs(
    value: Mapping[str, OptionValue] | Sequence[tuple[str, OptionValue]],
) -> Sequence[tuple[str, OptionValue]]:
    """``[name, value]`` pairs (how options travel), from a map or from pairs."""
    return list(value.items()) if isinstance(value, Mapping) else value


class CommandMethods(ABC):
    """A method per engine command; the client sends them through :meth:`_command`."""

    @abstractmethod
    async def _command(
        self,
        name: str,
        combat: str | None,
        request_id: str | None,
        as_user: str | None,
        fields: dict[str, Any],
    ) -> CommandResult:
        """Send the command ``name`` with its ``fields`` in its envelope; its result."""
'''


def python_commands() -> str:
    """The source of ``aio/commands.py``."""
    lines = PYTHON_HEAD.splitlines()
    for method in COMMAND_METHODS:
        lines += ["", *_python_method(method)]
    return "\n".join(lines) + "\n"


# JavaScript ---------------------------------------------------------------------------------------


def _js_list(name: str, doc: str, methods: Sequence[Method]) -> list[str]:
    return [
        f"/** {doc} */",
        f"export const {name} = Object.freeze([",
        *(f'  "{m.name}",' for m in methods),
        "]);",
        "",
    ]


def js_methods() -> str:
    """The source of ``sdk/js/src/methods.js``."""
    lines = [
        "// The protocol's methods by wire name, GENERATED from the method table",
        "// (turnkeeper_sdk/methods.py) by `python -m turnkeeper_sdk.aio._generate`: do not edit.",
        "// The client makes one camelCase function of each; its tests check this list against a",
        "// live daemon's hello.",
        "",
        *_js_list(
            "SESSION_METHODS",
            "Session methods: the client says hello itself on every connection.",
            SESSION_METHODS,
        ),
        *_js_list(
            "QUERY_METHODS",
            "Queries and subscriptions: they read, and take no `request_id`.",
            QUERY_METHODS,
        ),
        *_js_list(
            "TABLE_METHODS",
            "Tables and their tokens: the operator's, and a hosting bridge's; no `request_id`.",
            TABLE_METHODS,
        ),
        *_js_list(
            "COMMAND_METHODS",
            "Engine commands: each carries a `request_id` (filled in when absent).",
            COMMAND_METHODS,
        ),
        "/** Every method, by wire name. */",
        "export const METHODS = Object.freeze([",
        "  ...SESSION_METHODS,",
        "  ...QUERY_METHODS,",
        "  ...TABLE_METHODS,",
        "  ...COMMAND_METHODS,",
        "]);",
        "",
        "/**",
        " * A wire name as the client's function name: `end_turn` → `endTurn`.",
        " * @param {string} name",
        " * @returns {string}",
        " */",
        "export function camelCase(name) {",
        "  return name.replace(/_([a-z])/g, (_, letter) => letter.toUpperCase());",
        "}",
    ]
    return "\n".join(lines) + "\n"


# Writing ------------------------------------------------------------------------------------------


OUTPUTS = ((PYTHON_OUT, python_commands), (JS_OUT, js_methods))


def main(argv: Sequence[str] | None = None) -> int:
    """Write the generated files, or with ``--check`` name the stale ones (exit 1)."""
    parser = argparse.ArgumentParser(prog="python -m turnkeeper_sdk.aio._generate")
    parser.add_argument("--check", action="store_true", help="only say whether they are stale")
    args = parser.parse_args(argv)
    stale = [path for path, render in OUTPUTS if path.read_text() != render()]
    if args.check:
        for path in stale:
            print(f"{path} is stale: run python -m turnkeeper_sdk.aio._generate", file=sys.stderr)
        return 1 if stale else 0
    for path, render in OUTPUTS:
        path.write_text(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
