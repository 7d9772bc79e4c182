"""R12 Trigger windows and simultaneous reactions."""

from __future__ import annotations

import pytest

from story import Story, names, of
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import (
    ActionSpec,
    Predicate,
    Reservation,
    Trigger,
    TriggerFacts,
    Window,
)

BOTH = pytest.mark.parametrize("ruleset", ["marvel", "dnd3e"])
NUMBERS = {"ana": 15, "ben": 12, "cal": 9}
MARVEL_FACES = {"ana": (5, 5, 5), "ben": (3, 4, 5), "cal": (2, 3, 4)}


def fight(ruleset: str, **options: object) -> Story:
    """Ana 15, Ben 12, Cal 9, nobody Fantastic; round 1, Ana's turn."""
    story = Story(ruleset, **options)
    for cid, number in NUMBERS.items():
        story.add(cid)
        story.roll(cid, *(MARVEL_FACES[cid] if ruleset == "marvel" else (number,)))
    story.do(c.StartCombat())
    assert story.current == "ana"
    return story


def reserve(
    story: Story, predicate: Predicate | None, text: str = "when it happens"
) -> Reservation:
    action = ActionSpec("attack", description="strike")
    events = story.do(c.Reserve(story.turn, "standard", action, Trigger(text, predicate)))
    return of(events, ev.ActionReserved)[0].reservation


def announce(
    story: Story, *offer: str, event: str = "announced", actor: str | None = None
) -> Window:
    facts = TriggerFacts(event, actor=actor, text="something happens")
    events = story.do(c.AnnounceTrigger(facts, offer))
    return of(events, ev.WindowOpened)[0].window


def claim(story: Story, window: Window, who: str) -> list[ev.Event]:
    reservation = next((r.id for r in story.state.reservations if r.combatant == who), None)
    action = None if reservation else ActionSpec("attack", description="react")
    return story.do(c.ClaimReaction(window.id, who, reservation=reservation, action=action))


def pass_(story: Story, window: Window, who: str) -> list[ev.Event]:
    return story.do(c.PassReaction(window.id, who))


def finish(story: Story, window: Window, who: str) -> list[ev.Event]:
    return story.do(c.FinishReaction(window.id, who))


def two_reservers(ruleset: str) -> Story:
    """Ana and Ben each keep an attack for Cal's attack; round 1, Cal's turn."""
    story = fight(ruleset)
    watch = Predicate(actors=("cal",), kinds=("attack",))
    reserve(story, watch)
    story.end_turn()
    reserve(story, watch)
    story.end_turn()
    assert story.current == "cal"
    return story


def cal_attacks(story: Story) -> Window:
    events = story.do(c.DeclareAction(story.turn, ActionSpec("attack", targets=("ana",))))
    return of(events, ev.WindowOpened)[0].window


# -------------------------------------------------------------------------- opening a window


@BOTH
def test_r12_window_opens_on_action_declared(ruleset: str) -> None:
    story = two_reservers(ruleset)
    action = ActionSpec("attack", description="blast", targets=("ana",), zone="roof")
    events = story.do(c.DeclareAction(story.turn, action))
    assert names(events) == ["action_declared", "window_opened"]
    window = of(events, ev.WindowOpened)[0].window
    assert window.facts == TriggerFacts(
        "action_declared", "cal", "attack", ("ana",), (), "roof", "blast"
    )
    assert window.action == ActionSpec("attack", "standard", "blast", ("ana",), zone="roof")
    assert window.offered == ("ana", "ben")
    assert window.status == "open"


@BOTH
def test_r12_window_opens_on_a_move(ruleset: str) -> None:
    story = fight(ruleset)
    reserve(story, Predicate(events=("move",)))
    story.end_turn()
    events = story.do(c.DeclareAction(story.turn, ActionSpec("move", zone="hall")))
    window = of(events, ev.WindowOpened)[0].window
    assert (window.facts.event, window.facts.actor, window.facts.zone) == ("move", "ben", "hall")
    assert window.offered == ("ana",)


