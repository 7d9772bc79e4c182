"""The clients stay true to the protocol's method table: the async client has a method for every
protocol method, each command method's keyword parameters exactly its command's fields; the
generated code is what the table generates now; the JS client's typings take each command's
fields."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest

from turnkeeper.methods import METHODS
from turnkeeper_engine.commands import COMMANDS
from turnkeeper_sdk.aio import AsyncClient, _generate
from turnkeeper_sdk.methods import METHODS as SDK_METHODS

JS_SRC = Path(__file__).resolve().parent.parent / "sdk" / "js" / "src"
REGENERATE = "stale: run python -m turnkeeper_sdk.aio._generate"

ENVELOPE = ("request_id", "as_user")
"""Keyword parameters every command method has besides its command's fields."""

COMMAND_METHODS = sorted(name for name, method in METHODS.items() if method.kind == "command")


def test_every_protocol_method_has_a_client_method() -> None:
    missing = [name for name in METHODS if not callable(getattr(AsyncClient, name, None))]
    assert missing == []


@pytest.mark.parametrize("name", COMMAND_METHODS)
def test_a_command_methods_keywords_are_its_commands_fields_with_their_defaults(
    name: str,
) -> None:
    parameters = list(inspect.signature(getattr(AsyncClient, name)).parameters.values())
    keywords = [p for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]
    fields = dataclasses.fields(COMMANDS[name])
    assert [p.name for p in keywords] == [f.name for f in fields] + list(ENVELOPE)
    for parameter, field in zip(keywords, fields, strict=False):
        if field.default is dataclasses.MISSING:
            assert parameter.default is inspect.Parameter.empty, field.name
        else:
            assert parameter.default == field.default, field.name
    assert all(p.default is None for p in keywords[len(fields) :])


@pytest.mark.parametrize("name", COMMAND_METHODS)
def test_a_command_method_names_its_combat_first_except_create_combat(name: str) -> None:
    parameters = inspect.signature(getattr(AsyncClient, name)).parameters.values()
    positional = [p.name for p in parameters if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    assert positional == (["self"] if name == "create_combat" else ["self", "combat"])


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_client_method_is_documented(name: str) -> None:
    assert (getattr(AsyncClient, name).__doc__ or "").strip()


def test_a_subscription_buffer_holds_at_least_one_event() -> None:
    async def never() -> Any:
        raise AssertionError("not connected in this test")

    with pytest.raises(ValueError, match="event_buffer must be at least 1"):
        AsyncClient(never, event_buffer=0)


# Generated from the method table, and checked against it --------------------------------------


def test_the_typed_command_methods_are_what_the_method_table_generates() -> None:
    assert _generate.PYTHON_OUT.read_text() == _generate.python_commands(), REGENERATE


def test_the_js_method_table_is_what_the_method_table_generates() -> None:
    assert JS_SRC.joinpath("methods.js").read_text() == _generate.js_methods(), REGENERATE


def test_the_generator_checks_what_it_wrote() -> None:
    assert _generate.main(["--check"]) == 0


def _typescript(hint: Any) -> str:
    """A field's type as index.d.ts writes it."""
    for alias, name in _generate.ALIASES.items():
        if hint == alias:
            return name
    simple = {str: "string", int: "number", bool: "boolean", type(None): "null"}
    if hint in simple:
        return simple[hint]
    if hint in _generate.RECORDS:
        return str(hint.__name__)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin is tuple and args[1:] == (Ellipsis,):
        return f"{_typescript(args[0])}[]"
    if origin is tuple:
        return f"[{', '.join(_typescript(a) for a in args)}]"
    assert origin in (typing.Union, types.UnionType), hint
    return " | ".join(_typescript(a) for a in args)


def _interfaces(typings: str) -> dict[str, tuple[str | None, dict[str, str]]]:
    """Each ``export interface`` of index.d.ts: what it extends, its fields as ``name`` or
    ``name?`` mapped to their types."""
    found: dict[str, tuple[str | None, dict[str, str]]] = {}
    for name, base, body in re.findall(
        r"^export interface (\w+)(?: extends (\w+))? \{\n(.*?)^\}", typings, flags=re.M | re.S
    ):
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        fields = dict(re.findall(r"^\s*(\w+\??): (.+);$", body, flags=re.M))
        found[name] = (base or None, fields)
    return found


def _fields_of(
    interfaces: dict[str, tuple[str | None, dict[str, str]]], name: str
) -> dict[str, str]:
    base, fields = interfaces[name]
    return {**(_fields_of(interfaces, base) if base else {}), **fields}


def _client_signatures(typings: str) -> dict[str, str]:
    """The JS Client's functions: each name and its params' declaration."""
    client = re.search(r"^export class Client \{\n(.*?)^\}", typings, flags=re.M | re.S)
    assert client, "no Client class in index.d.ts"
    return dict(re.findall(r"^  (\w+)\((.*)\): Promise<", client.group(1), flags=re.M))


def test_the_js_typings_have_a_function_for_every_method() -> None:
    functions = _client_signatures(JS_SRC.joinpath("index.d.ts").read_text())
    assert sorted(set(map(_camel, METHODS)) - set(functions)) == []


@pytest.mark.parametrize("name", COMMAND_METHODS)
def test_the_js_typings_of_a_command_are_its_fields_in_the_envelope(name: str) -> None:
    typings = JS_SRC.joinpath("index.d.ts").read_text()
    params = _client_signatures(typings)[_camel(name)]
    interface = re.fullmatch(r"params: (\w+)", params)
    assert interface, f"{name}: {params!r} does not name one params interface"
    expected = {"request_id?": "string", "as?": "string"}
    if name != "create_combat":
        expected["combat"] = "string"
    for param in SDK_METHODS[name].params:
        expected[param.name + ("" if param.required else "?")] = _typescript(param.type)
    assert _fields_of(_interfaces(typings), interface.group(1)) == expected


def _camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)
