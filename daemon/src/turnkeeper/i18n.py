"""Turnkeeper in the table's language: English and Brazilian Portuguese, from gettext catalogues.

Every text is written once, in English, in the source: an error's message template
(``Rejected``, ``RequestError``, ``WireError``… each with its named arguments), a narrated
sentence (``narrate``), a label of the table view (``t("…")`` in ``web/*.js``). Babel extracts
them into ``locale/messages.pot``; each language has ``locale/<ll_CC>/LC_MESSAGES/turnkeeper.po``
beside it, compiled into ``turnkeeper.mo`` (by the build, or ``compile`` below in a checkout) and
read with the standard library's ``gettext`` at first use (once per locale): Babel is needed
only to maintain the catalogues, never at run time. A text missing from a catalogue is shown in
English. Rule terms passed as arguments (an action type, a phase, a reason…) are
translated too: see ``TERMS``.

Maintenance, from the repository root (docs/localization.md)::

    python -m turnkeeper.i18n update   # re-extract messages.pot, merge it into every .po, compile
    python -m turnkeeper.i18n compile  # compile every .po into its .mo (after editing a .po)
    python -m turnkeeper.i18n check    # exit 1 if a catalogue is stale or a translation missing
    python -m turnkeeper.i18n init fr  # start a new language's .po from messages.pot
"""

from __future__ import annotations

import argparse
import gettext as _gettext
import io
import string
import sys
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from turnkeeper_engine.errors import RuleError, TemplatedError
from turnkeeper_engine.model import OptionValue

from .mo import compile_catalogues

if TYPE_CHECKING:
    from babel.messages.catalog import Catalog

SUPPORTED: tuple[str, ...] = ("en", "pt-BR")
"""The locales Turnkeeper speaks, as BCP 47 tags; the first is the source language."""
DEFAULT = SUPPORTED[0]
DOMAIN = "turnkeeper"
LOCALE_DIR = Path(__file__).parent / "locale"
TEMPLATE = LOCALE_DIR / "messages.pot"

TERMS: Mapping[str, Mapping[str, str]] = {
    "action_type": {
        "standard": "standard",
        "movement": "movement",
        "move": "move",
        "full": "full-round",
        "free": "free",
        "reaction": "reaction",
    },
    # The kinds of action the bundled rulesets know (their catalogues); a kind of another's
    # is shown as it is.
    "action_kind": {
        "attack": "attack",
        "power": "power",
        "grab": "grab",
        "escape": "escape",
        "help": "help",
        "use_item": "use an item",
        "move": "move",
        "dash": "dash",
        "stand": "stand up",
        "cast": "cast a spell",
        "aid_another": "aid another",
        "total_defense": "total defense",
        "draw_weapon": "draw a weapon",
        "stand_up": "stand up",
        "charge": "charge",
        "full_attack": "full attack",
        "run": "run",
        "withdraw": "withdraw",
        "refocus": "refocus",
        "speak": "speak",
        "drop_item": "drop an item",
    },
    "phase": {
        "none": "no combat",
        "setup": "setup",
        "initiative": "initiative",
        "bonus_round": "bonus round",
        "rounds": "rounds",
        "ended": "over",
    },
    "reason": {
        "ended": "end of turn",
        "timer": "time's up",
        "defeated": "defeated",
        "removed": "left the combat",
        "combat_ended": "end of combat",
        "held_turn": "held turn",
        "delay_floor": "delay floor",
        "readied_action": "readied action",
        "refocus": "Refocus",
        "actor_out": "the actor is out",
        "answered": "all answered",
        "deadline": "deadline passed",
        "narrator": "narrator's decision",
        "inactive": "out of action",
    },
    "condition": {"surprised": "surprised", "custom": "custom"},
    "status": {"active": "active", "defeated": "defeated", "removed": "removed"},
    "role": {
        "narrator": "narrator",
        "player": "player",
        "observer": "observer",
        "bridge": "bridge",
    },
    "reroll": {"edge": "edge", "trouble": "trouble"},
    "timer_action": {"hold": "hold the turn", "end_turn": "end the turn"},
    # What an undo takes back: a command, by its method name.
    "undone": {
        "create_combat": "the combat's creation",
        "add_combatant": "the combatant's arrival",
        "remove_combatant": "the combatant's removal",
        "defeat_combatant": "the defeat",
        "revive_combatant": "the revival",
        "reveal_combatant": "the reveal",
        "mark_surprised": "the Surprised mark",
        "roll_initiative": "the initiative roll",
        "order_ties": "the order of the ties",
        "reorder_group": "the group's order",
        "start_combat": "the start of the combat",
        "end_turn": "the end of the turn",
        "declare_action": "the action",
        "hold": "the hold",
        "take_held_turn": "the held turn's timing",
        "reserve": "the reserved action",
        "refocus": "the Refocus",
        "announce_trigger": "the trigger",
        "claim_reaction": "the reaction",
        "pass_reaction": "the passed reaction",
        "close_window": "the closing of the reaction window",
        "finish_reaction": "the end of the reaction",
        "apply_condition": "the condition",
        "remove_condition": "the condition's removal",
        "surprise": "the surprise",
        "record_outcome": "the recorded outcome",
        "disable_plugin": "the plugin's disabling",
        "enable_plugin": "the plugin's enabling",
        "set_turn_timer": "the turn timer's change",
        "tick": "the passing of time",
    },
}
"""Rule words the engine puts in its events and errors as protocol values, by kind, each with
its English word (``full`` reads "full-round", ``combat_ended`` "end of combat"). Each is in
the catalogues with its kind as the message context. A template argument named after a kind
(``action_type``), or ending in ``_`` and the kind (``needed_action_type``), is shown in the
locale's word; a value the catalogue lacks is shown as it is."""

