"""Every worked example of the seed rule texts, reproduced with the seed's own numbers."""

from __future__ import annotations

from story import Story, names, of, player
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import ActionSpec, Predicate, Trigger, TriggerFacts


def test_seed_bonus_round_spider_man_and_doctor_octopus() -> None:
    """Spider-Man 20 (Fantastic), Sabretooth 17, Wolverine 15, Doctor Octopus 14 (Fantastic)."""
    s = Story("marvel")
    s.add("spidey", "Spider-Man", controller="peter", player_character=True, init_mod=3)
    s.add("wolverine", "Wolverine", controller="logan", player_character=True, init_mod=2)
    s.add("ock", "Doctor Octopus", init_mod=1)
    s.add("sabretooth", "Sabretooth", init_mod=2)
    # The players roll their own dice; the narrator rolls for the villains.
    s.do(c.RollInitiative("spidey", faces=(6, 5, 1)), player("peter"))  # 6+5+M(6)+3
    s.do(c.RollInitiative("wolverine", faces=(5, 4, 4)), player("logan"))  # 13+2
    s.dice.push(3, 4, 1)  # 3+4+M(6)+1
    s.roll("ock")
    s.dice.push(6, 5, 4)  # 15+2
    s.roll("sabretooth")
    checks = {m.id: m.check for m in s.state.combatants}
    totals = {i: (k.total, k.fantastic) for i, k in checks.items() if k is not None}
    assert totals == {
        "spidey": (20, True),
        "wolverine": (15, False),
        "ock": (14, True),
        "sabretooth": (17, False),
    }

    started = s.do(c.StartCombat())
    (combat,) = of(started, ev.CombatStarted)
    assert combat.order == ("spidey", "sabretooth", "wolverine", "ock")
    assert combat.bonus == ("spidey", "ock")
    assert of(started, ev.RoundStarted)[0].round == 0
    assert s.state.phase == "bonus_round"

    assert s.run_round() == ["spidey", "ock"]
    assert s.state.round == 1
    assert s.state.phase == "rounds"
    assert s.run_round() == ["spidey", "sabretooth", "wolverine", "ock"]


def _cap_and_hydra() -> Story:
    s = Story("marvel")
    s.add("cap", "Captain America", controller="steve", player_character=True, init_mod=3)
    s.add("agent", "Hydra agent", init_mod=1)
    s.do(c.RollInitiative("cap", faces=(6, 5, 4)), player("steve"))  # 18
    s.dice.push(3, 3, 3)  # 10
    s.roll("agent")
    s.do(c.StartCombat())
    assert s.current == "cap"
    return s


CORNER = Trigger(
    "anyone who comes around the corner after him",
    Predicate(events=("move",), zones=("corner",)),
)


def test_seed_captain_america_reserved_punch_around_the_corner() -> None:
    s = _cap_and_hydra()
    steve = player("steve")
    s.do(c.DeclareAction(s.turn, ActionSpec("move", description="races around a corner")), steve)
    reserved = s.do(
        c.Reserve(s.turn, "standard", ActionSpec("attack", description="punch"), CORNER), steve
    )
    (event,) = of(reserved, ev.ActionReserved)
    reservation = event.reservation
    assert (reservation.reserved_type, reservation.action.kind) == ("standard", "attack")
    s.end_turn(steve)
    assert s.current == "agent"
    order_before = s.state.order

    moved = s.do(
        c.DeclareAction(s.turn, ActionSpec("move", description="follows him", zone="corner"))
    )
    assert names(moved) == ["action_declared", "window_opened"]
    window = of(moved, ev.WindowOpened)[0].window
    assert window.offered == ("cap",)

    claimed = s.do(c.ClaimReaction(window.id, "cap", reservation.id), steve)
    assert of(claimed, ev.ReactionStarted)[0].combatant == "cap"
    assert of(claimed, ev.ReactionStarted)[0].action.description == "punch"
    assert "reaction_spent" in names(claimed)
    assert "action_resolved" not in names(claimed)  # the punch lands before the agent's move
    # The agent's turn is interrupted, not ended.
    assert s.turn.combatant == "agent"
    assert not of(claimed, ev.TurnEnded)
    assert s.refuse(c.EndTurn(s.turn)).code == "window_open"

    finished = s.do(c.FinishReaction(window.id, "cap"), steve)
    assert names(finished) == ["reaction_finished", "sequence_ended", "action_resolved"]
    assert of(finished, ev.ActionResolved)[0].combatant == "agent"
    assert s.state.turn is not None
    assert s.turn.round == 1
    assert s.current == "agent"
    assert s.state.window is None
    assert s.state.order == order_before


