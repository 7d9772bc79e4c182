// The commands a table uses most, for the narrator and, for their own combatants, players (R16:
// the daemon refuses the rest anyway; the page only leaves out buttons that could not work).
// Each control calls run(method, params), which sends the client's camelCase method with the
// combat filled in and shows the daemon's (localized) message when it is refused; refuse(text)
// shows why the page itself will not send what was filled in.
//
// Every form and group of fields carries a data-scope naming what it is about (a turn, a hold,
// a window): the page puts typed values back into the same scope after it draws them again.

import { button, clearWhenDone, field, group, h, select } from "./dom.js";
import { t } from "./i18n.js";
import { actionKind, actionType } from "./render.js";
import { MAX_ID, MAX_NUMBER, MAX_TEXT, d616Selects, form, setupControls } from "./setup.js";
import { turnTimerControl } from "./timer.js";

/** The action kinds each ruleset's catalogue knows, with the action type each is (protocol.md,
 * ActionSpec). dnd3e's `refocus` has its own button (the refocus method). */
const KINDS = {
  marvel: {
    attack: "standard", power: "standard", grab: "standard", escape: "standard", help: "standard",
    use_item: "standard", move: "movement", dash: "movement", stand: "movement",
  },
  dnd3e: {
    attack: "standard", cast: "standard", aid_another: "standard", total_defense: "standard",
    move: "move", draw_weapon: "move", stand_up: "move", charge: "full", full_attack: "full",
    run: "full", withdraw: "full", speak: "free", drop_item: "free",
  },
};
const ACTION_TYPES = { marvel: ["standard", "movement"], dnd3e: ["standard", "move", "full", "free"] };
const RESERVED_TYPES = { marvel: ["standard", "movement"], dnd3e: ["standard"] };
/** What a reserved (marvel) or readied (dnd3e) type can carry out (the rulesets' `carries`):
 * a marvel standard action does what a movement does, never the reverse; dnd3e readies a
 * standard or a move, and under the 3.5 rules (the `ready` option) a free action too. */
function carries(scene, reservedType) {
  const { ruleset } = scene.view;
  if (ruleset === "marvel") return reservedType === "standard" ? ["standard", "movement"] : ["movement"];
  if (ruleset === "dnd3e") return scene.option("ready") === "3.5" ? ["standard", "move", "free"] : ["standard", "move"];
  return [reservedType];
}
/** Rulesets whose holds last past the round's end (the rulesets' `holds_carry_over`): a dnd3e
 * delay never does. */
const HOLDS_CARRY_OVER = new Set(["marvel"]);
/** The dnd3e delay floor under the 3.0 rules (the `delay` option): −10 minus the initiative
 * modifier (the ruleset's DELAY_FLOOR_BASE); 3.5 has none. */
const DELAY_FLOOR_BASE = -10;
/** The kind select's value for an action the catalogue does not have. */
const OTHER = "";

/** Whether a turn that has spent `used` can still take an action of `type`: the engine's
 * budget (R6, the rulesets' `can_spend`), so the page offers no action the daemon would refuse
 * (action_unavailable). */
function canSpend(ruleset, used, type) {
  if (ruleset === "marvel") return !used.includes(type);
  if (ruleset !== "dnd3e") return true;
  if (type === "free") return true;
  if (used.includes("full")) return false;
  const moves = used.filter((u) => u === "move").length;
  const standardSpent = used.includes("standard") || moves >= 2;
  if (type === "full") return used.every((u) => u === "free");
  if (type === "standard") return !standardSpent;
  if (type === "move") return moves === 0 || !standardSpent;
  return false;
}

/**
 * The fields of an action (ActionSpec) whose type is one of `types`: a kind from the ruleset's
 * catalogue of those types, or another kind with its type stated; a description; a target.
 * `types()` is read each time the kinds are drawn, so a form can narrow them (the reserve form's
 * spent type). Returns the fields, `redraw()` and `spec()`.
 */
