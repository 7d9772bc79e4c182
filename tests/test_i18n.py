"""Localization: every text Turnkeeper gives people exists in English and Brazilian Portuguese.

The catalogues are extracted with Babel from the sources and must match them; every message has
a pt-BR translation with the same placeholders; every message is a template with arguments, never
an f-string, so it can be translated at all; the rule words are the pt-BR seed's.
"""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest
from babel.messages.pofile import read_po

from story import QueueDice, Story, player
from turnkeeper import i18n
from turnkeeper.combats import RequestError
from turnkeeper.demo import run
from turnkeeper.narrate import narrate
from turnkeeper_dnd3e_ready import Dnd3eReadyPlugin
from turnkeeper_engine import BUNDLED_RULES, RuleError, SeededDice, State, decide, evolve
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import ActionSpec, Phase, Predicate, Trigger
from turnkeeper_engine.plain import PlainError, from_plain
from turnkeeper_sdk import wire
from turnkeeper_sdk.testing import Table

ROOT = Path(__file__).resolve().parent.parent
PO = ROOT / "daemon/src/turnkeeper/locale/pt_BR/LC_MESSAGES/turnkeeper.po"
POT = ROOT / "daemon/src/turnkeeper/locale/messages.pot"
RUNTIME_API = {"message", "gettext", "ngettext"}
"""Keywords of the translating functions themselves: they are called with templates kept as
data (marked with ``N_`` where they are written), so their argument need not be a literal."""


def _pt_br() -> typing.Any:
    with PO.open("rb") as f:
        return read_po(f, locale="pt_BR")


# (a) The catalogues are complete and up to date -------------------------------------------------


def test_every_message_of_the_sources_has_a_pt_br_translation_and_no_catalogue_is_stale() -> None:
    extracted = i18n.extract(ROOT)
    wanted = i18n.keys(extracted)
    with POT.open("rb") as f:
        assert i18n.keys(read_po(f)) == wanted, (
            "messages.pot is stale: python -m turnkeeper.i18n update"
        )
    po = _pt_br()
    assert i18n.keys(po) == wanted, "turnkeeper.po is stale: python -m turnkeeper.i18n update"
    untranslated = [
        (m.context, m.id) for m in po if m.id and (m.fuzzy or not m.string or not all(m.string))
    ]
    assert untranslated == []
    assert i18n.problems(ROOT) == []


def test_extraction_reaches_every_layer_the_texts_are_written_in() -> None:
    """A keyword missing from the extraction would leave a layer out unnoticed: each has texts."""
    found = {m.id: {where for where, _ in m.locations} for m in i18n.extract(ROOT) if m.id}
    assert found["no combatant {id!r}"] == {"engine/src/turnkeeper_engine/decide/checks.py"}
    assert "engine/src/turnkeeper_engine/plain.py" in found["must be a map"]
    assert found["method must be a string"] == {"sdk/src/turnkeeper_sdk/wire.py"}
    assert found["no combat {id!r}"] == {"daemon/src/turnkeeper/combats/registry.py"}
    assert found["{name} holds the turn."] == {"daemon/src/turnkeeper/narrate.py"}
    assert "daemon/src/turnkeeper/web/render.js" in found["Bonus round"]
    assert found["{name} is unaware: Surprised without a check."] == {
        "plugins/surprise/src/turnkeeper_surprise/__init__.py"
    }
    sources = {where for places in found.values() for where in places}
    assert {"daemon/src/turnkeeper/auth.py", "daemon/src/turnkeeper/store.py"} <= sources


# (b) Translations keep the placeholders -----------------------------------------------------------


def test_every_pt_br_translation_keeps_the_placeholders_of_its_message() -> None:
    for m in _pt_br():
        if not m.id:
            continue
        ids = [m.id] if isinstance(m.id, str) else list(m.id)
        strings = [m.string] if isinstance(m.string, str) else list(m.string)
        for text in strings:
            assert i18n.placeholders(text) == i18n.placeholders(ids[-1]), (m.id, text)


# (c) Messages are templates, never f-strings ------------------------------------------------------


