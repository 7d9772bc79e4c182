"""The table view end to end: a real daemon serving the page with ``--http``, Debian's Chromium
driven headless by playwright-core (tests/browser/table.mjs), and the combat set up through the
Python client over the Unix socket, as a narrator's other tools would.

Each test runs one scenario of tests/browser/table.mjs, which opens the page, clicks through it,
checks what it shows, and prints what it saw as JSON; the test asserts on that too.

Each scenario keeps its steps' screenshots (the console scenarios one at desktop and one at
phone size per ruleset; ``TURNKEEPER_SCREENSHOTS=0`` in the environment turns them off) as test
artifacts in
``test-artifacts/table-view/<scenario>/`` at the repository root, one PNG per step, numbered. A
failing scenario always leaves ``failed.png`` there.

The browser tests need node, ``npm ci`` in tests/browser and in sdk/js, and ``/usr/bin/chromium``
(``apt-get install chromium``): without them these tests fail, saying what is missing.
"""

from __future__ import annotations

import filecmp
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from daemon import CallError, Client, Daemon, create_many, running
from node import node
from turnkeeper.combats.registry import MAX_COMBAT_PAGE

REPO = Path(__file__).resolve().parents[1]
BROWSER_DIR = REPO / "tests" / "browser"
WEB = REPO / "daemon" / "src" / "turnkeeper" / "web"
VENDORED = WEB / "vendor" / "msgpack"
SDK_JS = REPO / "sdk" / "js"
ARTIFACTS = REPO / "test-artifacts" / "table-view"
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = os.environ.get("TURNKEEPER_SCREENSHOTS", "1") != "0"
"""Whether the scenarios keep their steps' screenshots (see the module's docstring)."""
SCENARIO_TIMEOUT = 180.0
"""Seconds one scenario may take: a few page loads and a few dozen clicks, on a busy machine."""

BANK = (
    # id, name, initiative modifier, faces (the third is the Marvel die: 1 is its M), fields
    ("spidey", "Spider-Man", 3, [5, 6, 1], {"controller": "peter", "player_character": True}),
    ("docock", "Doctor Octopus", 1, [3, 4, 1], {}),
    ("sabretooth", "Sabretooth", 2, [4, 5, 6], {}),
    ("wolverine", "Wolverine", 3, [2, 4, 6], {"controller": "logan", "player_character": True}),
    ("mystique", "Mystique", 0, [2, 3, 4], {"hidden": True}),
)
"""The seed's bank robbery: Spider-Man 20 and Doctor Octopus 14 are Fantastic and act in the
bonus round; Sabretooth 17, Wolverine 15 and the hidden Mystique 9 are not."""


class Narrator:
    """The narrator's Python client on one combat, each command with a fresh request id."""

    def __init__(self, client: Client, combat: str) -> None:
        self.client = client
        self.combat = combat
        self.ids = itertools.count(1)

    def __call__(self, method: str, **fields: Any) -> Any:
        request_id = f"{self.combat}-{next(self.ids)}"
        return self.client.call(method, request_id=request_id, combat=self.combat, **fields)

    def create(self, ruleset: str, **options: Any) -> None:
        self.client.call(
            "create_combat",
            request_id=f"{self.combat}-create",
            combat_id=self.combat,
            ruleset=ruleset,
            options=[[name, value] for name, value in options.items()],
        )

    @property
    def turn(self) -> dict[str, Any]:
        turn = self.client.call("get_combat", combat=self.combat)["view"]["turn"]
        return {"round": turn["round"], "combatant": turn["combatant"], "number": turn["number"]}

    def end_turn(self) -> None:
        self("end_turn", turn=self.turn)

    def reserve(self, kind: str, trigger: str, description: str = "") -> None:
        action = {"kind": kind, "description": description}
        self(
            "reserve",
            turn=self.turn,
            reserved_type="standard",
            action=action,
            trigger={"text": trigger},
        )