function actionFields(scene, prefix, types) {
  const ruleset = scene.view.ruleset;
  const catalogue = KINDS[ruleset] || {};
  const kind = select({ name: "kind", "data-testid": prefix + "-kind" }, [], null);
  const custom = h("input", { name: "custom", maxlength: MAX_ID, autocomplete: "off", "data-testid": prefix + "-custom" });
  const type = select({ name: "type", "data-testid": prefix + "-action-type" }, [], null);
  const description = h("input", { name: "description", maxlength: MAX_TEXT, autocomplete: "off", "data-testid": prefix + "-description" });
  // Any combatant not removed is a target the daemon takes: a defeated one too (a finishing
  // blow, help to a fallen ally).
  const targets = scene.lineup.filter((c) => c.status !== "removed");
  const target = select({ name: "target", "data-testid": prefix + "-target" },
    [["", t("nobody")], ...targets.map((c) => [c.id, c.name])], "");
  const customField = field(t("Which action"), custom);
  const typeField = field(t("Action type"), type);
  const showCustom = () => {
    customField.hidden = kind.value !== OTHER;
    typeField.hidden = kind.value !== OTHER;
  };
  const redraw = () => {
    const allowed = types();
    // Drawn the first time, nothing was chosen yet: the first kind is the default.
    const was = kind.options.length ? kind.value : null;
    const kinds = Object.keys(catalogue).filter((k) => allowed.includes(catalogue[k]));
    kind.replaceChildren(...[...kinds.map((k) => [k, actionKind(k)]), [OTHER, t("another action…")]]
      .map(([value, text]) => h("option", { value }, text)));
    kind.value = kinds.includes(was) || was === OTHER ? was : kinds[0] ?? OTHER;
    const typeWas = type.value;
    type.replaceChildren(...allowed.map((x) => h("option", { value: x }, actionType(x))));
    if (allowed.includes(typeWas)) type.value = typeWas;
    showCustom();
  };
  kind.addEventListener("change", showCustom);
  redraw();
  const spec = () => {
    const action = { description: description.value.trim(), targets: target.value ? [target.value] : [] };
    if (kind.value !== OTHER) return { kind: kind.value, ...action };
    return { kind: custom.value.trim(), type: type.value, ...action };
  };
  const fields = [field(t("Action"), kind), customField, typeField, field(t("Target"), target), field(t("Description"), description)];
  return { fields, redraw, spec };
}

/** The lowest number a holder may name (`below_delay_floor`), or null for none. */
function delayFloor(scene, c) {
  if (scene.view.ruleset !== "dnd3e" || scene.option("delay") === "3.5" || !c) return null;
  return DELAY_FLOOR_BASE - c.init_mod;
}

/**
 * Whether the moment just `when` `other`'s turn still comes while `holder` holds, as the
 * daemon judges it (decide/holds.py, `moment_passed`): later this round (`other` holding, or
 * acting now and `when` after, or its turn not yet come: the view's `reached`), or, where a
 * hold lasts past the round (marvel), next round before the holder's own place. `acting` is
 * whose turn is in progress when the plan is judged: none for a plan said with the hold.
 */
function momentComes(scene, holder, when, other, acting) {
  const { view } = scene;
  const reached = view.reached || [];
  const waiting = view.holds.some((hold) => hold.combatant === other);
  const now = acting === other;
  let thisRound = waiting || (when === "after" && now) || !reached.includes(other);
  if (view.phase === "bonus_round" && !(view.bonus || []).includes(other)) thisRound = waiting;
  if (!view.order.includes(other) || !view.order.includes(holder)) return thisRound;
  const comesFirst = view.order.indexOf(other) < view.order.indexOf(holder);
  // A hold from an earlier round: the holder's own place this round ends it.
  if (!reached.includes(holder)) return thisRound && (waiting || now || comesFirst);
  return thisRound || (HOLDS_CARRY_OVER.has(view.ruleset) && comesFirst);
}

/**
 * The plan of a held turn: just before or just after another active combatant, offering only
 * the moments still to come (momentComes); `open` adds the choice of saying nothing yet.
 * Returns the fields and the plan's selects, or null fields when no moment is left.
 */
function planFields(scene, holder, acting, prefix, open) {
  const others = scene.lineup.filter((c) => c.id !== holder && c.status === "active");
  const moments = (when) => others.filter((c) => momentComes(scene, holder, when, c.id, acting));
  const whens = [["before", t("just before")], ["after", t("just after")]].filter(([when]) => moments(when).length);
  const choices = open ? [["", t("not yet said when")], ...whens] : whens;
  if (!whens.length) return { fields: null, when: null, other: null };
  const when = select({ name: "when", "data-testid": prefix + "-when" }, choices, open ? "" : whens.at(-1)[0]);
  const other = select({ name: "other", "data-testid": prefix + "-other" }, [], null);
  const otherField = field(t("Combatant"), other);
  const redraw = () => {
    const was = other.value;
    const offered = when.value ? moments(when.value) : [];
    other.replaceChildren(...offered.map((c) => h("option", { value: c.id }, c.name)));
    // The turn in progress is the likeliest moment; else the first still to come.
    const preferred = [was, acting].find((id) => offered.some((c) => c.id === id));
    if (preferred) other.value = preferred;
    otherField.hidden = !offered.length;
  };
  when.addEventListener("change", redraw);
  redraw();
  // TRANSLATORS: a label over "just before" / "just after" (another combatant's turn).
  return { fields: [field(t("Act"), when), otherField], when, other };
}

