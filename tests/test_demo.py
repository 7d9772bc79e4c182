"""`turnkeeper demo` plays the seeds' examples and narrates them with the seeds' numbers."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from turnkeeper import demo
from turnkeeper.demo import run

SKIRMISH = "### Bots: a skirmish (SensibleBot players and NPCs over the socket)"
CODE = re.compile(r"\b[a-z]+_[a-z_]+\b")
"""A protocol value such as ``combat_ended`` or ``bonus_round``: no English word has ``_``."""


def _log(locale: str = "en") -> list[str]:
    lines: list[str] = []
    run(lines.append, locale=locale)
    return lines


def _seed_scenes(log: list[str]) -> list[str]:
    """The scripted scenes: every line before the bots' skirmish, whose interleaving (and the
    daemon's dice) vary from run to run by design."""
    starts = [i for i, line in enumerate(log) if line.startswith("### Bots: ")]
    assert len(starts) == 1, starts
    return log[: starts[0]]


def test_demo_narrates_bank_robbery_order_and_bonus_round() -> None:
    log = _log()
    assert (
        "Spider-Man initiative: d616 [6, 5, M] +3 = 20, FANTASTIC (dice supplied by peter)" in log
    )
    assert (
        "Initiative order: Spider-Man, Sabretooth, Wolverine, Doctor Octopus. "
        "Bonus round for Spider-Man, Doctor Octopus."
    ) in log


def test_demo_narrates_mandarin_sequence_and_cancelled_attack() -> None:
    log = "\n".join(_log())
    assert "Order: Sharon Carter, Captain America, The Mandarin." in log
    assert "Sharon Carter d616 [6, 6, 5] +2 = 19" in log
    # The defeat first, then what it cancels.
    assert "The Mandarin is defeated.\n    The Mandarin's reaction is cancelled (defeated)." in log
    assert ">> The Mandarin interrupts" not in log


def test_demo_narrates_dnd3e_ready_delay_refocus_and_floor() -> None:
    log = "\n".join(_log())
    assert "Tordek now acts at 12: Lidda, Tordek, Goblin shaman, Mialee." in log
    assert "Mialee now acts at 23" in log
    assert "Tordek forfeits the round's action." in log
    # The bundled dnd3e-ready plugin computes the distraction's Concentration DC (R11).
    assert "if it hits for 7 damage: Concentration DC 10 + 7 + 1 = 18; Goblin shaman rolls" in log


def test_demo_ends_with_a_skirmish_bots_play_until_the_narrator_ends_it() -> None:
    log = _log()
    scene = log[log.index(SKIRMISH) :]
    # Each player's bot acts for its own character, the narrator's for Hydra (lines of their
    # own actions: attacks, moves, holds, reservations).
    for name in ("Spider-Man", "Hawkeye", "Crossbones"):
        assert any(line.startswith(f"    {name} ") for line in scene), name
    assert "-- Round 3 --" in scene
    assert "-- Round 5 --" not in scene
    assert scene[-1] == "== The combat is over =="


def test_demo_command_runs_from_the_console_entry_point() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from turnkeeper.cli import main; raise SystemExit(main(['demo']))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "== The combat is over ==" in done.stdout
    assert "with an edge: the target is Surprised" in done.stdout


@pytest.mark.parametrize("locale", ["en", "pt-BR"])
def test_the_seed_scenes_log_is_the_same_on_every_run(locale: str) -> None:
    """Every die of the scripted scenes is supplied, the dnd3e-ready plugin's (the goblin
    shaman's Concentration check) included."""
    first, second = _seed_scenes(_log(locale)), _seed_scenes(_log(locale))
    assert first == second
    assert any("Concentration" in line or "Concentração" in line for line in first)


def test_the_english_log_shows_no_protocol_code_nor_internal_id() -> None:
    log = _log()
    assert not [line for line in log if CODE.search(line)]
    assert "  Order unchanged: Captain America, Hydra agent." in log
    assert "  Order now: Mialee, Tordek, Goblin shaman, Lidda." in log
    assert "  Spider-Man's turn ends (end of combat)." in log
    assert "    Mialee refocuses [full-round action]." in log
    assert "Sabretooth initiative: d616 [5, 4, 6] +2 = 17 (dice supplied by the narrator)" in log
    assert "== Combat 'cave' (D&D 3e SRD) ==" in log
    assert (
        "  (Bots play from here: one for each player (Spider-Man, Hawkeye) and one for the "
        "narrator (Crossbones, the Hydra agents); the narrator ends the fight after round 3.)"
    ) in log


def test_the_demo_plays_through_without_the_dnd3e_ready_plugin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The plugin is a distribution of its own: without it the cave scene has no Concentration
    # check to wait for, and the demo goes on rather than waiting for one.
    monkeypatch.setattr(demo, "_SEEDED_PLUGINS", ())
    monkeypatch.setenv("TURNKEEPER_NO_PLUGINS", "dnd3e-ready")
    lines: list[str] = []
    run(lines.append)
    log = "\n".join(lines)
    assert "Concentration" not in log
    assert "Lidda" in log
