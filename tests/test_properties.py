"""Properties of the engine over random sequences of legal and illegal commands, for both
rulesets: R5 (one turn per round, transitions exactly once), R15 (undo restores the exact
state), R16 (who may do what), and that the events always fold to the engine's state."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from turnkeeper_engine import (
    BUNDLED_RULES,
    NARRATOR,
    Actor,
    Engine,
    RuleError,
    SeededDice,
    State,
    SystemDice,
    fold,
    view,
)
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.decide.checks import measure
from turnkeeper_engine.model import ActionSpec, Predicate, Trigger, TriggerFacts, TurnRef
from turnkeeper_engine.plain import encoded_size

MAX_COMBATANTS = 7
"""Enough for ties, groups and holds to interact; more only slows the search."""
TURN_LIMIT = 30.0
TURN_WARNING = 10.0

U1 = Actor("player", "u1")
U2 = Actor("player", "u2", "bridge:discord")
OBSERVER = Actor("observer")
ACTORS = [NARRATOR] * 6 + [U1, U2, OBSERVER]
"""Mostly the narrator, so that the combat moves; players and observers often enough to probe."""

PLAYER_COMMANDS = {
    c.RollInitiative,
    c.OrderTies,
    c.EndTurn,
    c.DeclareAction,
    c.Hold,
    c.TakeHeldTurn,
    c.Reserve,
    c.Refocus,
    c.ClaimReaction,
    c.PassReaction,
    c.FinishReaction,
}
"""R16: what a player may do for its own combatants; everything else is the narrator's."""

TRIGGER_EVENTS = ("action_declared", "move", "turn_started", "shout")
UNKNOWN = "ghost"


def acted_for(command: c.Command) -> tuple[str, ...]:
    if isinstance(command, c.OrderTies):
        return command.combatants
    turn = getattr(command, "turn", None)
    if isinstance(turn, TurnRef):
        return (turn.combatant,)
    return (command.combatant,) if hasattr(command, "combatant") else ()


def forbidden(command: c.Command, actor: Actor, state: State) -> str | None:
    """The field a refusal must name when ``actor`` may not issue ``command`` (R16), else None."""
    if state.phase == "ended" and not isinstance(command, c.Undo):
        return None  # the ended combat refuses everyone first
    if actor.role == "narrator":
        return None
    if actor.role == "observer" or type(command) not in PLAYER_COMMANDS:
        return "actor"
    for combatant_id in acted_for(command):
        mine = state.get(combatant_id)
        if mine is None or mine.controller is None or mine.controller != actor.user:
            return "combatant"
    return None