function turnRef(turn) {
  return { round: turn.round, combatant: turn.combatant, number: turn.number };
}

function turnControls(scene, run, refuse) {
  const turn = scene.view.turn;
  const ref = turnRef(turn);
  // R9: a turn is held only before anything is done in it (action_taken), and a dnd3e delayer
  // at its floor acts or forfeits (must_act).
  const mayHold = turn.used.length === 0 && turn.kind !== "floor";
  // R9: a held turn goes lower than the holder's number now (invalid_hold_number), and no
  // lower than a dnd3e delay floor (below_delay_floor).
  const holder = scene.byId.get(turn.combatant);
  const place = holder?.place ?? null;
  const floor = delayFloor(scene, holder);
  const number = h("input", {
    type: "number", step: 1, name: "number", inputmode: "numeric", "data-testid": "hold-number", class: "narrow",
    max: place === null ? null : place - 1, min: floor ?? -MAX_NUMBER,
  });
  // R9: the plan may come with the hold, judged once the turn is held (nobody acting). The
  // last to act in a round must say it here to go before the first of the next: its hold
  // starts that round's first turn at once.
  const plan = planFields(scene, turn.combatant, null, "hold", true);
  const hold = () => {
    const value = number.value.trim();
    // Initiative numbers are whole: the daemon would refuse 12.5 as no integer.
    if (number.validity.badInput || (value !== "" && !Number.isInteger(Number(value)))) {
      return refuse(t("The number to act at is a whole number, or leave it empty."));
    }
    if (value !== "" && place !== null && Number(value) >= place) {
      return refuse(t("A held turn acts at a number lower than {n}.", { n: place }));
    }
    if (value !== "" && floor !== null && Number(value) < floor) {
      return refuse(t("A delayed turn acts at {n} or higher: the delay floor.", { n: floor }));
    }
    // The daemon takes numbers within ±MAX_NUMBER (invalid_value).
    if (value !== "" && Number(value) < -MAX_NUMBER) {
      return refuse(t("The number to act at is no lower than {n}.", { n: -MAX_NUMBER }));
    }
    const said = plan.when && plan.when.value ? { when: plan.when.value, other: plan.other.value } : {};
    return run("hold", { turn: ref, number: value === "" ? null : Number(value), ...said });
  };
  return group(t("{name}'s turn", { name: scene.name(turn.combatant) }), "turn-controls", "turn:" + turn.number,
    h("div", { class: "row" },
      button(t("End turn"), "end-turn", () => run("endTurn", { turn: ref }), "primary"),
      mayHold ? button(scene.marvel ? t("Hold the turn") : t("Delay the turn"), "hold", hold) : null,
      mayHold ? field(t("At number (optional)"), number) : null,
      mayHold ? plan.fields : null));
}

/** The action types the current turn could still reserve (R10) or ready (R11): none once it
 * was spent refocusing (R14) or its budget is. */
function reservableTypes(scene) {
  const { ruleset, turn } = scene.view;
  if (turn.refocus) return [];
  return (RESERVED_TYPES[ruleset] || ["standard"]).filter((type) => canSpend(ruleset, turn.used, type));
}

function reserveForm(scene, run, refuse, types) {
  const turn = scene.view.turn;
  const reservedType = select({ name: "reserved_type", "data-testid": "reserve-type" },
    types.map((type) => [type, actionType(type)]), types[0]);
  // Only what the type spent can carry out: a marvel movement reserves no attack (the default
  // kind refused with action_type_mismatch once the standard action was spent).
  const action = actionFields(scene, "reserve", () => carries(scene, reservedType.value));
  reservedType.addEventListener("change", action.redraw);
  const trigger = h("input", { name: "trigger", required: true, maxlength: MAX_TEXT, autocomplete: "off", "data-testid": "reserve-trigger" });
  const submit = (event) => {
    event.preventDefault();
    const spec = action.spec();
    if (!spec.kind) return refuse(t("Say which action."));
    if (!trigger.value.trim()) return refuse(t("Say what the action waits for."));
    return clearWhenDone(run("reserve", {
      turn: turnRef(turn), reserved_type: reservedType.value, action: spec, trigger: { text: trigger.value.trim() },
    }), "reserve-form");
  };
  const title = scene.marvel ? t("Reserve an action for {name}", { name: scene.name(turn.combatant) })
    : t("Ready an action for {name}", { name: scene.name(turn.combatant) });
  return form(title, "reserve-form", "turn:" + turn.number, submit,
    h("div", { class: "grid" },
      // TRANSLATORS: the action type spent on reserving (marvel standard/movement).
      field(t("Spend"), reservedType),
      action.fields,
      h("div", { class: "wide" }, field(t("Trigger"), trigger, t("What it waits for, as you would say it.")))),
    h("div", { class: "row" }, h("button", { type: "submit", class: "button primary", "data-testid": "reserve" },
      scene.marvel ? t("Reserve") : t("Ready"))));
}