@BOTH
def test_r12_window_opens_on_a_turn_starting(ruleset: str) -> None:
    story = fight(ruleset)
    reserve(story, Predicate(events=("turn_started",), actors=("cal",)))
    events = story.end_turn()  # Ben's turn starting does not match
    assert "window_opened" not in names(events)
    events = story.end_turn()
    assert names(events)[-2:] == ["turn_started", "window_opened"]
    window = of(events, ev.WindowOpened)[0].window
    assert (window.facts.event, window.facts.actor, window.offered) == (
        "turn_started",
        "cal",
        ("ana",),
    )
    cal_turn = story.turn
    error = story.refuse(c.DeclareAction(cal_turn, ActionSpec("attack")))
    assert error.code == "window_open"
    events = claim(story, window, "ana")
    assert of(events, ev.ReactionStarted)[0].combatant == "ana"
    events = finish(story, window, "ana")
    # dnd3e: the readied action also puts Ana just ahead of Cal (R11).
    moved = ["place_changed"] if ruleset == "dnd3e" else []
    assert names(events) == ["reaction_finished", *moved, "sequence_ended"]
    assert story.turn == cal_turn  # Cal's turn goes on from its start
    story.do(c.DeclareAction(cal_turn, ActionSpec("attack")))


@BOTH
def test_r12_narrator_announces_a_trigger_with_offer(ruleset: str) -> None:
    story = fight(ruleset)
    reserve(story, Predicate(events=("alarm",)))  # Ana's reservation matches the announcement
    story.end_turn()
    window = announce(story, "cal", event="alarm")
    assert window.facts == TriggerFacts("alarm", text="something happens")
    assert window.offered == ("ana", "cal")  # in initiative order
    assert window.action is None


@BOTH
def test_r12_only_matching_reservations_are_offered(ruleset: str) -> None:
    story = fight(ruleset)
    reserve(story, Predicate(kinds=("attack",)))
    story.end_turn()
    reserve(story, Predicate(kinds=("cast", "power")))
    story.end_turn()
    window = cal_attacks(story)
    assert window.offered == ("ana",)


@BOTH
def test_r12_no_match_no_window_the_action_goes_ahead(ruleset: str) -> None:
    story = fight(ruleset)
    reserve(story, Predicate(actors=("ben",), kinds=("attack",)))
    story.end_turn()
    story.end_turn()
    events = story.do(c.DeclareAction(story.turn, ActionSpec("attack")))
    assert names(events) == ["action_declared", "action_resolved"]
    assert story.state.window is None


# --------------------------------------------------------------------------- closing a window


@BOTH
def test_r12_window_closes_when_every_offered_answered(ruleset: str) -> None:
    story = two_reservers(ruleset)
    window = cal_attacks(story)
    events = pass_(story, window, "ben")
    assert "window_closed" not in names(events)
    assert story.state.window is not None
    assert story.state.window.status == "open"
    events = claim(story, window, "ana")
    closed = of(events, ev.WindowClosed)
    assert [(e.window, e.reason) for e in closed] == [(window.id, "answered")]
    assert of(events, ev.SequenceOrdered)[0].sequence == ("ana",)


@BOTH
def test_r12_everyone_passes_the_action_goes_ahead(ruleset: str) -> None:
    story = two_reservers(ruleset)
    window = cal_attacks(story)
    pass_(story, window, "ana")
    events = pass_(story, window, "ben")
    assert names(events) == ["reaction_passed", "window_closed", "action_resolved"]
    assert story.state.window is None


@BOTH
def test_r12_narrator_closes_the_window(ruleset: str) -> None:
    story = two_reservers(ruleset)
    window = cal_attacks(story)
    claim(story, window, "ben")
    events = story.do(c.CloseWindow(window.id))
    assert [e.reason for e in of(events, ev.WindowClosed)] == ["narrator"]
    assert of(events, ev.SequenceOrdered)[0].sequence == ("ben",)
    error = story.refuse(c.ClaimReaction(window.id, "ana", reservation="r1"))
    assert error.code == "window_closed"


@BOTH
def test_r12_window_deadline_keeps_it_open_until_tick(ruleset: str) -> None:
    story = fight(ruleset, window_deadline=10)
    r = reserve(story, None, "if Ben attacks")  # no predicate: never offered by the engine
    story.end_turn()
    story.now = 100.0
    events = story.do(c.DeclareAction(story.turn, ActionSpec("attack")))
    window = of(events, ev.WindowOpened)[0].window  # nobody offered, but people get time
    assert (window.offered, window.deadline) == ((), 110.0)
    assert story.do(c.Tick(), now=109.5) == []
    assert story.state.window is not None
    story.do(c.ClaimReaction(window.id, "ana", reservation=r.id))
    assert story.state.window.status == "open"
    events = story.do(c.Tick(), now=110.0)
    assert [e.reason for e in of(events, ev.WindowClosed)] == ["deadline"]
    assert of(events, ev.ReactionStarted)[0].combatant == "ana"
    assert of(events, ev.ActionResolved) == []