# Where each extracted message is, and how Babel finds it: the function names whose argument
# is a message, with the (1-based) position of that argument.
SOURCES: tuple[tuple[str, str], ...] = (
    ("engine/src/turnkeeper_engine", "**/*.py"),
    ("sdk/src/turnkeeper_sdk", "wire.py"),
    # What the bundled bot types (its actions' descriptions, its triggers' words).
    ("sdk/src/turnkeeper_sdk", "policy.py"),
    ("daemon/src/turnkeeper", "**/*.py"),
    ("daemon/src/turnkeeper/web", "*.js"),
    # The bundled plugins; a third party's outcomes are not in the catalogues: told in English.
    ("plugins", "*/src/**/*.py"),
)
PYTHON_KEYWORDS: Mapping[str, tuple[int, ...]] = {
    # Errors: the template follows the code (PlainError has no code).
    "Rejected": (2,),
    "reject": (2,),
    "ProtocolError": (2,),
    "RequestError": (2,),
    "RefusedError": (2,),
    "AuthError": (2,),
    "StoreError": (2,),
    "TokenFileError": (1,),
    "UnsafePathError": (1,),
    "SocketPathError": (1,),
    "WireError": (2,),
    "PlainError": (1,),
    # The daemon's own texts.
    "N_": (1,),
    "say": (1,),
    "message": (2,),
    "gettext": (2,),
    "ngettext": (2, 3),
    # The bundled plugins' outcomes (turnkeeper_sdk.outcome): the kind, then the template.
    "outcome": (2,),
}
JS_KEYWORDS: Mapping[str, tuple[int, ...]] = {"t": (1,)}
COMMENT_TAG = "TRANSLATORS:"
"""A comment starting with this, just above a message, is copied into the catalogues."""


def N_(template: str) -> str:  # noqa: N802 - gettext's own name for it
    """Mark a template kept as data, to be translated where it is shown (``message``): the
    mark is what extraction finds."""
    return template