/** The action types the current turn can still take (R6). */
function spendableTypes(scene) {
  const { ruleset, turn } = scene.view;
  if (turn.refocus) return [];
  return (ACTION_TYPES[ruleset] || []).filter((type) => canSpend(ruleset, turn.used, type));
}

/** Declaring an action in the current turn (R6), and for dnd3e refocusing (R14). */
function declareForm(scene, run, refuse, types) {
  const turn = scene.view.turn;
  const action = actionFields(scene, "declare", () => types);
  const submit = (event) => {
    event.preventDefault();
    const spec = action.spec();
    if (!spec.kind) return refuse(t("Say which action."));
    return clearWhenDone(run("declareAction", { turn: turnRef(turn), action: spec }), "declare-form");
  };
  // R14: refocusing spends the full round, so only a turn that has done nothing else may.
  const refocus = scene.view.ruleset === "dnd3e" && types.includes("full")
    ? button(t("Refocus"), "refocus", () => run("refocus", { turn: turnRef(turn) })) : null;
  const title = t("An action for {name}", { name: scene.name(turn.combatant) });
  return form(title, "declare-form", "turn:" + turn.number, submit,
    h("div", { class: "grid" }, action.fields),
    h("div", { class: "row" },
      h("button", { type: "submit", class: "button primary", "data-testid": "declare" }, t("Take the action")),
      refocus));
}

/** When a held turn is taken (R9): only the moments still to come are offered; when none is
 * left, the form says so and offers nothing. */
function heldTurnForm(scene, hold, run) {
  const plan = planFields(scene, hold.combatant, scene.view.turn ? scene.view.turn.combatant : null, "held", false);
  const name = scene.name(hold.combatant);
  const take = () => run("takeHeldTurn", { combatant: hold.combatant, when: plan.when.value, other: plan.other.value });
  return group(scene.marvel ? t("{name}'s held turn", { name }) : t("{name}'s delayed turn", { name }),
    "held-" + hold.combatant, "hold:" + hold.combatant + ":" + hold.seq,
    plan.fields
      ? h("div", { class: "row" }, plan.fields,
        button(scene.marvel ? t("Take held turn") : t("Take delayed turn"), "take-held-" + hold.combatant, take, "primary"))
      : h("p", { class: "muted", "data-testid": "no-moment-" + hold.combatant },
        t("No turn before or after which to act is still to come while it holds.")));
}

function answerRow(scene, w, id, run, refuse) {
  const own = scene.view.reservations.filter((r) => r.combatant === id);
  const options = own.map((r) => [r.id, t("Reserved: {trigger}", { trigger: r.trigger.text })]);
  if (scene.marvel) options.push(["", t("A stated action")]);
  const choice = options.length ? select({ name: "reservation", "data-testid": "claim-with-" + id }, options, options[0][0]) : null;
  const kinds = Object.keys(KINDS.marvel);
  const kind = scene.marvel ? select({ name: "kind", "data-testid": "claim-kind-" + id }, kinds.map((k) => [k, actionKind(k)]), kinds[0]) : null;
  const stated = kind ? field(t("Stated action"), kind) : null;
  // The action is asked for only when it is stated rather than reserved.
  const showStated = () => {
    if (stated) stated.hidden = Boolean(choice && choice.value);
  };
  if (choice) choice.addEventListener("change", showStated);
  showStated();
  // marvel: the claimant's own dice for the fresh check the sequence may need (R2, R12); none
  // chosen, Turnkeeper rolls if it comes to that.
  const dice = scene.marvel ? d616Selects("claim-face-" + id + "-") : null;
  const claim = () => {
    const params = { window: w.id, combatant: id };
    if (choice && choice.value) params.reservation = choice.value;
    else params.action = { kind: kind.value };
    if (dice) {
      const faces = dice.selects.map((die) => die.value);
      if (faces.some(Boolean) && !faces.every(Boolean)) return refuse(t("Enter the face of every die."));
      if (faces.every(Boolean)) params.faces = faces.map(Number);
    }
    return run("claimReaction", params);
  };
  return h("li", { class: "answer", "data-testid": "answer-" + id },
    h("strong", null, scene.name(id)),
    h("div", { class: "row" },
      choice ? field(t("Claim with"), choice) : null,
      stated),
    dice ? h("div", { class: "row dice-entry", role: "group", "aria-label": t("Dice for a fresh check (optional)") },
      h("span", { class: "field-label" }, t("Dice for a fresh check (optional)")), dice.fields) : null,
    h("div", { class: "row" },
      choice ? button(t("Claim"), "claim-" + id, claim, "primary") : null,
      button(t("Pass"), "pass-" + id, () => run("passReaction", { window: w.id, combatant: id }))));
}