@BOTH
def test_r12_window_deadline_closes_with_offered_unanswered(ruleset: str) -> None:
    story = fight(ruleset, window_deadline=5)
    reserve(story, Predicate(kinds=("attack",)))
    story.end_turn()
    events = story.do(c.DeclareAction(story.turn, ActionSpec("attack")))
    window = of(events, ev.WindowOpened)[0].window
    assert window.offered == ("ana",)
    events = story.do(c.Tick(), now=5.0)
    assert [e.reason for e in of(events, ev.WindowClosed)] == ["deadline"]
    assert of(events, ev.ActionResolved)[0].combatant == "ben"
    assert story.state.window is None


# ------------------------------------------------------------------------- resolving claims


@BOTH
def test_r12_claims_in_one_window_are_simultaneous(ruleset: str) -> None:
    story = two_reservers(ruleset)
    window = cal_attacks(story)
    events = claim(story, window, "ben")
    assert names(events)[-1] != "reaction_started"
    assert of(events, ev.ReactionStarted) == []
    assert story.state.window is not None
    assert story.state.window.status == "open"


def mandarin() -> Story:
    """The seed's Mandarin: Captain America 18, the Mandarin 16 and Sharon Carter 11 all reserve
    their standard action during the dialogue; it is Carter's turn."""
    story = Story("marvel")
    for cid, name, mod, faces in (
        ("cap", "Captain America", 3, (4, 5, 6)),
        ("mandarin", "The Mandarin", 1, (5, 5, 5)),
        ("carter", "Sharon Carter", 2, (2, 3, 4)),
    ):
        story.add(cid, name, init_mod=mod)
        story.roll(cid, *faces)
    story.do(c.StartCombat())
    for action in (
        ActionSpec("attack", description="hurl the shield", targets=("mandarin",)),
        ActionSpec("attack", description="disintegrate Carter", targets=("carter",)),
        ActionSpec("escape", description="elbow free and dive to the ground"),
    ):
        trigger = Trigger("the time for talk is over")
        story.do(c.Reserve(story.turn, "standard", action, trigger))
        if story.current != "carter":
            story.end_turn()
    assert story.current == "carter"
    return story


def mandarin_sequence(story: Story) -> tuple[Window, list[ev.Event]]:
    window = announce(story, "cap", "mandarin", "carter")
    assert window.offered == ("cap", "mandarin", "carter")
    # Fresh checks: Carter 19, Captain America 18, the Mandarin 15.
    story.dice.push(4, 5, 6, 4, 4, 6, 5, 6, 6)
    for who in ("cap", "mandarin"):
        assert of(claim(story, window, who), ev.ReactionStarted) == []
    return window, claim(story, window, "carter")


def test_r12_marvel_two_or_more_claims_fresh_checks_order_the_sequence() -> None:
    story = mandarin()
    _, events = mandarin_sequence(story)
    ordered = of(events, ev.SequenceOrdered)[0]
    totals = {who: check.total for who, check in ordered.checks}
    assert totals == {"carter": 19, "cap": 18, "mandarin": 15}
    assert all(check.dice == "d616" for _, check in ordered.checks)
    assert ordered.sequence == ("carter", "cap", "mandarin")
    assert of(events, ev.ReactionStarted)[0].combatant == "carter"


def test_r12_marvel_single_claim_needs_no_fresh_check() -> None:
    story = mandarin()
    window = announce(story, "cap", "carter")
    pass_(story, window, "carter")
    events = claim(story, window, "cap")  # no dice lined up: none may be rolled
    ordered = of(events, ev.SequenceOrdered)[0]
    assert (ordered.sequence, ordered.checks) == (("cap",), ())


def test_r12_marvel_fresh_checks_use_the_tie_chain() -> None:
    story = fight("marvel")
    window = announce(story, "ana", "ben")
    story.dice.push(4, 4, 4, 3, 3, 1)  # Ana 12; Ben 3 + 3 + M = 12 and Fantastic
    claim(story, window, "ana")
    events = claim(story, window, "ben")
    ordered = of(events, ev.SequenceOrdered)[0]
    assert [check.total for _, check in ordered.checks] == [12, 12]
    assert ordered.sequence == ("ben", "ana")