def negotiate(tag: str | None) -> str:
    """The supported locale for a BCP 47 tag (``"pt-BR"``, ``"pt_br"``, ``"en-US"``…): an exact
    match, else the first of the same language (``"pt"``, ``"pt-PT"`` → ``"pt-BR"``), else
    English."""
    if not tag:
        return DEFAULT
    wanted = tag.strip().replace("_", "-").lower()
    for locale in SUPPORTED:
        if locale.lower() == wanted:
            return locale
    language = wanted.split("-")[0]
    for locale in SUPPORTED:
        if locale.lower().split("-")[0] == language:
            return locale
    return DEFAULT


def _po_path(locale: str) -> Path:
    return LOCALE_DIR / locale.replace("-", "_") / "LC_MESSAGES" / f"{DOMAIN}.po"


class CatalogueMissingError(RuntimeError):
    """A supported locale's ``.mo`` is not there: a checkout whose catalogues were never
    compiled, or a broken install."""


@cache
def _translations(locale: str) -> _gettext.NullTranslations:
    """The compiled catalogue of a supported locale; English needs none."""
    if locale == DEFAULT:
        return _gettext.NullTranslations()
    try:
        return _gettext.translation(DOMAIN, LOCALE_DIR, languages=[locale.replace("-", "_")])
    except FileNotFoundError:
        raise CatalogueMissingError(
            f"no compiled {locale} catalogue in {LOCALE_DIR}: in a checkout, run "
            "python -m turnkeeper.i18n compile"
        ) from None


def gettext(locale: str, msgid: str) -> str:
    """``msgid`` in ``locale``, or as it is if the catalogue has no translation."""
    return _translations(negotiate(locale)).gettext(msgid)


def ngettext(locale: str, singular: str, plural: str, n: int) -> str:
    """The form of a message for the count ``n``, in ``locale``, by the locale's plural rule."""
    return _translations(negotiate(locale)).ngettext(singular, plural, n)


def term(locale: str, kind: str, value: str) -> str:
    """A rule word of ``TERMS`` in ``locale`` (``term("pt-BR", "action_type", "standard")`` →
    ``"padrão"``, ``term("en", "action_type", "full")`` → ``"full-round"``), or ``value`` as it
    is if it is not a word of ``kind``."""
    locale = negotiate(locale)
    if locale == DEFAULT:
        return TERMS.get(kind, {}).get(value, value)
    return _translations(locale).pgettext(kind, value)


def _kind(name: str) -> str | None:
    """The kind of rule word an argument called ``name`` holds, if any."""
    for kind in TERMS:
        if name == kind or name.endswith(f"_{kind}"):
            return kind
    return None


def message(
    locale: str,
    template: str,
    args: Mapping[str, OptionValue] | tuple[tuple[str, OptionValue], ...] = (),
) -> str:
    """``template`` translated into ``locale`` and filled in with ``args`` (rule words among
    them translated too, see ``TERMS``): an error's arguments, a narrated sentence's, or a
    plugin's outcome's (any plain value)."""
    values = dict(args)
    locale = negotiate(locale)
    for name, value in values.items():
        kind = _kind(name)
        if kind is not None and isinstance(value, str):
            values[name] = term(locale, kind, value)
    return (template if locale == DEFAULT else gettext(locale, template)).format(**values)


def localize(error: RuleError | TemplatedError, locale: str) -> str:
    """The message of an error (the engine's, a request's, the wire codec's, the store's…) in
    ``locale``; its ``code`` and ``field`` never change."""
    if negotiate(locale) == DEFAULT:
        return error.message
    return message(locale, error.template, error.args)


