"""record_outcome with a template: the template filled in with its args is the outcome's text,
so a daemon can tell the outcome in another language. Anything else is refused as
`invalid_value` on `template`, and changes nothing."""

from __future__ import annotations

import pytest

from story import Story, of
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.decide import MAX_ITEMS, MAX_TEXT
from turnkeeper_engine.model import OptionValue
from turnkeeper_engine.plain import event_from_plain, event_to_plain
from turnkeeper_sdk import outcome

Args = tuple[tuple[str, OptionValue], ...]
LIDDA: Args = (("name", "Lidda"), ("dc", 15))


def _table() -> Story:
    s = Story("dnd3e")
    s.add("rogue", "Lidda")
    return s


def _outcome(text: str, template: str, args: Args = LIDDA) -> c.RecordOutcome:
    return c.RecordOutcome("dc", text, "rogue", (("dc", 15),), template, args)


def test_an_outcome_whose_template_makes_its_text_is_recorded_with_template_and_args() -> None:
    args: Args = (*LIDDA, ("x", "x"))
    command = _outcome("Lidda needs 15, not 'x'.", "{name} needs {dc}, not {x!r}.", args)
    (recorded,) = of(_table().do(command), ev.OutcomeRecorded)
    assert recorded.text == "Lidda needs 15, not 'x'."
    assert recorded.template == "{name} needs {dc}, not {x!r}."
    assert recorded.args == (("name", "Lidda"), ("dc", 15), ("x", "x"))


def test_an_outcome_without_a_template_is_recorded_as_before() -> None:
    (recorded,) = of(
        _table().do(c.RecordOutcome("note", "Lidda hides.", "rogue")), ev.OutcomeRecorded
    )
    assert (recorded.template, recorded.args) == ("", ())


def test_a_template_that_does_not_make_the_text_is_refused_on_template() -> None:
    refused = _table().refuse(_outcome("Lidda needs 16.", "{name} needs {dc}."))
    assert (refused.code, refused.field) == ("invalid_value", "template")
    assert refused.message == "filled in with args, the template is not text"


@pytest.mark.parametrize(
    "template",
    [
        "{who} needs {dc}.",  # not an argument
        "{0} needs {dc}.",  # positional
        "{} needs {dc}.",
        "{name.upper} needs {dc}.",  # nothing inside an argument
        "{name[0]} needs {dc}.",
        "{name} needs {dc:>100000}.",  # wider than any text
        "{name} needs {dc:{dc}}.",  # nested
        "{name} needs {dc:.3000f}.",
        "{name:d} needs {dc}.",  # a string formatted as a number
        "{name!x} needs {dc}.",  # no such conversion
        "{name needs {dc}.",  # not a format string
        "{name} needs {dc}}.",
    ],
)
def test_a_template_with_a_bad_placeholder_is_refused_on_template(template: str) -> None:
    refused = _table().refuse(_outcome("Lidda needs 15.", template))
    assert (refused.code, refused.field) == ("invalid_value", "template")


def test_args_without_a_template_are_refused_on_template() -> None:
    refused = _table().refuse(_outcome("Lidda needs 15.", ""))
    assert (refused.code, refused.field) == ("invalid_value", "template")


def test_a_template_and_its_args_keep_to_the_usual_limits() -> None:
    s = _table()
    long = "x" * (MAX_TEXT + 1)
    refused = s.refuse(_outcome("x", long, ()))
    assert (refused.code, refused.field) == ("invalid_value", "template")
    many: Args = tuple((f"a{i}", i) for i in range(MAX_ITEMS + 1))
    refused = s.refuse(_outcome("0", "{a0}", many))
    assert (refused.code, refused.field) == ("invalid_value", "args")
    refused = s.refuse(_outcome("x", "{x}", (("x", long),)))
    assert (refused.code, refused.field) == ("invalid_value", "args")


def test_an_outcome_recorded_before_templates_existed_still_decodes() -> None:
    old = {"event": "outcome_recorded", "kind": "dc", "text": "DC 15", "combatant": None}
    decoded = event_from_plain({**old, "values": [["dc", 15]]})
    assert decoded == ev.OutcomeRecorded("dc", "DC 15", None, (("dc", 15),))
    assert isinstance(decoded, ev.OutcomeRecorded)
    assert (decoded.template, decoded.args) == ("", ())
    new = ev.OutcomeRecorded("dc", "DC 15", None, (), "DC {dc}", (("dc", 15),))
    assert event_from_plain(event_to_plain(new)) == new


def test_the_sdk_outcome_fills_the_text_in_from_the_template() -> None:
    made = outcome("dc", "{name} needs {dc}.", "rogue", (("dc", 15),), name="Lidda", dc=15)
    assert made == c.RecordOutcome(
        "dc", "Lidda needs 15.", "rogue", (("dc", 15),), "{name} needs {dc}.", LIDDA
    )
    # kind, template, combatant and values are positional only: any name may be a placeholder.
    assert outcome("k", "{kind} {values}", kind="a", values="b").text == "a b"
    _table().do(made)