def turn_history_problems(events: list[ev.Event]) -> list[str]:
    """Check R5 over a history of events (undone commands already taken out)."""
    problems: list[str] = []
    completed: Counter[tuple[int, str]] = Counter()
    in_turn: str | None = None
    round_no: int | None = None
    round_open = False
    # Per round: who was in the order and active at its start, and who must be excused.
    order: list[str] = []
    status: dict[str, str] = {}
    holding: set[str] = set()
    expected: set[str] = set()
    excused: set[str] = set()
    turns_this_round: Counter[str] = Counter()

    for e in events:
        if isinstance(e, ev.CombatStarted | ev.CombatantSlotted | ev.PlaceChanged):
            order = list(e.order)
        if isinstance(e, ev.CombatantAdded) and not isinstance(e, ev.CombatantRevealed):
            status[e.combatant.id] = "active"
        if isinstance(e, ev.CombatantDefeated):
            status[e.combatant] = "defeated"
        if isinstance(e, ev.CombatantRevived):
            status[e.combatant] = "active"
        if isinstance(e, ev.CombatantRemoved):
            status[e.combatant] = "removed"
            order = [i for i in order if i != e.combatant]
        if isinstance(e, ev.TurnHeld):
            holding.add(e.combatant)
        if isinstance(e, ev.HoldLapsed | ev.HoldCancelled):
            holding.discard(e.combatant)
        if isinstance(e, ev.TurnStarted):
            holding.discard(e.combatant)
        for kind in (
            ev.TurnHeld,
            ev.HoldLapsed,
            ev.HoldCancelled,
            ev.TurnForgone,
            ev.CombatantSlotted,
            ev.CombatantRevived,
            ev.CombatantDefeated,
            ev.CombatantRemoved,
            ev.InitiativeRolled,
        ):
            if isinstance(e, kind):
                excused.update(e.subjects())

        if isinstance(e, ev.RoundStarted):
            if round_open:
                problems.append(f"round {e.round} started before round {round_no} ended")
            if in_turn is not None:
                problems.append(f"round {e.round} started during {in_turn}'s turn")
            if round_no is not None and e.round != round_no + 1:
                problems.append(f"round {e.round} follows round {round_no}")
            if round_no is None and e.round not in (0, 1):
                problems.append(f"the first round is {e.round}")
            round_no, round_open = e.round, True
            expected = {i for i in order if status.get(i) == "active" and i not in holding}
            excused = set()
            turns_this_round = Counter()
        elif isinstance(e, ev.RoundEnded):
            if not round_open or e.round != round_no:
                problems.append(f"round {e.round} ended while round {round_no} was not open")
            if in_turn is not None:
                problems.append(f"round {e.round} ended during {in_turn}'s turn")
            round_open = False
            if e.round != 0:  # the bonus round is only for the Fantastic (R7)
                for i in sorted(expected - excused):
                    if turns_this_round[i] != 1:
                        problems.append(f"{i} had {turns_this_round[i]} turns in round {e.round}")
        elif isinstance(e, ev.TurnStarted):
            if in_turn is not None:
                problems.append(f"{e.combatant}'s turn started during {in_turn}'s turn")
            if e.round != round_no:
                problems.append(f"a turn of round {e.round} started in round {round_no}")
            in_turn = e.combatant
        elif isinstance(e, ev.TurnEnded | ev.TurnHeld):
            if in_turn != e.combatant:
                problems.append(f"{e.name} of {e.combatant} during {in_turn}'s turn")
            in_turn = None
            if isinstance(e, ev.TurnEnded) and e.reason != "combat_ended":
                completed[(e.round, e.combatant)] += 1
                turns_this_round[e.combatant] += 1
                if completed[(e.round, e.combatant)] > 1:
                    problems.append(f"{e.combatant} took two turns in round {e.round}")
        elif isinstance(e, ev.CombatEnded):
            if in_turn is not None:
                problems.append(f"combat ended during {in_turn}'s turn without turn_ended")
            in_turn = None
    return problems