def _template_positions() -> dict[str, int]:
    """Each call whose argument is a message, by name, with the 0-based argument index."""
    return {
        name: positions[0] - 1
        for name, positions in i18n.PYTHON_KEYWORDS.items()
        if name not in RUNTIME_API
    }


def _callee(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def _python_sources() -> list[Path]:
    return [p for p in i18n.source_files(ROOT) if p.suffix == ".py"]


def _relayed(template: ast.expr, within: ast.FunctionDef | None, positions: dict[str, int]) -> bool:
    """A template that is not written here but passed on: another error's (``e.template``), or
    the parameter of a helper that is itself checked where it is called (``reject``)."""
    if isinstance(template, ast.Attribute) and template.attr == "template":
        return True
    return (
        isinstance(template, ast.Name)
        and within is not None
        and within.name in positions
        and template.id in {a.arg for a in within.args.args}
    )


def _calls(tree: ast.AST) -> list[tuple[ast.Call, ast.FunctionDef | None]]:
    """Every call, with the function it is written in."""
    found: list[tuple[ast.Call, ast.FunctionDef | None]] = []

    def visit(node: ast.AST, within: ast.FunctionDef | None) -> None:
        if isinstance(node, ast.FunctionDef):
            within = node
        if isinstance(node, ast.Call):
            found.append((node, within))
        for child in ast.iter_child_nodes(node):
            visit(child, within)

    visit(tree, None)
    return found


def test_every_message_is_a_string_literal_template() -> None:
    """Rejected, RequestError, WireError… and narrate's say: the message is a literal (its pieces
    are named arguments), so Babel extracts it and a catalogue can translate it."""
    positions = _template_positions()
    offenders = []
    for path in _python_sources():
        for node, within in _calls(ast.parse(path.read_text(), str(path))):
            name = _callee(node)
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if name == "RuleError" and path.name != "errors.py":
                offenders.append(f"{where}: RuleError(...) instead of Rejected")
            if name not in positions or len(node.args) <= positions[name]:
                continue
            template = node.args[positions[name]]
            literal = isinstance(template, ast.Constant) and isinstance(template.value, str)
            if not literal and not _relayed(template, within, positions):
                offenders.append(f"{where}: {name}(...)")
    assert offenders == []


def test_every_templated_error_class_is_an_extraction_keyword() -> None:
    classes: dict[str, set[str]] = {}
    for path in _python_sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                classes[node.name] = {
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
                }
    # Templated directly, or through the error family (ProtocolError and its members).
    defined = {"TemplatedError"}
    while grown := {name for name, bases in classes.items() if bases & defined} - defined:
        defined |= grown
    defined.discard("TemplatedError")
    assert defined >= {
        "ProtocolError",
        "RefusedError",
        "Rejected",
        "PlainError",
        "WireError",
        "RequestError",
        "AuthError",
        "StoreError",
    }
    assert defined <= set(_template_positions())


def test_the_engine_and_the_sdk_never_translate() -> None:
    """They only write templates: gettext and Babel are the daemon's business."""
    for root in ("engine/src", "sdk/src"):
        for path in sorted((ROOT / root).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    modules = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    modules = [node.module or ""]
                else:
                    continue
                for module in modules:
                    assert module.split(".")[0] not in ("babel", "gettext"), path
                    assert not module.startswith("turnkeeper.i18n"), path


def test_an_error_keeps_its_english_message_code_and_field_beside_template_and_args() -> None:
    error = wire.WireError("invalid_message", "error.{name} must be a string", "x", name="code")
    assert (error.code, error.message, error.field) == (
        "invalid_message",
        "error.code must be a string",
        "x",
    )
    assert (error.template, error.args) == ("error.{name} must be a string", (("name", "code"),))
    assert str(error) == "invalid_message: error.code must be a string"
    decoding = PlainError("must have {count} items", "turn", count=2)
    assert (str(decoding), repr(decoding)) == (
        "turn: must have 2 items",
        "PlainError('must have 2 items')",
    )
    # A RuleError compares on what was refused, and one written out in full is its own template.
    written = RuleError("invalid_params", "100% {sure}", "as")
    assert written.template.format() == written.message
    assert written == RuleError("invalid_params", "100% {sure}", "as", "other", (("a", 1),))


# (d) Choosing the locale -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tag", "locale"),
    [
        ("pt-BR", "pt-BR"),
        ("pt_BR", "pt-BR"),
        ("PT-br", "pt-BR"),
        ("pt", "pt-BR"),
        ("pt-PT", "pt-BR"),
        ("en", "en"),
        ("en-US", "en"),
        ("de-DE", "en"),
        ("", "en"),
        (None, "en"),
    ],
)
def test_negotiate_matches_exactly_then_by_language_else_english(
    tag: str | None, locale: str
) -> None:
    assert i18n.negotiate(tag) == locale
    assert locale in i18n.SUPPORTED


def test_a_message_missing_from_the_catalogue_is_shown_in_english() -> None:
    assert i18n.gettext("pt-BR", "a text no catalogue has") == "a text no catalogue has"
    assert i18n.message("pt-BR", "{n} of {m}", {"n": 1, "m": 2}) == "1 of 2"
    assert i18n.ngettext("pt-BR", "one thing", "{n} things", 2) == "{n} things"
    assert i18n.term("pt-BR", "action_type", "swift") == "swift"


def test_the_page_catalogue_holds_translations_and_rule_words_by_kind() -> None:
    page = i18n.catalogue("pt")
    assert page["Bonus round"] == "Rodada Bônus"
    assert page["action_type\x04standard"] == "padrão"
    english = i18n.catalogue("en")
    assert english["action_kind\x04use_item"] == "use an item"
    assert english["action_type\x04full"] == "full-round"
    assert all("\x04" in key for key in english), "English has only rule words' labels"


# (e) Narration in pt-BR speaks with the seed's rule words ---------------------------------------


def _told(story: Story, locale: str) -> list[str]:
    state, lines = State(), []
    for event in story.log:
        state = evolve(state, event)
        line = narrate(event, state, locale, rules=BUNDLED_RULES)
        if line:
            lines.append(line.strip())
    return lines


def test_narrated_seed_bonus_round_and_held_turn_read_as_the_pt_br_seed() -> None:
    """The bank robbery: Homem-Aranha and Doutor Octopus get the Rodada Bônus with FANTÁSTICO
    checks; Dentes-de-Sabre aguarda o turno and acts after Wolverine (Aguardar um Turno)."""
    s = Story("marvel")
    s.add("spidey", "Homem-Aranha", controller="peter", player_character=True, init_mod=3)
    s.add("sabretooth", "Dentes-de-Sabre", init_mod=2)
    s.add("wolverine", "Wolverine", controller="logan", player_character=True, init_mod=3)
    s.add("ock", "Doutor Octopus", init_mod=3)
    s.do(c.RollInitiative("spidey", faces=(6, 5, 1)), player("peter"))
    s.roll("sabretooth", 5, 4, 6)
    s.do(c.RollInitiative("wolverine", faces=(4, 5, 3)), player("logan"))
    s.roll("ock", 3, 2, 1)
    s.do(c.StartCombat())
    s.run_round()
    s.end_turn()  # Homem-Aranha
    s.do(c.Hold(s.turn))  # Dentes-de-Sabre
    s.do(c.TakeHeldTurn("sabretooth", "after", "wolverine"))
    told = _told(s, "pt-BR")
    assert (
        "Homem-Aranha: Iniciativa d616 [6, 5, M] +3 = 20, FANTÁSTICO (dados rolados por peter)"
        in told
    )
    assert (
        "Ordem de Iniciativa: Homem-Aranha, Dentes-de-Sabre, Wolverine, Doutor Octopus. "
        "Rodada Bônus: Homem-Aranha, Doutor Octopus."
    ) in told
    assert "-- Rodada Bônus --" in told
    assert "-- Rodada 1 --" in told
    assert "Dentes-de-Sabre aguarda o turno." in told
    assert "Dentes-de-Sabre vai agir logo depois de Wolverine." in told
    # The same story in English is the narrated log as it always was.
    assert "Sabretooth" not in " ".join(told)
    assert "Dentes-de-Sabre holds the turn." in _told(s, "en")


def test_narrated_seed_reserved_punch_reads_as_the_pt_br_seed() -> None:
    """Reservar uma Ação: the Capitão América reserves his ação padrão; the trigger (gatilho) is
    met and he reacts (reação) before the agent's move ends."""
    s = Story("marvel")
    s.add("cap", "Capitão América", controller="steve", player_character=True, init_mod=3)
    s.add("agent", "Agente da Hydra", init_mod=1)
    s.do(c.RollInitiative("cap", faces=(6, 5, 4)), player("steve"))
    s.roll("agent", 3, 3, 3)
    s.do(c.StartCombat())
    corner = Trigger(
        "qualquer um que aparecer no corredor atrás dele",
        Predicate(events=("move",), zones=("corredor",)),
    )
    punch = ActionSpec("attack", description="soco")
    s.do(c.Reserve(s.turn, "standard", punch, corner), player("steve"))
    s.end_turn(player("steve"))
    s.do(c.DeclareAction(s.turn, ActionSpec("move", description="aparece", zone="corredor")))
    window = s.state.window
    assert window is not None
    s.do(c.ClaimReaction(window.id, "cap", s.state.reservations[0].id), player("steve"))
    told = _told(s, "pt-BR")
    assert (
        "Capitão América reserva uma ação padrão (soco), com o gatilho: qualquer um que "
        "aparecer no corredor atrás dele"
    ) in told
    assert "Agente da Hydra aparece [ação de movimento]." in told
    assert "Gatilho! Podem reagir: Capitão América." in told
    assert ">> Capitão América interrompe: soco." in told


def test_narrated_dnd3e_uses_the_srd_words_delay_ready_and_refocus() -> None:
    """D&D 3e: Atrasar (delay), Preparar (ready), Reorientar (refocus); in English too, the
    delay is a delay."""
    s = Story("dnd3e")
    s.add("rogue", "Lidda", init_mod=4)
    s.add("fighter", "Tordek", init_mod=1)
    s.add("wizard", "Mialee", init_mod=3)
    s.roll("rogue", 16)
    s.roll("fighter", 15)
    s.roll("wizard", 5)
    s.do(c.StartCombat())
    s.do(c.Hold(s.turn))  # Lidda
    strike = ActionSpec("attack", description="golpe para distrair")
    s.do(c.Reserve(s.turn, "standard", strike, Trigger("se o xamã lançar uma magia")))
    s.end_turn()  # Tordek
    s.do(c.Refocus(s.turn))  # Mialee
    told = _told(s, "pt-BR")
    assert "Lidda atrasa o turno." in told
    assert (
        "Tordek prepara uma ação padrão (golpe para distrair), com o gatilho: se o xamã lançar "
        "uma magia"
    ) in told
    assert "Mialee usa Reorientar [ação de rodada completa]." in told
    assert {"Lidda delays the turn.", "Mialee refocuses [full-round action]."} <= set(
        _told(s, "en")
    )


def test_a_dnd3e_ready_counterspell_is_told_in_pt_br_and_in_english_as_the_plugin_wrote_it() -> (
    None
):
    """The bundled plugins' outcomes are templates with their figures as arguments: Mialee's
    counterspell reads as a Brazilian table says it (Identificar Magia, contramágica, dissipar
    magia, teste de dissipar, CD), and in English word for word as the plugin's text."""
    mine = QueueDice()
    table = Table("dnd3e", {"dnd3e-ready": Dnd3eReadyPlugin(mine)}, dice=QueueDice())
    tags = ("spellcraft:6", "prepared:Dispel Magic", "caster_level:12")
    table.add("mialee", display_name="Mialee", init_mod=3, tags=tags)
    table.add("shaman", display_name="Gruk", tags=("caster_level:5",))
    table.do(c.RollInitiative("mialee", faces=(12,)))
    table.do(c.RollInitiative("shaman", faces=(10,)))
    table.start()
    spell = Trigger("se Gruk lançar uma magia", Predicate(actors=("shaman",), kinds=("cast",)))
    counterspell = ActionSpec("cast", tags=("counterspell",))
    table.do(c.Reserve(table.turn(), "standard", counterspell, spell))
    table.end_turn()
    mine.push(18, 6)  # Spellcraft 18 + 6 = 24 against 18; dispel check 6 + 10 against 11 + 5
    fireball = ActionSpec("cast", tags=("spell:Fireball", "spell_level:3"))
    table.do(c.DeclareAction(table.turn(), fireball))
    window = table.state.window
    assert window is not None
    table.do(c.ClaimReaction(window.id, "mialee", table.state.reservations[0].id))
    outcomes = table.of(ev.OutcomeRecorded)
    assert [narrate(e, table.state, "pt-BR", rules=BUNDLED_RULES) for e in outcomes] == [
        "    Teste de Identificar Magia de Mialee para reconhecer a magia: 18 + 6 = 24 contra "
        "CD 15 + 3 = 18: reconhece fireball.",
        "    Mialee usa dissipar magia como contramágica: teste de dissipar 6 + 10 = 16 contra "
        "CD 11 + 5 = 16: a magia fireball de Gruk é anulada.",
    ]
    assert [narrate(e, table.state, "en", rules=BUNDLED_RULES) for e in outcomes] == [
        "    Mialee's Spellcraft check to identify the spell: 18 + 6 = 24 against DC 15 + 3 = 18: "
        "identifies fireball.",
        "    Mialee counterspells with dispel magic: dispel check 6 + 10 = 16 against DC 11 + 5 = "
        "16: Gruk's fireball is ruined.",
    ]
    assert [f"    {e.text}" for e in outcomes] == [
        narrate(e, table.state, rules=BUNDLED_RULES) for e in outcomes
    ]


def test_an_outcome_whose_template_no_catalogue_has_is_told_in_english() -> None:
    """A third-party plugin's template is not in the catalogues; an outcome without a template
    is its text in every language."""
    state = State()
    theirs = ev.OutcomeRecorded("glow", "Ann glows.", None, (), "{name} glows.", (("name", "Ann"),))
    assert narrate(theirs, state, "pt-BR", rules=BUNDLED_RULES) == "    Ann glows."
    plain = ev.OutcomeRecorded("note", "Ann glows.", None, ())
    assert narrate(plain, state, "pt-BR", rules=BUNDLED_RULES) == "    Ann glows."


def test_the_demo_tells_the_seeds_in_pt_br_when_asked() -> None:
    """turnkeeper demo --locale pt-BR: the scenes' own words are Portuguese too."""
    lines: list[str] = []
    run(lines.append, locale="pt")
    assert lines[1] == (
        "### Marvel Multiverse: o assalto ao banco (Iniciativa, Fantástico, Rodada Bônus, "
        "Aguardar um Turno)"
    )
    for line in (
        "-- Rodada Bônus --",
        "    Dentes-de-Sabre aguarda o turno.",
        "  Dentes-de-Sabre realiza o turno que estava aguardando.",
        "    Capitão América reserva uma ação padrão (soco), com o gatilho: qualquer um que "
        "aparecer no corredor atrás dele",
        "  Novo teste de Iniciativa para esta sequência: Sharon Carter d616 [6, 6, 5] +2 = 19 "
        "(dados rolados por sharon); Capitão América d616 [5, 5, 5] +3 = 18 (dados rolados por "
        "steve); O Mandarim d616 [4, 4, 4] +3 = 15 (dados rolados pelo narrador). Ordem: Sharon "
        "Carter, Capitão América, O Mandarim.",
        "    Lidda atrasa o turno.",
        "  Ordem agora: Mialee, Tordek, Xamã goblin, Lidda.",
        "== O combate acabou ==",
    ):
        assert line in lines, line


def test_the_demo_s_bots_type_in_pt_br_when_asked() -> None:
    """The skirmish's bots describe their actions and triggers as a Brazilian table would."""
    lines: list[str] = []
    run(lines.append, locale="pt-BR")
    scene = lines[
        lines.index("### Bots: uma escaramuça (jogadores e PdMs SensibleBot pelo socket)") :
    ]
    english = ("attacks", "moves", "uses a power", "strike", "casts a spell", "jumps in", "reacts")
    portuguese = ("ataca [", "se move [", "usa um poder [", "(golpear)", "lança uma magia [")
    assert not [line for line in scene if any(f" {word}" in line for word in english)]
    assert any(any(words in line for words in portuguese) for line in scene), scene


# (f) Errors from the engine reach people in their language -------------------------------------


def test_a_rule_error_from_the_engine_is_told_in_pt_br_with_its_arguments() -> None:
    s = Story("marvel")
    s.add("cap", "Capitão América")
    refused = s.refuse(c.DefeatCombatant("ock"))
    assert (refused.code, refused.field, refused.message) == (
        "unknown_combatant",
        "combatant",
        "no combatant 'ock'",
    )
    assert i18n.localize(refused, "pt-BR") == "não há combatente 'ock'"
    assert i18n.localize(refused, "en") == "no combatant 'ock'"
    # The daemon relays it as a request's error: the template travels with it.
    relayed = RequestError.relay(refused, refused.code, refused.field)
    assert (relayed.code, relayed.message, relayed.field) == (
        refused.code,
        refused.message,
        "combatant",
    )
    assert i18n.localize(relayed, "pt") == "não há combatente 'ock'"


def test_rule_words_among_an_error_s_arguments_are_translated_too() -> None:
    s = Story("marvel")
    s.add("cap", "Capitão América")
    s.roll("cap", 6, 5, 4)
    s.do(c.StartCombat())
    s.do(c.DeclareAction(s.turn, ActionSpec("attack", description="soco")))
    refused = s.refuse(c.DeclareAction(s.turn, ActionSpec("power", description="escudo")))
    assert refused.message == "no standard action left this turn"
    assert i18n.localize(refused, "pt-BR") == "não resta ação padrão neste turno"
    early = decide(State(), c.EndCombat(), 0.0, dice=SeededDice(0), rules=BUNDLED_RULES)
    assert isinstance(early, RuleError)
    assert i18n.localize(early, "pt-BR") == "ainda não há combate: crie um primeiro"


def test_decoding_and_wire_errors_are_told_in_pt_br() -> None:
    with pytest.raises(PlainError) as caught:
        from_plain(c.EndTurn, {"turn": "now"})
    assert caught.value.message == "must be a map"
    assert i18n.localize(caught.value, "pt-BR") == "deve ser um mapa"
    (refused,) = wire.Decoder().feed(b"\x91\x05")  # [5]: no message has type 5
    assert isinstance(refused, wire.WireError)
    assert i18n.localize(refused, "pt-BR") == "o tipo de uma mensagem deve ser 0, 1 ou 2"


# The rule words the engine uses are all in the catalogue ----------------------------------------


def test_the_catalogue_has_every_action_type_phase_and_condition_of_the_engine() -> None:
    for name, rules in BUNDLED_RULES.rulesets.items():
        assert set(rules.action_types) <= set(i18n.TERMS["action_type"]), name
    assert set(typing.get_args(Phase)) == set(i18n.TERMS["phase"])
    assert set(BUNDLED_RULES.condition_types) == set(i18n.TERMS["condition"])


@pytest.mark.parametrize(
    ("locale", "noted", "plain"),
    [
        ("en", "  Sabretooth: Webbed to the wall.", "  Sabretooth gets a custom condition."),
        (
            "pt-BR",
            "  Sabretooth: Webbed to the wall.",
            "  Sabretooth fica com uma condição personalizada.",
        ),
    ],
)
def test_a_narrators_condition_is_told_by_its_note(locale: str, noted: str, plain: str) -> None:
    s = Story("marvel")
    s.add("sabretooth", "Sabretooth")
    (with_note,) = of_kind(
        s.do(c.ApplyCondition("sabretooth", "custom", note="Webbed to the wall.")),
        ev.ConditionApplied,
    )
    (without,) = of_kind(s.do(c.ApplyCondition("sabretooth", "custom")), ev.ConditionApplied)
    assert narrate(with_note, s.state, locale, rules=BUNDLED_RULES) == noted
    assert narrate(without, s.state, locale, rules=BUNDLED_RULES) == plain


def of_kind(events: list[ev.Event], kind: type[ev.Event]) -> list[ev.Event]:
    return [e for e in events if isinstance(e, kind)]
