"""`turnkeeper demo` plays the seeds' examples and narrates them with the seeds' numbers."""

from __future__ import annotations

import subprocess
import sys

from turnkeeper.demo import run


def _log() -> list[str]:
    lines: list[str] = []
    run(lines.append)
    return lines


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
    assert "The Mandarin's reaction is cancelled (defeated)." in log
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
    scene = log[log.index("### Bots: a skirmish (SensibleBot players and NPCs over the socket)") :]
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
