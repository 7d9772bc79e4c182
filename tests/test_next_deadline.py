"""R13: the host learns from the state when to tick next; the engine itself never waits."""

from __future__ import annotations

from story import Story
from turnkeeper_engine import commands as c
from turnkeeper_engine import next_deadline
from turnkeeper_engine.model import TriggerFacts


def _timed(**options: object) -> Story:
    s = Story("marvel", **options)
    s.add("a", init_mod=2)
    s.add("b", init_mod=1)
    s.roll("a", 6, 6, 6)
    s.roll("b", 2, 2, 2)
    s.do(c.StartCombat(), now=100.0)
    return s


def test_r13_next_deadline_is_the_warning_then_the_expiry() -> None:
    s = _timed(turn_time_limit=60.0, turn_warning=15.0)
    assert next_deadline(s.state) == 145.0
    s.do(c.Tick(), now=145.0)
    assert next_deadline(s.state) == 160.0


def test_r13_no_timer_no_window_means_no_deadline() -> None:
    assert next_deadline(_timed().state) is None


def test_r13_an_open_window_deadline_comes_first_and_pauses_the_turn_timer() -> None:
    s = _timed(turn_time_limit=60.0, window_deadline=5.0)
    s.do(c.AnnounceTrigger(TriggerFacts("announced", "b")), now=110.0)
    assert next_deadline(s.state) == 115.0