def bank(d: Daemon, combat: str = "bank") -> Narrator:
    """The bank robbery under marvel, started: the bonus round, Spider-Man's turn. Sabretooth is
    webbed for two of his turn ends; turns last ten minutes and windows wait two."""
    n = Narrator(d.client(), combat)
    n.create("marvel", turn_time_limit=600.0, window_deadline=120.0)
    for cid, name, mod, faces, fields in BANK:
        n("add_combatant", id=cid, display_name=name, init_mod=mod, **fields)
        n("roll_initiative", combatant=cid, faces=faces)
    n("apply_condition", target="sabretooth", type="custom", rounds=2, note="Webbed to the wall")
    n("start_combat")
    return n


def prerequisites() -> str:
    """Node with the browser tests' and the client's packages, and Chromium; fails the test
    (never skips it), naming what is missing."""
    if not CHROMIUM.exists():
        pytest.fail(f"the browser tests need {CHROMIUM} (apt-get install chromium)", pytrace=False)
    return node((BROWSER_DIR, "playwright-core"), (SDK_JS, "@msgpack/msgpack"))


def scenario(
    d: Daemon,
    name: str,
    tmp_path: Path,
    pauses: dict[str, Callable[[], None]] | None = None,
    **config: Any,
) -> dict[str, Any]:
    """Run one scenario of tests/browser/table.mjs against the daemon; returns what it saw.

    A scenario may pause for the test to act in between (restart the daemon): it prints
    ``{"pause": name}``, the test runs ``pauses[name]`` and answers with a line."""
    node = prerequisites()
    shots = ARTIFACTS / name
    shutil.rmtree(shots, ignore_errors=True)
    shots.mkdir(parents=True)
    settings = {
        "base": f"http://127.0.0.1:{d.http_port}",
        "ws": f"ws://127.0.0.1:{d.http_port}/ws",
        "chromium": str(CHROMIUM),
        "client": str(SDK_JS / "src" / "index.js"),
        "artifacts": str(shots),
        "screenshots": SCREENSHOTS,
        "profile": str(tmp_path / "chromium-profile"),
        **config,
    }
    settings_file = tmp_path / f"{name}.json"
    settings_file.write_text(json.dumps(settings))
    errors = tmp_path / f"{name}.stderr"
    argv = [node, "--experimental-websocket", "table.mjs", name, str(settings_file)]
    with errors.open("w") as stderr:
        process = subprocess.Popen(
            argv,
            cwd=BROWSER_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        timed_out = threading.Event()
        overdue = threading.Timer(SCENARIO_TIMEOUT, lambda: (timed_out.set(), process.kill()))
        overdue.start()
        said: dict[str, Any] = {}
        try:
            assert process.stdin is not None
            assert process.stdout is not None
            for line in process.stdout:
                said = json.loads(line)
                if "pause" in said:
                    (pauses or {})[said["pause"]]()
                    process.stdin.write("go\n")
                    process.stdin.flush()
            process.stdin.close()
            code = process.wait()
        finally:
            overdue.cancel()
            process.kill()
    assert not timed_out.is_set(), f"scenario {name} ran past {SCENARIO_TIMEOUT} s"
    assert code == 0, f"scenario {name} failed (screenshots in {shots}):\n{errors.read_text()}"
    assert said.get("scenario") == name, said
    assert bool(said["screenshots"]) == SCREENSHOTS, "screenshots kept unless turned off"
    return said


def test_narrator_page_shows_the_marvel_combat_live_and_its_controls_work(tmp_path: Path) -> None:
    """The narrator's page: the bonus round with the Fantastic checks marked, the turn timer
    counting down and a condition with its duration; then, by its own buttons, end turn, a
    reservation with its trigger (a refused one first, with the daemon's message; the form keeps
    what was typed when another tool's change redraws the controls), no hold and only movement
    left to reserve once it is made (R9, R10), a hold (a fraction and a number below the
    daemon's lowest refused by the page) and when
    it is taken, an open reaction window (announced by another tool: the page follows live)
    with claim and pass, finishing the reaction, and undo."""
    with running(tmp_path, http=True) as d:
        bank(d)
        seen = scenario(d, "narrator", tmp_path, token=d.token("narrator"), combat="bank")
    first = seen["first"]
    assert first["round"] == "Bonus round"
    assert first["turn"] == "spidey"
    assert first["order"] == ["spidey", "sabretooth", "wolverine", "docock", "mystique"]
    assert first["fantastic"] == ["spidey", "docock"]
    assert first["totals"] == {
        "spidey": "20",
        "sabretooth": "17",
        "wolverine": "15",
        "docock": "14",
        "mystique": "9",
    }
    assert first["timer"][0] > first["timer"][1], "the turn timer counts down"
    assert first["condition"] == "Rounds left: 2"
    assert seen["steps"] == [
        "end turn: Doctor Octopus's turn",
        "reserve refused: action_type_mismatch",
        "Mystique defeated meanwhile: the form keeps what was typed",
        "reserve: When Spider-Man lands on the vault",
        "after reserving: hold 0, reservable movement",
        "end turn: Round 1",
        "hold at 12.5: The number to act at is a whole number, or leave it empty.",
        "hold at -1000001: The number to act at is no lower than -1000000.",
        "hold: Spider-Man holding",
        "take held turn: acts just after Sabretooth",
        "held turn: Spider-Man, held turn",
        "window: Wolverine, Doctor Octopus",
        "claim: Doctor Octopus",
        "pass: Wolverine",
        "finish reaction",
        "undo: Doctor Octopus reacting again",
    ]


def test_r16_player_page_hides_what_the_narrator_page_shows(tmp_path: Path) -> None:
    """R16 on the page: beside the narrator's page, Wolverine's player's page shows no hidden
    Mystique and not Doctor Octopus's reservation (narrator-run), nor offers him the window;
    it shows Wolverine's own reservation and only Wolverine's controls, which work: its pass
    and end turn reach the narrator's page live. While the hidden Mystique's claim resolves, the
    player's page shows someone unseen reacting, names nobody and offers no finish button."""
    with running(tmp_path, http=True) as d:
        n = bank(d)
        n.end_turn()  # Spider-Man ends his bonus turn
        n.reserve("attack", "When Spider-Man lands on the vault", "grabs him with a tentacle")
        n.end_turn()  # Doctor Octopus: the bonus round is over
        n.end_turn()  # Spider-Man
        n.end_turn()  # Sabretooth
        n.reserve("attack", "When Sabretooth moves")  # Wolverine
        facts = {"event": "vault_door", "text": "The vault door blows open"}
        n("announce_trigger", facts=facts, offer=["docock", "wolverine", "mystique"])
        window = n.client.call("get_combat", combat="bank")["view"]["window"]["id"]
        n("claim_reaction", window=window, combatant="mystique", action={"kind": "grab"})
        seen = scenario(
            d,
            "r16",
            tmp_path,
            narrator=d.token("narrator"),
            player=d.token("player", "--user", "logan"),
            combat="bank",
        )
    narrator, player = seen["narrator"], seen["player"]
    assert "mystique" in narrator["combatants"]
    assert "mystique" not in player["combatants"]
    assert sorted(narrator["reservations"]) == ["docock", "wolverine"]
    assert player["reservations"] == ["wolverine"]
    assert narrator["offered"] == ["wolverine", "docock", "mystique"]
    assert player["offered"] == ["wolverine"]
    assert player["answers"] == ["wolverine"], "a player answers for its own combatants only"
    assert player["narrator_controls"] == [], "no undo, no close window for a player"
    assert narrator["answers"] == ["wolverine", "docock"]
    assert seen["steps"] == [
        "player passes: narrator page shows Wolverine passes",
        "narrator passes for Doctor Octopus: the player page shows someone unseen reacting",
        "narrator finishes Mystique's reaction: window closed on the player page",
        "player ends Wolverine's turn: narrator page shows Doctor Octopus's turn",
        "player page: nothing to do, no turn controls",
        "Mystique's turn: the player page sees no turn",
    ]


def test_page_follows_the_combat_across_a_daemon_restart(tmp_path: Path) -> None:
    """The daemon is killed under an open page: the page says it is reconnecting, and once the
    daemon is back it catches up with a turn ended meanwhile by another tool, and goes on. When
    the page's client gives up (its token refused on reconnecting, the token file moved away),
    the page says so, disables its commands and offers Reconnect, which (the file back) signs in
    again with the tab's token and shows the combat live again."""
    with running(tmp_path, http=True) as d:
        n = bank(d)
        tokens = d.data_dir / "tokens.json"
        away = d.data_dir / "tokens.json.away"

        def restart() -> None:
            d.start()
            n.client = d.client()
            n.end_turn()  # Spider-Man's, while the page is away

        def revoke() -> None:
            # Every token gone: the page's next call is refused (token_revoked) and so is its
            # hello on reconnecting. The Unix socket's narrator is its uid, not a token.
            tokens.rename(away)
            n.end_turn()  # Spider-Man's round 1 turn: the page reads the combat again

        def restore() -> None:
            away.rename(tokens)

        pauses = {"kill": d.kill, "start": restart, "revoke": revoke, "restore": restore}
        seen = scenario(d, "reconnect", tmp_path, pauses, token=d.token("narrator"), combat="bank")
    assert seen["steps"] == [
        "daemon killed: Reconnecting…",
        "daemon back: Live, Doctor Octopus's turn",
        "end turn: Round 1",
        "token refused on reconnecting: Disconnected, Reconnect",
        "reconnect: Live, Sabretooth's turn",
        "end turn: Wolverine's turn",
    ]


def test_pt_br_page_shows_portuguese_labels_and_narration(tmp_path: Path) -> None:
    """Signing in through the form in Portuguese: the JavaScript client's own failure (the
    daemon out of reach) is told in Portuguese too, its English kept in the title; the labels,
    the round (Rodada Bônus), the Fantastic marks, the kinds of action, the narrated log and
    the daemon's refusals are in pt-BR; a double click on Show combat opens it once, with no
    error; changing combat and signing out keep the language. An End turn whose answer never
    comes (call_timeout, though the daemon ended the turn) offers Retry, which sends the same
    request_id: the daemon answers it as the command it applied, not as a second end of a turn
    already over."""
    with running(tmp_path, http=True) as d:
        bank(d)
        seen = scenario(d, "pt-BR", tmp_path, token=d.token("narrator"), combat="bank")
    assert seen["sign_in_button"] == "Entrar"
    assert seen["round"] == "Rodada Bônus"
    assert seen["fantastic"] == "★ Fantástico"
    assert any("Rodada Bônus" in line for line in seen["log"]), seen["log"]
    assert seen["html_lang"] == "pt-BR"
    assert seen["attack"] == "ataque", "an action's kind in the daemon's own word"
    assert seen["error"]["code"] == "action_type_mismatch"
    assert "'attack'" in seen["error"]["text"]
    assert seen["error"]["text"] != seen["error_en"]
    assert seen["signed_out"] == "Entrar"
    assert seen["unreachable"]["code"] == "connection_lost"
    assert seen["unreachable"]["text"] == (
        "A conexão com o Turnkeeper caiu ou não pôde ser feita."
    ), seen["unreachable"]
    assert seen["unreachable"]["detail"], "the client's own message stays in the title"
    assert seen["interrupted"] == "call_timeout"
    first, retried = seen["retried"]
    assert first == retried, "a retry carries the interrupted command's request_id"


def test_dnd3e_page_shows_d20_checks_delays_and_readied_actions(tmp_path: Path) -> None:
    """dnd3e: a linked combat that cannot be read, then cannot be followed, leaves the picker
    saying why; then d20 totals, no Fantastic; the narrator starts the combat from the page,
    delays a turn (the Delaying list) and readies an action with its trigger, after which
    neither Delay nor Ready is offered (R9, R11); the delayed turn is labelled so; at the delay
    floor there is no Delay (must_act), and once refocused (its Refocus button) no Ready (R14)."""
    with running(tmp_path, http=True) as d:
        n = Narrator(d.client(), "keep")
        n.create("dnd3e")
        for cid, name, mod, face in (("ana", "Ana", 2, 15), ("orc", "Orc", 0, 11)):
            n("add_combatant", id=cid, display_name=name, init_mod=mod)
            n("roll_initiative", combatant=cid, faces=[face])
        seen = scenario(d, "dnd3e", tmp_path, token=d.token("narrator"), combat="keep")
    assert seen["opening"] == [
        {"code": "internal_error", "text": "the combat could not be read"},
        {"code": "internal_error", "text": "the combat could not be followed"},
    ]
    assert seen["totals"] == {"ana": "17", "orc": "11"}
    assert seen["fantastic"] == []
    assert seen["steps"] == [
        "not started: Rolling initiative",
        "start combat: Round 1, Ana's turn",
        "delay: Orc's turn, Ana delaying",
        "ready: When Ana steps out of the shadows",
        "after readying: no delay, no ready form, End turn",
        "Ana's delayed turn: delayed turn",
        "Orc's turn at the delay floor: no delay, a ready form",
        "refocused: no ready form, End turn",
    ]


def test_browser_tests_fail_rather_than_skip_without_chromium(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A machine without the browser must not pass these tests by skipping them."""
    monkeypatch.setattr(sys.modules[__name__], "CHROMIUM", Path("/nonexistent/chromium"))
    with pytest.raises(pytest.fail.Exception, match="/nonexistent/chromium"):
        prerequisites()


def test_vendored_msgpack_is_the_sdk_s_own_copy() -> None:
    """web/vendor/msgpack is @msgpack/msgpack's dist.esm, byte for byte, at the version
    sdk/js's lockfile pins: every .mjs file (utils/ too, no maps or typings) and its LICENSE."""
    lock = json.loads((SDK_JS / "package-lock.json").read_text())
    pinned = lock["packages"]["node_modules/@msgpack/msgpack"]["version"]
    installed = SDK_JS / "node_modules" / "@msgpack" / "msgpack"
    if not installed.is_dir():
        pytest.fail("sdk/js/node_modules is missing (run: npm ci --prefix sdk/js)", pytrace=False)
    assert json.loads((installed / "package.json").read_text())["version"] == pinned == "3.1.3"
    dist = installed / "dist.esm"
    wanted = sorted(p.relative_to(dist) for p in dist.rglob("*.mjs"))
    vendored = sorted(p.relative_to(VENDORED) for p in VENDORED.rglob("*") if p.is_file())
    assert vendored == sorted([*wanted, Path("LICENSE")])
    for name in wanted:
        assert filecmp.cmp(dist / name, VENDORED / name, shallow=False), name
    assert filecmp.cmp(installed / "LICENSE", VENDORED / "LICENSE", shallow=False)


def test_every_page_text_is_a_literal_babel_extracts() -> None:
    """The catalogue gets the page's words from Babel's JavaScript extractor, so every t() call
    in web/*.js must take a plain string literal that Babel finds."""
    from babel.messages.extract import extract_from_file

    first_argument = re.compile(r"""\bt\(\s*("(?:[^"\\]|\\.)*"|'[^']*'|`[^`]*`|[^,)]*)""")
    for script in sorted(WEB.glob("*.js")):
        source = re.sub(r"/\*.*?\*/|(^|\s)//[^\n]*", "", script.read_text(), flags=re.S)
        calls = [c for c in first_argument.findall(source) if c != "text"]  # t()'s definition
        assert calls or script.name in ("dom.js", "i18n.js"), script.name
        plain = [c for c in calls if c.startswith('"')]
        assert plain == calls, f"{script.name}: t() of something else than a string: {calls}"
        found = {m[1] for m in extract_from_file("javascript", script, keywords={"t": None})}
        assert {json.loads(c) for c in calls} == found, script.name


def test_r16_tables_the_page_shows_only_its_tables_combats(tmp_path: Path) -> None:
    """A narrator of a table signs in: the picker offers that table's combats only, each named
    without the table's prefix, the header names the table, and its combat opens; a combat it
    creates from the picker, named without the prefix, is the table's, and a double click on
    Create combat sends one create_combat and shows no error; a name that the table's prefix
    makes longer than 128 characters is refused by the page. With nobody in it yet, the new
    combat offers no Start combat (the daemon refuses it, no_combatants)."""
    with running(tmp_path, http=True) as d:
        argv = [sys.executable, "-m", "turnkeeper.cli", "table", "add", "Friday"]
        made = subprocess.run(
            [*argv, "--data-dir", str(d.data_dir)],
            capture_output=True,
            text=True,
            check=True,
        )
        table = made.stdout.strip()
        bank(d, "bank")  # the default table's: never offered
        bank(d, f"{table}/heist")
        seen = scenario(
            d,
            "tables",
            tmp_path,
            token=d.token("narrator", "--table", table),
            combat=f"{table}/heist",
        )
    assert seen["values"] == [f"{table}/heist"]
    assert seen["options"][0].startswith("heist · marvel")
    assert seen["table"] == f"Table {table}"
    assert seen["created"] == f"{table}/raid"


def test_the_combat_picker_lists_more_combats_than_one_page(tmp_path: Path) -> None:
    """The daemon answers list_combats a page at a time: the picker reads every page, and the
    combat sorting last (after every page but the last) opens from it and from a link."""
    with running(tmp_path, http=True) as d:
        filler = [f"a{i:04d}" for i in range(MAX_COMBAT_PAGE + 5)]
        create_many(d.client(), filler)
        bank(d, "zz-bank")
        seen = scenario(d, "crowded", tmp_path, token=d.token("narrator"), combat="zz-bank")
    assert seen["listed"] == len(filler) + 1
    assert seen["opened"] == seen["linked"] == "Spider-Man"


@pytest.mark.parametrize("ruleset", ["marvel", "dnd3e"])
def test_a_whole_combat_from_the_page_alone(tmp_path: Path, ruleset: str) -> None:
    """The narrator's console: the narrator creates the combat with a turn timer, adds
    combatants (a player's PC, a group, a hidden one), enters the dice rolled at the table (the
    player enters its own; marvel with an edge and its reroll), lets Turnkeeper roll one and
    removes it, orders the group, applies a condition and starts. The player acts, reserves or
    readies with the form's defaults (accepted), holds or delays to act after the boss, answers
    the window the narrator opens; the narrator defeats, revives, reveals, adds a reinforcement,
    removes the condition and ends the combat. More tags than the daemon takes are refused by
    the page. Every step shows on both pages; each size checked
    at 360 px has no sideways scrolling and no control under 44 px, with people's words at their
    longest (a 38-character name without a space, a long group name, a 120-character condition
    note). The condition's clock counts the hidden spy's turns: the player's page shows the
    condition without rounds left."""
    with running(tmp_path, http=True) as d:
        seen = scenario(
            d,
            f"console-{ruleset}",
            tmp_path,
            narrator=d.token("narrator"),
            player=d.token("player", "--user", "peter"),
            combat=f"console-{ruleset}",
            ruleset=ruleset,
        )
    marvel = ruleset == "marvel"
    totals = (
        {"hero": "19", "boss": "15", "goon2": "9", "goon1": "9", "spy": "9"}
        if marvel
        else {"hero": "17", "boss": "13", "goon2": "8", "goon1": "8", "spy": "3"}
    )
    steps = seen["steps"]
    held = "holding since round 1" if marvel else "delaying since round 1"
    assert steps == [
        "created: Setting up",
        "added: hero, boss, goon1, goon2, spy, extra",
        "player may roll for: hero; sees hero, boss, goon1, goon2, extra",
        "no faces: Enter the face of every die.",
        *(["surprised spy: Troubles: 1"] if marvel else []),
        "extra rolled by Turnkeeper (a number), then removed",
        f"totals: {json.dumps(totals, separators=(',', ':'))}",
        "started: Bonus round, Hero's turn" if marvel else "started: Round 1, Hero's turn",
        *(
            [
                "bonus round: attack, then reserve with the defaults (move, dash, stand, ): "
                "Reserved: movement move [movement] When the boss moves"
            ]
            if marvel
            else []
        ),
        f"held: {held}; acts just after Boss; rolled {totals['hero']}",
        "window: the player claims, the narrator passes for Goon A, the player finishes"
        if marvel
        else "window: the player passes, the narrator passes for Goon A",
        "after the boss: Hero, held turn" if marvel else "after the boss: Hero, delayed turn",
        *(
            []
            if marvel
            else ["ready with the defaults: Readied attack [standard] When the boss moves"]
        ),
        # The hero, holding to act after the boss, now acts at the boss's number (R9).
        "order: boss, hero, spy, goon2, goon1"
        if marvel
        else "order: boss, hero, goon2, goon1, spy",
        "roster: defeat, revive, reveal, a reinforcement rolled and slotted, condition removed",
        "ended: Combat over",
    ]
    assert all(size["document"] <= size["viewport"] == 360 for size in seen["sizes"]), seen["sizes"]


CROWD = 33
"""Combatants in the crowded combat: one more than a window may be offered to (MAX_ITEMS)."""


def test_the_forms_offer_only_what_the_rules_and_the_moment_allow(tmp_path: Path) -> None:
    """What the forms offer follows the combat: a held turn offers only the moments still to
    come (the daemon refuses the rest, moment_passed); the rule options show, read-only, and
    shape the forms (no window for a marvel reaction spent, till the round's start; dnd3e 3.5
    readies a free action, 3.0 has a delay floor the page refuses to go below; the last to act
    in a dnd3e round has no moment left to delay to, and a delayer whose every moment has gone
    is told so, offered none). A window among more combatants than one may be offered to says
    so and lets no more be ticked; a table whose reactions are all spent still gets its window,
    offered to nobody, as the daemon opens it. The forms take what the daemon takes: a defeated
    target, a defeated combatant's initiative before the order is fixed, and a condition counted
    on its target's own turns though it names a cause; nor does a window offer answers for a
    combatant defeated since it opened. The page stays 360 px wide."""
    with running(tmp_path, http=True) as d:
        crowd = Narrator(d.client(), "crowd")
        crowd.create("marvel", reaction_refresh="round_start")
        for i in range(CROWD):
            # Distinct totals, no Fantastic: c00 first, c32 last, no bonus round.
            cid = f"c{i:02d}"
            crowd("add_combatant", id=cid, display_name=cid, init_mod=CROWD - i)
            crowd("roll_initiative", combatant=cid, faces=[2, 2, 2])
        crowd("start_combat")
        keep = Narrator(d.client(), "keep")
        keep.create("dnd3e", ready="3.5", delay="3.0")
        for cid, name, mod, face in (
            ("ana", "Ana", 2, 15),
            ("orc", "Orc", 0, 11),
            ("bat", "Bat", 1, 4),
        ):
            keep("add_combatant", id=cid, display_name=name, init_mod=mod)
            keep("roll_initiative", combatant=cid, faces=[face])
        keep("start_combat")
        duel = Narrator(d.client(), "duel")
        duel.create("marvel", window_deadline=120.0)
        for cid, name, mod in (("ava", "Ava", 2), ("bo", "Bo", 1), ("cy", "Cy", 2)):
            duel("add_combatant", id=cid, display_name=name, init_mod=mod)
        duel("roll_initiative", combatant="ava", faces=[4, 4, 4])
        duel("defeat_combatant", combatant="cy")
        refusals: list[tuple[str, str]] = []

        def no_moment() -> None:
            for when, other in (("after", "orc"), ("before", "orc"), ("after", "bat")):
                try:
                    keep("take_held_turn", combatant="ana", when=when, other=other)
                except CallError as refused:
                    refusals.append((refused.code, refused.field))

        def spend() -> None:
            # No Fantastic, no bonus round; Cy is out: Ava's turn. Both claim one window.
            duel("roll_initiative", combatant="bo", faces=[2, 2, 3])
            duel("start_combat")
            facts = {"event": "narrated", "text": "A shot"}
            duel("announce_trigger", facts=facts, offer=["ava", "bo"])
            view = duel.client.call("get_combat", combat="duel")["view"]
            for cid in ("ava", "bo"):
                duel(
                    "claim_reaction",
                    window=view["window"]["id"],
                    combatant=cid,
                    action={"kind": "attack"},
                )
            while (
                w := duel.client.call("get_combat", combat="duel")["view"]["window"]
            ) is not None:
                duel("finish_reaction", window=w["id"], combatant=w["sequence"][w["index"]])

        seen = scenario(
            d,
            "rules",
            tmp_path,
            {"no-moment": no_moment, "spend": spend},
            token=d.token("narrator"),
            crowd="crowd",
            keep="keep",
            duel="duel",
        )
        kept = keep.client.call("get_combat", combat="keep")["view"]
        dueled = duel.client.call("get_combat", combat="duel")["view"]
    assert seen["rules"] == {
        "crowd": "RULES Turn timer none Reactions wait only for the answers "
        "A spent reaction comes back at each round's start",
        "keep": "RULES Turn timer none Reactions wait only for the answers "
        "Readied action rules 3.5: a standard, move or free action "
        "Delay rules 3.0: down to \N{MINUS SIGN}10 minus the initiative modifier",
    }
    # c00 holds, c01 has acted, c02 is acting: only moments still to come are offered.
    assert seen["moments"] == {"before": ["c03", "c04", "c05"], "after": ["c02", "c03", "c04"]}
    assert seen["offerLimit"] == "One window is offered to at most 32 combatants."
    assert seen["lastOffer"] is True, "the 33rd box waits while 32 are ticked"
    assert seen["offered"] == 32
    assert seen["spent"] == "Not offered, their reaction spent until the next round starts: c05."
    assert seen["floor"] == {
        "code": "",
        "text": "A delayed turn acts at -12 or higher: the delay floor.",
    }
    assert "speak" in seen["readyKinds"], "3.5 readies a free action"
    assert "When the orc draws" in seen["readied"]
    assert seen["lastDelay"] == {"plan": 0, "delay": 1}, "the last of a round delays with no plan"
    # Ana delays, the Bat is defeated during a window in its own turn: no moment is left to her.
    assert seen["noMoment"] == {
        "text": "No turn before or after which to act is still to come while it holds.",
        "offered": 0,
    }
    assert refusals == [("moment_passed", "other")] * 2 + [("combatant_inactive", "other")]
    assert seen["answersAfterDefeat"] == ["orc"], "nothing offered for the defeated Bat to answer"
    assert "bat" in seen["targets"], "a defeated combatant is a target the daemon takes"
    assert kept["turn"]["combatant"] == "ana"
    assert kept["turn"]["used"] == ["standard"]
    # Defeated before the order is fixed, Cy rolled the player's dice from the page.
    assert seen["duelRollers"] == ["bo", "cy"]
    assert seen["duelTie"] == ["#ava", "#cy"], "the defeated Cy's exact tie with Ava may be ordered"
    (dazzled,) = dueled["conditions"]
    assert [clock["anchor"] for clock in dazzled["clocks"]] == ["bo"], "its own turns: Bo's"
    # Every reaction at the table spent: the narrator still opens a window, offered to nobody.
    assert seen["duel"]["spent"] == (
        "Not offered, their reaction spent until their own next turn: Ava, Bo."
    )
    assert seen["duel"]["boxes"] == 0
    assert seen["duel"]["window"] == {"status": "Open", "offered": "Offered to nobody."}
    assert seen["duel"]["answers"] == []
    assert seen["duel"]["close"] == 1
    window = dueled["window"]
    assert (window["status"], window["offered"]) == ("open", [])
    assert window["facts"]["text"] == "The lights go out"
    assert all(size["document"] <= size["viewport"] == 360 for size in seen["sizes"]), seen["sizes"]


def test_r13_the_narrator_changes_and_turns_off_the_turn_timer_from_the_console(
    tmp_path: Path,
) -> None:
    """The console's turn timer (set_turn_timer): a length the daemon would refuse is refused
    by the page; a shorter one leaves the running turn's ten minutes and times the next turn,
    which the daemon's clock ends by itself; turned off, the running countdown goes. It fits a
    phone."""
    with running(tmp_path, http=True) as d:
        n = Narrator(d.client(), "clock")
        n.create("dnd3e", turn_time_limit=600.0, turn_warning=0.0)
        for cid, face in (("ann", 15), ("bob", 10)):
            n("add_combatant", id=cid, display_name=cid.title(), faces=[face])
        n("start_combat")
        seen = scenario(d, "timer", tmp_path, token=d.token("narrator"), combat="clock")
        view = n.client.call("get_combat", combat="clock")["view"]
    assert seen["steps"] == [
        "now: Each turn lasts 600 s.",
        "0.5 refused: A turn timer is a whole number of seconds from 1 to 86400.",
        "set: Each turn lasts 2 s.",
        "expired: Ann's turn, Round 2",
        "off: Turns are not timed.",
    ]
    assert seen["sizes"]["document"] <= seen["sizes"]["viewport"]
    assert dict(view["options"])["turn_time_limit"] is None
    assert view["turn"]["deadline"] is None