function windowControls(scene, run, refuse) {
  const w = scene.view.window;
  const answered = new Set([...w.passes, ...w.claims.map((claim) => claim.combatant)]);
  if (w.status === "open") {
    // One offered and defeated (or removed) since answers nothing: the daemon refuses its claim
    // and its pass (combatant_inactive) and no longer waits for it.
    const rows = w.offered.filter((id) => !answered.has(id) && scene.may(id) && scene.byId.get(id)?.status === "active")
      .map((id) => answerRow(scene, w, id, run, refuse));
    const close = scene.session.role === "narrator"
      ? h("div", { class: "row" }, button(t("Close the window"), "close-window", () => run("closeWindow", { window: w.id })))
      : null;
    if (!rows.length && !close) return null;
    return group(t("Reactions"), "window-controls", "window:" + w.id,
      rows.length ? h("ul", { class: "answers" }, rows) : null, close);
  }
  // A player's index is -1 while someone hidden from them reacts: nobody there to finish for.
  const reacting = w.index >= 0 ? w.sequence[w.index] : undefined;
  if (reacting === undefined || !scene.may(reacting)) return null;
  return group(t("Reactions"), "window-controls", "window:" + w.id, h("div", { class: "row" },
    button(t("{name} is done reacting", { name: scene.name(reacting) }), "finish-" + reacting,
      () => run("finishReaction", { window: w.id, combatant: reacting }), "primary")));
}

/** The controls this session may use now, or a line saying there are none. */
export function controls(scene, run, refuse) {
  const { view, session } = scene;
  const narrator = session.role === "narrator";
  const parts = [];
  if (view.phase !== "ended") {
    // start_combat needs an active combatant (no_combatants): none is offered before one is added.
    const someoneActive = scene.lineup.some((c) => c.status === "active");
    if (narrator && (view.phase === "setup" || view.phase === "initiative") && someoneActive) {
      parts.push(group(t("Combat"), "combat-controls", null, h("div", { class: "row" },
        button(t("Start combat"), "start-combat", () => run("startCombat", {}), "primary"))));
    }
    // While a window is open or resolving, turn commands are refused (window_open): resolve it first.
    if (view.window) parts.push(windowControls(scene, run, refuse));
    else if (view.turn && scene.may(view.turn.combatant)) {
      parts.push(turnControls(scene, run, refuse));
      const spendable = spendableTypes(scene);
      if (spendable.length) parts.push(declareForm(scene, run, refuse, spendable));
      const types = reservableTypes(scene);
      if (types.length) parts.push(reserveForm(scene, run, refuse, types));
    }
    for (const hold of view.holds) {
      if (scene.may(hold.combatant)) parts.push(heldTurnForm(scene, hold, run));
    }
    parts.push(...setupControls(scene, run, refuse));
  }
  parts.push(turnTimerControl(scene, run, refuse));
  if (narrator) {
    parts.push(group(t("Table"), "table-controls", null, h("div", { class: "row" },
      button(t("Undo the last command"), "undo", () => run("undo", {}), "danger"),
      view.phase !== "ended" ? button(t("End the combat"), "end-combat", () => {
        // Ending cancels whatever is pending (R1); only undo comes back from it.
        if (confirm(t("End the combat? Only undo brings it back."))) return run("endCombat", {});
        return null;
      }, "danger") : null)));
  }
  const shown = parts.filter(Boolean);
  let body;
  if (shown.length) body = shown;
  else if (session.role === "player") body = h("p", { class: "empty" }, t("Nothing for you to do right now."));
  else body = h("p", { class: "empty" }, t("You are watching: this session gives no commands."));
  return h("section", { class: "panel controls", "data-testid": "controls", "aria-label": t("Controls") },
    h("h2", null, narrator ? t("Narrator controls") : t("Your controls")),
    body);
}