def catalogue(locale: str) -> dict[str, str]:
    """Every translated message of ``locale`` as ``{msgid: translation}``, for the table view;
    a rule word is keyed ``kind + "\\x04" + word`` (gettext's context separator). English has
    no messages to translate (a page shows each msgid as it is), only the rule words, whose
    English labels are ``TERMS``' own: every locale's catalogue has them all."""
    locale = negotiate(locale)
    words = {f"{kind}\x04{w}": term(locale, kind, w) for kind, ws in TERMS.items() for w in ws}
    if locale == DEFAULT:
        return words
    # The .mo holds only translated, non-fuzzy messages, keyed as gettext looks them up (a
    # context and its separator first); a plural's forms are keyed (msgid, n) and left out.
    # `_catalog` is GNUTranslations' own table, there since Python 2, though not in typeshed.
    messages: dict[object, str] = vars(_translations(locale))["_catalog"]
    return words | {key: text for key, text in messages.items() if isinstance(key, str) and key}


# Maintenance: extraction and catalogue updates (Babel's messages tools) ----------------------


def repository() -> Path:
    """The checkout this module runs from (the tools need the sources, not an installed copy)."""
    return Path(__file__).resolve().parents[3]


def source_files(root: Path) -> Iterator[Path]:
    """Every file messages are extracted from, in a stable order."""
    for folder, pattern in SOURCES:
        yield from sorted(p for p in (root / folder).glob(pattern) if p.is_file())


def extract(root: Path) -> Catalog:
    """Every message of the sources under ``root``, and the rule words of ``TERMS``."""
    from babel.messages.catalog import Catalog
    from babel.messages.extract import extract_from_file

    from . import __version__

    found = Catalog(
        project="Turnkeeper",
        version=__version__,
        domain=DOMAIN,
        header_comment=(
            "# Turnkeeper's messages, extracted from its sources by\n"
            "# python -m turnkeeper.i18n update: edit the sources, not this file.\n#"
        ),
        fuzzy=False,
    )
    for path in source_files(root):
        javascript = path.suffix == ".js"
        where = path.relative_to(root).as_posix()
        for lineno, msgid, comments, context in extract_from_file(
            "javascript" if javascript else "python",
            path,
            keywords=JS_KEYWORDS if javascript else PYTHON_KEYWORDS,
            comment_tags=(COMMENT_TAG,),
            strip_comment_tags=True,
        ):
            found.add(msgid, locations=[(where, lineno)], auto_comments=comments, context=context)
    here = Path(__file__).resolve().relative_to(root).as_posix()
    for kind, words in TERMS.items():
        for word in words:
            found.add(word, locations=[(here, 0)], context=kind)
    return found


def keys(catalog: Catalog) -> set[tuple[str | None, str]]:
    """The messages of a catalogue, as ``(context, msgid)`` (a plural's msgid is its singular):
    what staleness is judged on."""
    return {(m.context, m.id if isinstance(m.id, str) else m.id[0]) for m in catalog if m.id}


def placeholders(text: str) -> list[tuple[str, str, str]]:
    """The ``{name!conversion:spec}`` fields of a template, sorted, as (name, conversion, spec)."""
    return sorted(
        (name, conversion or "", spec or "")
        for _, name, spec, conversion in string.Formatter().parse(text)
        if name is not None
    )


def _write(path: Path, catalog: Catalog) -> bool:
    """Write a catalogue in the repository's layout (sorted, no line numbers, so moving code
    does not touch it); False if the file already says the same."""
    from babel.messages.pofile import write_po

    out = io.BytesIO()
    write_po(out, catalog, width=100, sort_output=True, include_lineno=False, ignore_obsolete=True)
    text = out.getvalue()
    if path.exists() and _without_dates(path.read_bytes()) == _without_dates(text):
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text)
    return True


def _without_dates(po: bytes) -> bytes:
    return b"\n".join(
        line
        for line in po.splitlines()
        if not line.startswith((b'"POT-Creation-Date:', b'"PO-Revision-Date:'))
    )


def _load(path: Path, locale: str | None = None) -> Catalog:
    from babel.messages.pofile import read_po

    with path.open("rb") as f:
        return read_po(f, locale=locale, domain=DOMAIN)