def test_seed_movement_action_cannot_reserve_an_attack() -> None:
    s = _cap_and_hydra()
    error = s.refuse(
        c.Reserve(s.turn, "movement", ActionSpec("attack", description="punch"), CORNER),
        player("steve"),
    )
    assert error.code == "action_type_mismatch"


def _mandarin_dialogue() -> tuple[Story, str]:
    """Captain America, Sharon Carter and the Mandarin all reserve their standard action during
    the dialogue; the Mandarin then attacks Carter and all three claim."""
    s = Story("marvel")
    s.add("cap", "Captain America", controller="steve", player_character=True, init_mod=3)
    s.add("carter", "Sharon Carter", controller="sharon", player_character=True, init_mod=3)
    s.add("mandarin", "The Mandarin", init_mod=2)
    s.roll("cap", 6, 6, 5)  # 20
    s.roll("carter", 6, 6, 4)  # 19
    s.roll("mandarin", 5, 5, 5)  # 17
    s.do(c.StartCombat())
    against_mandarin = Trigger(
        "the Mandarin attacks", Predicate(actors=("mandarin",), kinds=("attack",))
    )
    for who, user, action in (
        (
            "cap",
            "steve",
            ActionSpec("attack", description="hurls his shield", targets=("mandarin",)),
        ),
        ("carter", "sharon", ActionSpec("escape", description="elbows her way free")),
    ):
        assert s.current == who
        s.do(c.Reserve(s.turn, "standard", action, against_mandarin), player(user))
        s.end_turn(player(user))
    assert s.current == "mandarin"
    s.do(
        c.Reserve(
            s.turn,
            "standard",
            ActionSpec("attack", description="disintegrate", targets=("carter",)),
            Trigger("the time for talk is over"),
        )
    )
    ids = {r.combatant: r.id for r in s.state.reservations}
    opened = s.do(
        c.AnnounceTrigger(
            TriggerFacts("attack", "mandarin", "attack", ("carter",), text="attacks Carter"),
            offer=("mandarin",),
        )
    )
    window = of(opened, ev.WindowOpened)[0].window
    assert set(window.offered) == {"cap", "carter", "mandarin"}
    s.do(c.ClaimReaction(window.id, "carter", ids["carter"]), player("sharon"))
    s.do(c.ClaimReaction(window.id, "cap", ids["cap"]), player("steve"))
    # Fresh checks, rolled in claim order: Carter 19, Captain America 18, the Mandarin 15.
    s.dice.push(6, 5, 5, 6, 5, 4, 5, 4, 4)
    closed = s.do(c.ClaimReaction(window.id, "mandarin", ids["mandarin"]))
    (ordered,) = of(closed, ev.SequenceOrdered)
    assert {i: check.total for i, check in ordered.checks} == {
        "carter": 19,
        "cap": 18,
        "mandarin": 15,
    }
    assert ordered.sequence == ("carter", "cap", "mandarin")
    assert of(closed, ev.ReactionStarted)[0].combatant == "carter"
    finished = s.do(c.FinishReaction(window.id, "carter"), player("sharon"))
    assert of(finished, ev.ReactionStarted)[0].combatant == "cap"
    return s, window.id


def test_seed_mandarin_knocked_out_before_his_reserved_attack() -> None:
    s, window = _mandarin_dialogue()
    order = s.state.order
    defeated = s.do(c.DefeatCombatant("mandarin"))
    (cancelled,) = of(defeated, ev.ReactionCancelled)
    assert (cancelled.combatant, cancelled.window) == ("mandarin", window)
    done = s.do(c.FinishReaction(window, "cap"), player("steve"))
    started = [e.combatant for e in of(s.log, ev.ReactionStarted)]
    assert started == ["carter", "cap"]  # his attack never happens
    assert "sequence_ended" in names(done)
    assert s.state.window is None
    # Nobody's standing order changed.
    assert s.state.order == order