class CombatMachine(RuleBasedStateMachine):
    """Drives one combat with random commands; subclasses pick the ruleset."""

    ruleset = ""

    def __init__(self) -> None:
        super().__init__()
        self.engine = Engine(SystemDice(), rules=BUNDLED_RULES)
        self.now = 0.0
        self.log: list[ev.Event] = []
        self.effective: list[list[ev.Event]] = []
        self.history: list[State] = []
        self.next_id = 0
        self.rules = BUNDLED_RULES.ruleset(self.ruleset)
        assert self.rules is not None

    # ------------------------------------------------------------------------------- running

    def run(
        self,
        command: c.Command,
        actor: Actor = NARRATOR,
        *,
        advance: float = 1.0,
        must_refuse: set[str] | None = None,
    ) -> list[ev.Event] | RuleError:
        """Run a command and check what every command must satisfy, accepted or refused."""
        self.now += advance
        before = self.engine.state
        should_name = forbidden(command, actor, before)
        result = self.engine.handle(command, self.now, actor)
        ended = before.phase == "ended" and not isinstance(command, c.Undo)
        if isinstance(result, RuleError):
            assert self.engine.state == before
            assert result.code
            assert result.message
            if ended:
                assert result.code == "combat_ended", result  # R1: nothing after the end
            elif should_name is not None:
                assert (result.code, result.field) == ("forbidden", should_name), result
            elif must_refuse is not None:
                assert result.code in must_refuse, result
            return result
        assert not ended, f"{command.name} was accepted after the combat ended"
        assert should_name is None, f"{actor} was allowed to {command.name}"
        assert must_refuse is None, f"{command.name} should have been refused"
        if not result:
            assert isinstance(command, c.Tick), f"{command.name} produced no events"
            assert self.engine.state == before
            return result
        recorded = [e for e in result if isinstance(e, ev.CommandRecorded)]
        assert recorded == [result[0]]
        assert (recorded[0].command, recorded[0].actor, recorded[0].at) == (
            command.name,
            actor,
            self.now,
        )
        self.log += result
        if isinstance(command, c.Undo):
            assert [e.name for e in result] == ["command_recorded", "command_undone"]
            # R15: exactly the state before the last recorded command.
            assert self.engine.state == self.history.pop()
            self.effective.pop()
        else:
            self.history.append(before)
            self.effective.append(result)
        return result

    @property
    def state(self) -> State:
        return self.engine.state

    def ids(self) -> list[str]:
        return [x.id for x in self.state.combatants]

    def some_id(self, data: st.DataObject, label: str = "combatant") -> str:
        # Mostly real combatants; now and then one that does not exist.
        return data.draw(st.sampled_from([*self.ids() * 4, UNKNOWN]), label=label)

    def actor(self, data: st.DataObject) -> Actor:
        return data.draw(st.sampled_from(ACTORS), label="actor")

    def turn_ref(self, data: st.DataObject) -> TurnRef:
        """Mostly the current turn; sometimes a stale or made-up one."""
        turn = self.state.turn
        if turn is not None and data.draw(st.integers(0, 7), label="stale?") > 0:
            return turn.ref
        round_no = self.state.round or 0
        return TurnRef(data.draw(st.integers(round_no - 1, round_no)), self.some_id(data))

    def stale(self, ref: TurnRef) -> bool:
        return self.state.turn is None or not self.state.turn.named_by(ref)

    def action(self, data: st.DataObject) -> ActionSpec:
        assert self.rules is not None
        kinds = sorted(self.rules.catalogue)
        kind = data.draw(st.sampled_from([*kinds, "juggle"]), label="kind")
        stated = data.draw(
            st.sampled_from([None] * 8 + [*self.rules.action_types, "bogus"]), label="type"
        )
        targets = data.draw(st.lists(st.sampled_from([*self.ids() * 4, UNKNOWN]), max_size=2))
        return ActionSpec(kind, stated, "does a thing", tuple(dict.fromkeys(targets)))

    # ----------------------------------------------------------------------------- the setup

    @initialize(
        seed=st.integers(0, 2**32 - 1),
        limit=st.sampled_from([None, TURN_LIMIT]),
        expiry=st.sampled_from(["end_turn", "hold"]),
        window_wait=st.sampled_from([0.0, 0.0, 5.0]),
        variant=st.sampled_from(["a", "b"]),
        count=st.integers(1, 4),
        start=st.sampled_from([True, True, True, True, False]),
        data=st.data(),
    )
    def create(
        self,
        seed: int,
        limit: float | None,
        expiry: str,
        window_wait: float,
        variant: str,
        count: int,
        start: bool,
        data: st.DataObject,
    ) -> None:
        self.engine = Engine(SeededDice(seed), rules=BUNDLED_RULES)
        options: dict[str, Any] = {
            "turn_time_limit": limit,
            "turn_warning": TURN_WARNING,
            "turn_expiry": expiry,
            "window_deadline": window_wait,
        }
        if self.ruleset == "marvel":
            options["reaction_refresh"] = "own_turn" if variant == "a" else "round_start"
        else:
            options["ready"] = "3.0" if variant == "a" else "3.5"
            options["delay"] = data.draw(st.sampled_from(["3.0", "3.5"]), label="delay")
        result = self.engine.handle(
            c.CreateCombat("prop", self.ruleset, tuple(options.items())), self.now
        )
        assert isinstance(result, list)
        self.log += result
        # Creating the combat is where undo stops: it is never taken out of the story.
        self.effective.append(result)
        for _ in range(count):
            self.add_combatant(data, NARRATOR)
        if start:
            self.run(c.StartCombat())

    # ------------------------------------------------------------------------------ combatants

    @precondition(lambda self: len(self.state.combatants) < MAX_COMBATANTS)
    @rule(data=st.data())
    def add_combatant(self, data: st.DataObject, actor: Actor | None = None) -> None:
        self.next_id += 1
        cid = f"k{self.next_id}"
        controller = data.draw(st.sampled_from([None, None, "u1", "u2"]), label="controller")
        self.run(
            c.AddCombatant(
                cid,
                cid.upper(),
                controller=controller,
                player_character=controller is not None,
                init_mod=data.draw(st.integers(-1, 3), label="init_mod"),
                dexterity=data.draw(st.sampled_from([10, 12, 14]), label="dex"),
                group=data.draw(st.sampled_from([None, None, None, "g1"]), label="group"),
            ),
            actor or self.actor(data),
        )

    @rule(data=st.data())
    def take_out_or_revive(self, data: st.DataObject) -> None:
        kind = data.draw(
            st.sampled_from([c.DefeatCombatant, c.ReviveCombatant, c.RemoveCombatant]),
            label="what",
        )
        self.run(kind(self.some_id(data)), self.actor(data))

    # ------------------------------------------------------------------------------ initiative

    @rule(data=st.data())
    def roll(self, data: st.DataObject) -> None:
        self.run(c.RollInitiative(self.some_id(data)), self.actor(data))

    @rule(data=st.data())
    def mark_surprised(self, data: st.DataObject) -> None:
        must = {"not_in_ruleset"} if self.ruleset == "dnd3e" else None
        self.run(c.MarkSurprised(self.some_id(data)), self.actor(data), must_refuse=must)

    @rule(data=st.data())
    def start(self, data: st.DataObject) -> None:
        self.run(c.StartCombat(), self.actor(data))

    # ---------------------------------------------------------------------------------- turns

    @rule(data=st.data())
    def end_turn(self, data: st.DataObject) -> None:
        ref = self.turn_ref(data)
        must = {"stale_turn", "wrong_phase"} if self.stale(ref) else None
        result = self.run(c.EndTurn(ref), self.actor(data), must_refuse=must)
        if isinstance(result, list) and result:
            # R5: a double "next" never skips anyone: the same end-turn again is refused.
            self.run(
                c.EndTurn(ref),
                NARRATOR,
                advance=0.0,
                must_refuse={"stale_turn", "wrong_phase"},
            )

    @precondition(lambda self: self.state.turn is not None)
    @rule()
    def next_turn(self) -> None:
        """The narrator ends the current turn: the clock has to move for rounds to happen."""
        self.run(c.EndTurn(self.engine.state.turn.ref))  # type: ignore[union-attr]

    @rule(data=st.data(), how=st.sampled_from(["open", "below", "above", "deep"]))
    def hold(self, data: st.DataObject, how: str) -> None:
        ref = self.turn_ref(data)
        me = self.state.get(ref.combatant)
        place = me.place if me is not None and me.place is not None else 10
        number = {"open": None, "below": place - 2, "above": place + 1, "deep": -40}[how]
        self.run(c.Hold(ref, number), self.actor(data))

    @rule(data=st.data(), when=st.sampled_from(["before", "after"]))
    def hold_with_plan(self, data: st.DataObject, when: str) -> None:
        """R9: the plan said with the hold, for any moment, passed or to come."""
        ref = self.turn_ref(data)
        command = c.Hold(ref, None, when, self.some_id(data, "other"))  # type: ignore[arg-type]
        self.run(command, self.actor(data))

    @rule(data=st.data(), when=st.sampled_from(["before", "after"]))
    def take_held_turn(self, data: st.DataObject, when: str) -> None:
        holders = [h.combatant for h in self.state.holds]
        who = data.draw(st.sampled_from([*holders * 4, *self.ids(), UNKNOWN]), label="holder")
        self.run(c.TakeHeldTurn(who, when, self.some_id(data, "other")), self.actor(data))  # type: ignore[arg-type]

    @rule(data=st.data())
    def declare(self, data: st.DataObject) -> None:
        self.run(c.DeclareAction(self.turn_ref(data), self.action(data)), self.actor(data))

    @rule(data=st.data())
    def refocus(self, data: st.DataObject) -> None:
        must = {"not_in_ruleset"} if self.ruleset == "marvel" else None
        self.run(c.Refocus(self.turn_ref(data)), self.actor(data), must_refuse=must)

    @rule(data=st.data())
    def reserve(self, data: st.DataObject) -> None:
        assert self.rules is not None
        reserved = data.draw(
            st.sampled_from([*self.rules.reservable_types({}) * 3, "movement", "move"]),
            label="reserved",
        )
        predicate = data.draw(
            st.one_of(
                st.none(),
                st.builds(
                    Predicate,
                    events=st.lists(st.sampled_from(TRIGGER_EVENTS), max_size=2).map(tuple),
                    actors=st.lists(st.sampled_from(self.ids() or [UNKNOWN]), max_size=1).map(
                        tuple
                    ),
                    kinds=st.lists(st.sampled_from(["attack", "move", "cast"]), max_size=1).map(
                        tuple
                    ),
                ),
            ),
            label="predicate",
        )
        self.run(
            c.Reserve(
                self.turn_ref(data),
                reserved,
                self.action(data),
                Trigger("when it happens", predicate),
            ),
            self.actor(data),
        )

    # ----------------------------------------------------------------------------- reactions

    def window_id(self, data: st.DataObject) -> str:
        w = self.state.window
        if w is not None and data.draw(st.integers(0, 5), label="real window?") > 0:
            return w.id
        return data.draw(st.sampled_from(["w1", "w999"]), label="window")

    @rule(data=st.data())
    def announce(self, data: st.DataObject) -> None:
        actor_id = data.draw(st.sampled_from([None, *self.ids()]), label="facts.actor")
        facts = TriggerFacts(
            data.draw(st.sampled_from(TRIGGER_EVENTS), label="event"),
            actor_id,
            data.draw(st.sampled_from([None, "attack", "move"]), label="facts.kind"),
        )
        offer = data.draw(st.lists(st.sampled_from(self.ids() or [UNKNOWN]), max_size=2))
        self.run(c.AnnounceTrigger(facts, tuple(dict.fromkeys(offer))), self.actor(data))

    @rule(data=st.data())
    def claim(self, data: st.DataObject) -> None:
        w = self.state.window
        offered = list(w.offered) if w is not None else []
        who = data.draw(st.sampled_from([*offered * 4, *self.ids(), UNKNOWN]), label="claimant")
        theirs = [r.id for r in self.state.reservations if r.combatant == who]
        reservation = data.draw(
            st.sampled_from([None, *theirs, *theirs, *theirs, "r999"]), label="reservation"
        )
        action = self.action(data) if data.draw(st.integers(0, 4)) > 0 else None
        self.run(c.ClaimReaction(self.window_id(data), who, reservation, action), self.actor(data))

    @rule(data=st.data())
    def pass_reaction(self, data: st.DataObject) -> None:
        w = self.state.window
        offered = list(w.offered) if w is not None else []
        who = data.draw(st.sampled_from([*offered * 4, *self.ids(), UNKNOWN]), label="passer")
        self.run(c.PassReaction(self.window_id(data), who), self.actor(data))

    @rule(data=st.data())
    def close_window(self, data: st.DataObject) -> None:
        self.run(c.CloseWindow(self.window_id(data)), self.actor(data))

    @rule(data=st.data())
    def finish_reaction(self, data: st.DataObject) -> None:
        w = self.state.window
        reacting = [w.sequence[w.index]] if w is not None and w.status == "resolving" else []
        who = data.draw(st.sampled_from([*reacting, *reacting, *self.ids(), UNKNOWN]))
        self.run(c.FinishReaction(self.window_id(data), who), self.actor(data))

    # Stories of several commands: uniform rule choice rarely lines these up by itself.

    def controller_or_narrator(self, data: st.DataObject, combatant_id: str) -> Actor:
        mine = self.state.get(combatant_id)
        if mine is not None and mine.controller is not None and data.draw(st.booleans()):
            return Actor("player", mine.controller)
        return NARRATOR

    @precondition(lambda self: self.state.turn is not None)
    @rule(data=st.data(), kind=st.sampled_from(["attack", "move"]))
    def ready_then_trigger(self, data: st.DataObject, kind: str) -> None:
        """A reservation whose predicate the next combatant's action matches (R10–R12)."""
        turn = self.state.turn
        assert turn is not None
        reserved = "standard"
        predicate = Predicate(events=("action_declared", "move"), kinds=(kind,))
        self.run(
            c.Reserve(
                turn.ref, reserved, ActionSpec("attack"), Trigger("when they act", predicate)
            ),
            self.controller_or_narrator(data, turn.combatant),
        )
        if self.state.turn is not None and self.state.window is None:
            self.run(c.EndTurn(self.state.turn.ref))
        if self.state.turn is not None and self.state.window is None:
            action = ActionSpec(kind)
            self.run(
                c.DeclareAction(self.state.turn.ref, action),
                self.controller_or_narrator(data, self.state.turn.combatant),
            )
        self.react(data)

    @precondition(lambda self: self.state.turn is not None)
    @rule(data=st.data())
    def announce_and_react(self, data: st.DataObject) -> None:
        offer = data.draw(st.lists(st.sampled_from(self.ids()), max_size=3, unique=True))
        actor_id = data.draw(st.sampled_from([None, *self.ids()]), label="facts.actor")
        self.run(c.AnnounceTrigger(TriggerFacts("shout", actor_id), tuple(offer)))
        self.react(data)

    def react(self, data: st.DataObject) -> None:
        """Answer an open window, then resolve its claims, mostly legally."""
        for _ in range(8):
            w = self.state.window
            if w is None:
                return
            step = data.draw(st.integers(0, 9), label="react step")
            if w.status == "resolving":
                reacting = w.sequence[w.index]
                if step == 0:
                    # R12: the interrupted turn cannot end while a reaction resolves.
                    self.run(
                        c.EndTurn(self.turn_ref(data)), must_refuse={"window_open", "stale_turn"}
                    )
                else:
                    who = self.controller_or_narrator(data, reacting)
                    self.run(c.FinishReaction(w.id, reacting), who)
                continue
            answered = {cl.combatant for cl in w.claims} | set(w.passes)
            waiting = [i for i in w.offered if i not in answered]
            if not waiting or step == 0:
                self.run(c.CloseWindow(w.id))
                continue
            who = data.draw(st.sampled_from(waiting), label="answers")
            actor = self.controller_or_narrator(data, who)
            if step < 4:
                self.run(c.PassReaction(w.id, who), actor)
                continue
            theirs = [r.id for r in self.state.reservations if r.combatant == who]
            reservation = theirs[0] if theirs and step < 8 else None
            self.run(c.ClaimReaction(w.id, who, reservation, ActionSpec("attack")), actor)

    @precondition(lambda self: self.state.turn is not None)
    @rule(data=st.data(), when=st.sampled_from(["before", "after"]), numbered=st.booleans())
    def hold_then_take(self, data: st.DataObject, when: str, numbered: bool) -> None:
        turn = self.state.turn
        assert turn is not None
        me = self.state.get(turn.combatant)
        assert me is not None
        number = me.place - 3 if numbered and me.place is not None else None
        self.run(c.Hold(turn.ref, number), self.controller_or_narrator(data, turn.combatant))
        if self.state.hold_of(turn.combatant) is None:
            return
        others = [i for i in self.state.order if i != turn.combatant]
        if others:
            other = data.draw(st.sampled_from(others), label="other")
            self.run(
                c.TakeHeldTurn(turn.combatant, when, other),  # type: ignore[arg-type]
                self.controller_or_narrator(data, turn.combatant),
            )

    # ---------------------------------------------------------------------------- conditions

    @rule(data=st.data())
    def apply_condition(self, data: st.DataObject) -> None:
        source = data.draw(st.sampled_from([None, *self.ids()]), label="source")
        anchor = data.draw(st.sampled_from([None, None, *self.ids()]), label="anchor")
        self.run(
            c.ApplyCondition(
                self.some_id(data, "target"),
                data.draw(st.sampled_from(["custom", "surprised", "nope"]), label="type"),
                rounds=data.draw(st.integers(0, 3), label="rounds"),
                boundary=data.draw(st.sampled_from(["start", "end"]), label="boundary"),  # type: ignore[arg-type]
                anchor=anchor,
                source=source,
            ),
            self.actor(data),
        )

    @rule(data=st.data())
    def surprise(self, data: st.DataObject) -> None:
        command = c.Surprise(self.some_id(data, "target"), (self.some_id(data, "by"),))
        must = {"not_in_ruleset"} if self.ruleset == "dnd3e" else None
        self.run(command, self.actor(data), must_refuse=must)

    # -------------------------------------------------------------------------- time and undo

    @rule(data=st.data(), wait=st.sampled_from([0.0, 5.0, 12.0, 21.0, 31.0, 100.0]))
    def tick(self, data: st.DataObject, wait: float) -> None:
        self.run(c.Tick(), self.actor(data), advance=wait)

    @rule(data=st.data(), seconds=st.sampled_from([None, 10, 30, 0]))
    def set_turn_timer(self, data: st.DataObject, seconds: int | None) -> None:
        must = {"invalid_value"} if seconds == 0 else None
        self.run(c.SetTurnTimer(seconds), self.actor(data), must_refuse=must)

    @rule(data=st.data())
    def undo(self, data: st.DataObject) -> None:
        # Back at the combat's creation there is nothing left to undo (R15).
        must = None if self.history else {"nothing_to_undo"}
        self.run(c.Undo(), self.actor(data), must_refuse=must)

    @rule(data=st.data(), really=st.integers(0, 9))
    def end_combat(self, data: st.DataObject, really: int) -> None:
        if really == 0:
            self.run(c.EndCombat(), self.actor(data))

    @rule(data=st.data())
    def illegal_by_observer(self, data: st.DataObject) -> None:
        command = data.draw(
            st.sampled_from(
                [
                    c.StartCombat(),
                    c.Tick(),
                    c.Undo(),
                    c.EndCombat(),
                    c.RollInitiative(self.some_id(data)),
                    c.EndTurn(self.turn_ref(data)),
                ]
            )
        )
        self.run(command, OBSERVER, must_refuse={"forbidden"})

    # ----------------------------------------------------------------------------- invariants

    @invariant()
    def events_fold_to_the_state(self) -> None:
        assert fold(self.log) == self.state
        # Leaving the undone commands out tells the same story (R15).
        assert fold(e for events in self.effective for e in events) == self.state

    @invariant()
    def the_measured_view_size_is_the_encoded_size(self) -> None:
        # The size check measures only what changed since its memo (``State.measured``): it
        # must always say what a walk over the whole view says.
        assert measure(self.state).size == encoded_size(view(self.state, NARRATOR))

    @invariant()
    def turns_and_rounds_follow_r5(self) -> None:
        flat = [e for events in self.effective for e in events]
        assert turn_history_problems(flat) == []

    @invariant()
    def the_turn_is_an_active_combatants(self) -> None:
        turn = self.state.turn
        if turn is not None:
            assert self.state.active(turn.combatant)
            assert turn.combatant in self.state.order
            assert turn.round == self.state.round
        assert len(set(self.state.order)) == len(self.state.order)

    @invariant()
    def nothing_pending_for_the_absent(self) -> None:
        # R1: defeated and removed combatants keep no holds or reservations; an ended combat
        # keeps nothing pending at all.
        for h in self.state.holds:
            assert self.state.active(h.combatant), h
        for r in self.state.reservations:
            assert self.state.active(r.combatant), r
        if self.state.phase == "ended":
            assert self.state.holds == ()
            assert self.state.reservations == ()
            assert self.state.turn is None
            assert self.state.window is None


class MarvelMachine(CombatMachine):
    ruleset = "marvel"


class Dnd3eMachine(CombatMachine):
    ruleset = "dnd3e"


PROPERTY_EXAMPLES = int(os.environ.get("TURNKEEPER_PROPERTY_EXAMPLES", "100"))
"""CI plays 100 random combats per ruleset; set more for a soak run."""

PROPERTY_SETTINGS = settings(
    max_examples=PROPERTY_EXAMPLES,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

TestR5R15R16PropertiesMarvel = MarvelMachine.TestCase
TestR5R15R16PropertiesMarvel.settings = PROPERTY_SETTINGS
TestR5R15R16PropertiesDnd3e = Dnd3eMachine.TestCase
TestR5R15R16PropertiesDnd3e.settings = PROPERTY_SETTINGS