def translated_locales() -> list[str]:
    """The supported locales that have a catalogue (all but the source language)."""
    return [locale for locale in SUPPORTED if locale != DEFAULT]


def compile_all() -> list[Path]:
    """Compile every locale's ``.po`` into the ``.mo`` beside it, which the daemon reads."""
    _translations.cache_clear()
    return compile_catalogues(LOCALE_DIR, LOCALE_DIR)


def update(root: Path) -> list[Path]:
    """Re-extract ``messages.pot`` and merge it into each locale's ``.po`` (new messages come
    in untranslated, gone ones are dropped), then compile them. Returns the files that changed."""
    template = extract(root)
    changed = [TEMPLATE] if _write(TEMPLATE, template) else []
    for locale in translated_locales():
        path = _po_path(locale)
        po = _load(path, locale.replace("-", "_"))
        # No fuzzy guesses: a near-miss translation of another message is worse than none.
        po.update(template, no_fuzzy_matching=True, update_creation_date=False)
        if _write(path, po):
            changed.append(path)
    compile_all()
    return changed


def init(locale: str) -> Path:
    """Start the catalogue of a new locale (BCP 47 tag) from ``messages.pot``."""
    from babel.messages.catalog import Catalog

    path = _po_path(locale)
    if path.exists():
        raise FileExistsError(path)
    template = _load(TEMPLATE)
    po = Catalog(
        locale=locale.replace("-", "_"),
        domain=DOMAIN,
        project="Turnkeeper",
        version=template.version,
        header_comment=(
            f"# Turnkeeper's messages in {locale}: docs/localization.md says how to keep them\n"
            "# and lists the rule terms each language uses.\n#"
        ),
        fuzzy=False,
    )
    po.update(template, no_fuzzy_matching=True)
    _write(path, po)
    return path


def problems(root: Path) -> list[str]:
    """What keeps the catalogues from matching the sources: stale files, messages without a
    translation (or only a fuzzy one), translations whose placeholders differ from the
    original's. Empty when all is well."""
    found: list[str] = []
    wanted = keys(extract(root))
    if keys(_load(TEMPLATE)) != wanted:
        found.append(f"{TEMPLATE.name} is stale: run python -m turnkeeper.i18n update")
    for locale in translated_locales():
        po = _load(_po_path(locale), locale.replace("-", "_"))
        name = _po_path(locale).relative_to(LOCALE_DIR).as_posix()
        if keys(po) != wanted:
            found.append(f"{name} is stale: run python -m turnkeeper.i18n update")
        for m in po:
            if not m.id:
                continue
            ids = [m.id] if isinstance(m.id, str) else list(m.id)
            strings = [m.string] if isinstance(m.string, str) else list(m.string or ())
            label = f"{name}: {m.id!r}" + (f" ({m.context})" if m.context else "")
            if m.fuzzy or not all(strings):
                found.append(f"{label} has no translation")
                continue
            for text in strings:
                if placeholders(text) != placeholders(ids[-1]):
                    found.append(f"{label}: the translation's placeholders differ")
    return found


def _main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m turnkeeper.i18n", description="Maintain Turnkeeper's translations."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("update", help="re-extract messages.pot, merge it into every .po, compile")
    sub.add_parser("check", help="exit 1 if a catalogue is stale or a translation missing")
    sub.add_parser("compile", help="compile every .po into the .mo the daemon reads")
    start = sub.add_parser("init", help="start a new language's catalogue from messages.pot")
    start.add_argument("locale", help="BCP 47 tag, e.g. fr or es-AR")
    args = parser.parse_args(list(argv) if argv is not None else None)
    root = repository()
    if args.command == "update":
        for path in update(root):
            print(f"updated {path.relative_to(root)}")
        return 0
    if args.command == "compile":
        for path in compile_all():
            print(f"compiled {path.relative_to(root)}")
        return 0
    if args.command == "init":
        print(f"created {init(args.locale).relative_to(root)}")
        return 0
    found = problems(root)
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(_main())