def test_r12_marvel_seed_mandarin_knocked_out_before_his_reserved_attack() -> None:
    story = mandarin()
    window, _ = mandarin_sequence(story)
    events = finish(story, window, "carter")
    assert of(events, ev.ReactionStarted)[0].combatant == "cap"
    events = story.do(c.DefeatCombatant("mandarin"))
    cancelled = of(events, ev.ReactionCancelled)
    assert [(e.combatant, e.reason) for e in cancelled] == [("mandarin", "defeated")]
    events = finish(story, window, "cap")
    assert names(events) == ["reaction_finished", "sequence_ended"]
    assert story.current == "carter"


def test_r12_marvel_removed_before_resolving_is_cancelled() -> None:
    story = mandarin()
    window, _ = mandarin_sequence(story)
    events = story.do(c.RemoveCombatant("mandarin"))
    assert [e.combatant for e in of(events, ev.ReactionCancelled)] == ["mandarin"]
    finish(story, window, "carter")
    events = finish(story, window, "cap")
    assert of(events, ev.ReactionStarted) == []
    assert names(events)[-1] == "sequence_ended"


def test_r12_marvel_combat_ending_cancels_the_sequence() -> None:
    story = mandarin()
    window, _ = mandarin_sequence(story)
    finish(story, window, "carter")
    events = story.do(c.EndCombat())
    cancelled = {e.combatant: e.reason for e in of(events, ev.ReactionCancelled)}
    assert cancelled["mandarin"] == "combat_ended"
    assert of(events, ev.ReactionStarted) == []
    assert names(events)[-1] == "combat_ended"
    assert story.state.window is None


def test_r12_marvel_after_sequence_turn_resumes_and_order_unchanged() -> None:
    story = mandarin()
    before = {c.id: (c.place, c.check) for c in story.state.combatants}
    order = story.state.order
    carter_turn = story.turn
    window, _ = mandarin_sequence(story)
    for who in ("carter", "cap", "mandarin"):
        events = finish(story, window, who)
    assert names(events) == ["reaction_finished", "sequence_ended"]
    assert story.turn == carter_turn
    assert story.state.order == order
    assert {c.id: (c.place, c.check) for c in story.state.combatants} == before
    story.end_turn()
    assert story.run_round() == ["cap", "mandarin", "carter"]


def test_r12_dnd3e_claims_resolve_in_initiative_order_and_action_waits() -> None:
    story = two_reservers("dnd3e")
    window = cal_attacks(story)
    claim(story, window, "ben")
    events = claim(story, window, "ana")  # no dice lined up: none may be rolled
    ordered = of(events, ev.SequenceOrdered)[0]
    assert (ordered.sequence, ordered.checks) == (("ana", "ben"), ())
    events += finish(story, window, "ana")
    assert "action_resolved" not in names(events)
    events += finish(story, window, "ben")
    sequence = names(events)
    assert sequence.index("action_resolved") > max(
        i for i, n in enumerate(sequence) if n == "reaction_finished"
    )
    assert sequence[-1] == "action_resolved"


# ------------------------------------------------------------------------------- bad input


@BOTH
def test_r12_unknown_window(ruleset: str) -> None:
    story = two_reservers(ruleset)
    error = story.refuse(c.ClaimReaction("w999", "ana", reservation="r1"))
    assert (error.code, error.field) == ("unknown_window", "window")
    cal_attacks(story)
    for command in (
        c.ClaimReaction("w999", "ana", reservation="r1"),
        c.PassReaction("w999", "ana"),
        c.CloseWindow("w999"),
        c.FinishReaction("w999", "ana"),
    ):
        assert story.refuse(command).code == "unknown_window"


@BOTH
def test_r12_window_closed(ruleset: str) -> None:
    story = two_reservers(ruleset)
    window = cal_attacks(story)
    claim(story, window, "ana")
    story.do(c.CloseWindow(window.id))
    assert story.refuse(c.PassReaction(window.id, "ben")).code == "window_closed"
    assert story.refuse(c.CloseWindow(window.id)).code == "window_closed"


@BOTH
def test_r12_already_answered(ruleset: str) -> None:
    story = two_reservers(ruleset)
    window = cal_attacks(story)
    claim(story, window, "ana")
    assert story.refuse(c.PassReaction(window.id, "ana")).code == "already_answered"
    error = story.refuse(c.ClaimReaction(window.id, "ana", action=ActionSpec("attack")))
    assert error.code == "already_answered"