def test_seed_mandarin_fight_over_before_his_reserved_attack() -> None:
    s, window = _mandarin_dialogue()
    ended = s.do(c.EndCombat())
    cancelled = {(e.combatant, e.window, e.reason) for e in of(ended, ev.ReactionCancelled)}
    assert ("mandarin", window, "combat_ended") in cancelled
    assert s.state.phase == "ended"
    assert [e.combatant for e in of(s.log, ev.ReactionStarted)] == ["carter", "cap"]


def test_seed_invisible_woman_surprises_doctor_doom() -> None:
    s = Story("marvel")
    s.add("reed", "Mister Fantastic", controller="reed", player_character=True, init_mod=2)
    s.add("sue", "Invisible Woman", controller="sue", player_character=True, init_mod=2)
    s.add("doom", "Doctor Doom", init_mod=3)
    s.roll("reed", 6, 6, 5)  # 19
    s.roll("sue", 6, 5, 5)  # 18
    s.roll("doom", 4, 4, 4)  # 15
    s.do(c.StartCombat())
    s.end_turn()  # Mister Fantastic
    assert s.current == "sue"
    # Doom fails to detect her: the narrator rules him Surprised by her.
    surprised = s.do(c.Surprise("doom", ("sue",)))
    (applied,) = of(surprised, ev.ConditionApplied)
    assert applied.condition.type == "surprised"
    assert applied.condition.target == "doom"
    assert applied.condition.surprisers == ("sue",)
    attack = s.do(c.DeclareAction(s.turn, ActionSpec("attack", targets=("doom",))), player("sue"))
    assert of(attack, ev.ActionDeclared)[0].edges == ("surprised:doom",)
    # It lasts until the start of her next turn, not before.
    s.end_turn(player("sue"))
    assert s.current == "doom"
    assert [k.type for k in s.state.conditions] == ["surprised"]
    s.end_turn()
    assert s.current == "reed"
    assert s.state.round == 2
    assert [k.type for k in s.state.conditions] == ["surprised"]
    assert not of(s.log, ev.ConditionExpired)
    turn = s.end_turn()
    assert s.current == "sue"
    (expired,) = of(turn, ev.ConditionExpired)
    assert (expired.combatant, expired.condition) == ("doom", applied.condition.id)
    # At the start of her turn: start-of-turn bookkeeping, told just before turn_started.
    assert names(turn)[-2:] == ["condition_expired", "turn_started"]
    assert s.state.conditions == ()


def test_r12_mandarin_claimants_may_roll_their_own_fresh_dice() -> None:
    """R2 with R12: the players at the table roll the Mandarin sequence's checks themselves."""
    s = Story("marvel")
    s.add("carter", "Sharon Carter", controller="sharon", player_character=True, init_mod=2)
    s.add("cap", "Captain America", controller="steve", player_character=True, init_mod=3)
    s.add("mandarin", "The Mandarin", init_mod=3)
    s.roll("carter", 3, 3, 3)
    s.roll("cap", 4, 4, 4)
    s.roll("mandarin", 5, 5, 5)
    s.do(c.StartCombat())
    talk = Trigger("the Mandarin attacks")
    for _ in range(3):
        s.do(c.Reserve(s.turn, "standard", ActionSpec("attack"), talk))
        if s.current != "carter":
            s.end_turn()
    facts = TriggerFacts("announced", "mandarin", "attack", ("carter",))
    s.do(c.AnnounceTrigger(facts, offer=("carter", "cap", "mandarin")))
    window = s.state.window
    assert window is not None
    mine = {r.combatant: r.id for r in s.state.reservations}
    bad = s.refuse(
        c.ClaimReaction(window.id, "carter", mine["carter"], faces=(6, 6, 7)), player("sharon")
    )
    assert (bad.code, bad.field) == ("invalid_faces", "faces[2]")
    s.do(c.ClaimReaction(window.id, "carter", mine["carter"], faces=(6, 6, 5)), player("sharon"))
    s.do(c.ClaimReaction(window.id, "cap", mine["cap"], faces=(5, 5, 5)), player("steve"))
    s.dice.push(4, 4, 4)
    events = s.do(c.ClaimReaction(window.id, "mandarin", mine["mandarin"]))
    (ordered,) = of(events, ev.SequenceOrdered)
    assert ordered.sequence == ("carter", "cap", "mandarin")
    checks = dict(ordered.checks)
    assert (checks["carter"].total, checks["carter"].supplied_by) == (19, "sharon")
    assert (checks["cap"].total, checks["mandarin"].total) == (18, 15)
    assert checks["mandarin"].supplied_by is None