@BOTH
def test_r12_not_reacting(ruleset: str) -> None:
    story = two_reservers(ruleset)
    window = cal_attacks(story)
    if ruleset == "marvel":
        story.dice.push(4, 4, 4, 2, 2, 2)  # fresh checks: Ana 12, Ben 6
    claim(story, window, "ana")
    claim(story, window, "ben")
    assert story.state.window is not None
    first = story.state.window.sequence[0]
    other = "ben" if first == "ana" else "ana"
    assert story.refuse(c.FinishReaction(window.id, other)).code == "not_reacting"
    assert story.refuse(c.FinishReaction(window.id, "cal")).code == "not_reacting"


@BOTH
def test_r12_window_open_blocks_end_turn(ruleset: str) -> None:
    story = two_reservers(ruleset)
    window = cal_attacks(story)
    error = story.refuse(c.EndTurn(story.turn))
    assert (error.code, error.field) == ("window_open", "window")
    if ruleset == "marvel":
        story.dice.push(4, 4, 4, 2, 2, 2)  # fresh checks: Ana 12, Ben 6
    claim(story, window, "ana")
    claim(story, window, "ben")
    assert story.refuse(c.EndTurn(story.turn)).code == "window_open"  # still resolving
    error = story.refuse(c.AnnounceTrigger(TriggerFacts("announced")))
    assert error.code == "window_open"


@BOTH
def test_r12_every_offered_answer_closes_it_before_the_deadline(ruleset: str) -> None:
    story = fight(ruleset, window_deadline=10)
    r = reserve(story, Predicate(kinds=("attack",)))
    story.end_turn()
    events = story.do(c.DeclareAction(story.turn, ActionSpec("attack")))
    window = of(events, ev.WindowOpened)[0].window
    assert (window.offered, window.deadline) == (("ana",), 10.0)
    events = story.do(c.ClaimReaction(window.id, "ana", reservation=r.id), now=1.0)
    assert [e.reason for e in of(events, ev.WindowClosed)] == ["answered"]
    assert of(events, ev.ReactionStarted)[0].combatant == "ana"


@BOTH
def test_r12_with_no_deadline_time_never_closes_a_waiting_window(ruleset: str) -> None:
    story = fight(ruleset)
    reserve(story, Predicate(kinds=("attack",)))
    story.end_turn()
    events = story.do(c.DeclareAction(story.turn, ActionSpec("attack")))
    window = of(events, ev.WindowOpened)[0].window
    assert window.offered == ("ana",)
    assert story.do(c.Tick(), now=3600.0) == []
    assert story.state.window is not None
    assert story.state.window.status == "open"


@BOTH
def test_r12_a_predicate_on_action_declared_also_matches_a_move(ruleset: str) -> None:
    # A movement fires `move`, and it is a declared action too: "if Ben acts" (kind move, or
    # no kind) fires on it rather than silently never matching.
    for predicate in (
        Predicate(events=("action_declared",), kinds=("move",)),
        Predicate(events=("action_declared",), actors=("ben",)),
    ):
        story = fight(ruleset)
        reserve(story, predicate)
        story.end_turn()
        events = story.do(c.DeclareAction(story.turn, ActionSpec("move")))
        window = of(events, ev.WindowOpened)[0].window
        assert (window.facts.event, window.facts.kind, window.offered) == ("move", "move", ("ana",))


@BOTH
def test_r12_a_predicate_on_move_does_not_match_other_actions(ruleset: str) -> None:
    story = fight(ruleset)
    reserve(story, Predicate(events=("move",)))
    story.end_turn()
    events = story.do(c.DeclareAction(story.turn, ActionSpec("attack", targets=("cal",))))
    assert "window_opened" not in names(events)


def test_r12_marvel_who_cannot_claim_is_left_out_of_offered() -> None:
    # Ana's reservation matches Cal's attack, but her reaction is spent: she is not offered
    # the window, nor is she when the narrator names her in `offer`; Ben, defeated, neither.
    story = two_reservers("marvel")
    window = announce(story, "ana")
    jump = ActionSpec("attack", description="jumps in")
    story.do(c.ClaimReaction(window.id, "ana", action=jump))  # her reservation stays
    finish(story, window, "ana")
    story.do(c.DefeatCombatant("ben"))
    assert story.state.get("ana").reaction is False  # type: ignore[union-attr]
    assert [r.combatant for r in story.state.reservations] == ["ana"]
    events = story.do(c.DeclareAction(story.turn, ActionSpec("attack", targets=("ana",))))
    assert "window_opened" not in names(events)
    events = story.do(c.AnnounceTrigger(TriggerFacts("announced", text="a door"), ("ana",)))
    window = of(events, ev.WindowOpened)[0].window
    assert window.offered == ()
    assert names(events)[-1] == "window_closed"
