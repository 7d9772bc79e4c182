// The narrator's console: creating a combat, its roster (add, remove, defeat, revive, reveal,
// surprise), initiative (rolled by Turnkeeper or the faces a player rolled), ties and groups,
// conditions and the end of the combat. Players get the initiative form for their own
// combatants. Every form offers only what the daemon would accept (protocol.md, Command
// methods); the daemon still has the last word and its refusal is shown as it says it.

import { button, clearWhenDone, field, fold, group, h, select } from "./dom.js";
import { t } from "./i18n.js";

/** The rulesets the daemon bundles (protocol.md, create_combat), by their games' own names,
 * which no language translates. */
export const RULESETS = [["marvel", "Marvel Multiverse (d616)"], ["dnd3e", "D&D 3e (d20)"]];
/** Faces a d6 and a d20 show. */
const D6 = [1, 2, 3, 4, 5, 6];
const D20 = Array.from({ length: 20 }, (_, i) => i + 1);
/** marvel edges and troubles on one check: 0 to 10 (protocol.md, roll_initiative). */
const MAX_EDGES = 10;
/** How many turn boundaries a condition may last (protocol.md, apply_condition). */
const MAX_CONDITION_ROUNDS = 1000;
/** Rule options' bounds in seconds (protocol.md, Rule options). */
const MAX_SECONDS = 86400;
const MIN_TURN_LIMIT = 1;
/** Ids and names the daemon takes: 1 to 128 characters (protocol.md, Common fields). */
export const MAX_ID = 128;
/** Free text the daemon takes: at most 2000 characters. */
export const MAX_TEXT = 2000;
/** The most tags, targets or combatants offered a window in one list (decide.MAX_ITEMS). */
export const MAX_ITEMS = 32;
/** The largest number the engine takes for a modifier or a score (MAX_NUMBER, ±1,000,000). */
export const MAX_NUMBER = 1000000;

/** A titled form; `scope` names what it is about (see rebuildKeepingInput). */
export function form(title, testid, scope, onsubmit, ...body) {
  return h("form", { class: "control-group", "data-testid": testid, "data-scope": scope, "aria-label": title, onsubmit },
    h("h3", null, title), body);
}

function text(testid, attributes) {
  return h("input", { type: "text", autocomplete: "off", spellcheck: "false", "data-testid": testid, ...attributes });
}

function integer(testid, low, high, value) {
  return h("input", { type: "number", step: 1, min: low, max: high, value, inputmode: "numeric", class: "narrow", "data-testid": testid });
}

function checkbox(label, testid) {
  const box = h("input", { type: "checkbox", "data-testid": testid });
  return [box, h("label", { class: "check-field" }, box, h("span", null, label))];
}

/** A whole number from a number input within [low, high], or null when it is not one. */
function wholeIn(input, low, high) {
  const value = input.value.trim();
  if (input.validity.badInput || value === "") return null;
  const n = Number(value);
  return Number.isInteger(n) && n >= low && n <= high ? n : null;
}

/** Seconds from a number input within [low, high]; "" is nil; NaN when out of bounds. */
function secondsIn(input, low, high) {
  const value = input.value.trim();
  if (value === "" && !input.validity.badInput) return null;
  const n = Number(value);
  return Number.isFinite(n) && n >= low && n <= high ? n : NaN;
}

// Creating a combat ----------------------------------------------------------------------------

/**
 * The form that opens a new combat with its ruleset and rule options; `create(params)` sends
 * create_combat and opens it. The options shown follow the ruleset chosen.
 */
export function createCombatForm(create, refuse) {
  const id = text("new-combat-id", { name: "combat_id", required: true, maxlength: MAX_ID });
  const ruleset = select({ name: "ruleset", "data-testid": "new-ruleset" }, RULESETS, "marvel");
  const limit = h("input", { type: "number", min: MIN_TURN_LIMIT, max: MAX_SECONDS, step: "any", inputmode: "decimal", class: "narrow", "data-testid": "new-turn-limit" });
  const warning = h("input", { type: "number", min: 0, max: MAX_SECONDS, step: "any", value: 10, inputmode: "decimal", class: "narrow", "data-testid": "new-turn-warning" });
  const expiry = select({ name: "turn_expiry", "data-testid": "new-turn-expiry" },
    [["end_turn", t("ends the turn")], ["hold", t("holds the turn")]], "end_turn");
  const windowWait = h("input", { type: "number", min: 0, max: MAX_SECONDS, step: "any", value: 0, inputmode: "decimal", class: "narrow", "data-testid": "new-window-deadline" });
  const refresh = select({ name: "reaction_refresh", "data-testid": "new-reaction-refresh" },
    [["own_turn", t("at its own turn")], ["round_start", t("at each round's start")]], "own_turn");
  const ready = select({ name: "ready", "data-testid": "new-ready" }, [["3.0", "3.0"], ["3.5", "3.5"]], "3.0");
  const delay = select({ name: "delay", "data-testid": "new-delay" }, [["3.0", "3.0"], ["3.5", "3.5"]], "3.0");
  const marvelOnly = h("div", { class: "grid wide" }, field(t("A spent reaction comes back"), refresh));
  const dndOnly = h("div", { class: "grid wide" }, field(t("Readied action rules"), ready), field(t("Delay rules"), delay));
  const showOptions = () => {
    marvelOnly.hidden = ruleset.value !== "marvel";
    dndOnly.hidden = ruleset.value !== "dnd3e";
  };
  ruleset.addEventListener("change", showOptions);
  showOptions();
  const send = h("button", { type: "submit", class: "button primary", "data-testid": "create-combat" }, t("Create combat"));
  const submit = async (event) => {
    event.preventDefault();
    // One combat per click: a second click while the first is being created would be refused.
    if (send.disabled) return;
    send.disabled = true;
    try {
      await ask();
    } finally {
      send.disabled = false;
    }
  };
  const ask = () => {
    const name = id.value.trim();
    if (!name) return refuse(t("Give the combat a name."));
    const turnLimit = secondsIn(limit, MIN_TURN_LIMIT, MAX_SECONDS);
    const turnWarning = secondsIn(warning, 0, MAX_SECONDS);
    const windowDeadline = secondsIn(windowWait, 0, MAX_SECONDS);
    if ([turnLimit, turnWarning, windowDeadline].some(Number.isNaN)) {
      return refuse(t("Times are seconds: a turn from 1 to 86400, the rest from 0 to 86400, or empty."));
    }
    const options = [["turn_time_limit", turnLimit], ["turn_expiry", expiry.value], ["window_deadline", windowDeadline ?? 0]];
    if (turnWarning !== null) options.push(["turn_warning", turnWarning]);
    if (ruleset.value === "marvel") options.push(["reaction_refresh", refresh.value]);
    else options.push(["ready", ready.value], ["delay", delay.value]);
    return create({ combat_id: name, ruleset: ruleset.value, options });
  };
  return h("form", { class: "card", "data-testid": "create", "data-scope": "create", onsubmit: submit },
    h("h1", null, t("New combat")),
    h("div", { class: "grid" },
      h("div", { class: "wide" }, field(t("Name"), id)),
      h("div", { class: "wide" }, field(t("Ruleset"), ruleset)),
      field(t("Turn timer (seconds)"), limit, t("Empty: no timer.")),
      field(t("Warn before the end (seconds)"), warning),
      field(t("When the timer runs out"), expiry),
      field(t("Reactions wait (seconds)"), windowWait, t("0: only for the answers.")),
      marvelOnly, dndOnly),
    h("div", { class: "row end" }, send));
}

// The roster ---------------------------------------------------------------------------------------

function addCombatantForm(scene, run, refuse) {
  const marvel = scene.marvel;
  const id = text("add-id", { name: "id", required: true, maxlength: MAX_ID });
  const name = text("add-name", { name: "display_name", required: true, maxlength: MAX_ID });
  const controller = text("add-controller", { name: "controller", maxlength: MAX_ID });
  const mod = integer("add-mod", -MAX_NUMBER, MAX_NUMBER, 0);
  const dexterity = integer("add-dexterity", -MAX_NUMBER, MAX_NUMBER, 10);
  const groupName = text("add-group", { name: "group", maxlength: MAX_ID });
  const tags = text("add-tags", { name: "tags" });
  const [pc, pcField] = checkbox(t("Player character"), "add-pc");
  const [hidden, hiddenField] = checkbox(t("Hidden from players"), "add-hidden");
  const started = scene.view.phase === "bonus_round" || scene.view.phase === "rounds";
  const submit = (event) => {
    event.preventDefault();
    const modifier = wholeIn(mod, -MAX_NUMBER, MAX_NUMBER);
    const dex = wholeIn(dexterity, -MAX_NUMBER, MAX_NUMBER);
    if (modifier === null || (!marvel && dex === null)) return refuse(t("The modifier and Dexterity are whole numbers."));
    const params = {
      id: id.value.trim(),
      display_name: name.value.trim(),
      controller: controller.value.trim() || null,
      player_character: pc.checked,
      init_mod: modifier,
      group: groupName.value.trim() || null,
      tags: tags.value.split(",").map((tag) => tag.trim()).filter(Boolean),
      hidden: hidden.checked,
    };
    if (!params.id || !params.display_name) return refuse(t("A combatant needs an id and a name."));
    if (params.tags.length > MAX_ITEMS || params.tags.some((tag) => tag.length > MAX_ID)) {
      return refuse(t("At most {n} tags, each at most {length} characters.", { n: MAX_ITEMS, length: MAX_ID }));
    }
    if (!marvel) params.dexterity = dex;
    return clearWhenDone(run("addCombatant", params), "add-form");
  };
  return form(started ? t("Add a reinforcement") : t("Add a combatant"), "add-form", "add", submit,
    h("div", { class: "grid" },
      field(t("Id"), id),
      field(t("Name"), name),
      field(t("Initiative modifier"), mod),
      marvel ? null : field(t("Dexterity"), dexterity),
      field(t("Player (user id)"), controller, t("Empty: the narrator runs it.")),
      field(t("Group"), groupName),
      h("div", { class: "wide" }, field(t("Tags"), tags, t("Separated by commas.")))),
    h("div", { class: "row" }, pcField, hiddenField),
    started ? h("p", { class: "muted" }, t("Turnkeeper rolls its initiative and slots it into the order.")) : null,
    h("div", { class: "row" }, h("button", { type: "submit", class: "button primary", "data-testid": "add" }, t("Add"))));
}

/** Buttons for one combatant, those its state allows. */
function combatantActions(scene, c, run) {
  const { phase } = scene.view;
  const target = { combatant: c.id };
  const beforeOrder = phase === "setup" || phase === "initiative";
  return [
    c.status === "active" ? button(t("Defeat"), "defeat", () => run("defeatCombatant", target)) : null,
    c.status === "defeated" ? button(t("Revive"), "revive", () => run("reviveCombatant", target), "primary") : null,
    c.hidden && c.status !== "removed" ? button(t("Reveal"), "reveal", () => run("revealCombatant", target)) : null,
    // R8: Surprised before its check is rolled; mid-combat surprise names who surprised it.
    scene.marvel && beforeOrder && !c.check && !c.surprised && c.status === "active"
      ? button(t("Mark surprised"), "mark-surprised", () => run("markSurprised", target)) : null,
    c.status !== "removed" ? button(t("Remove"), "remove", () => run("removeCombatant", target), "danger") : null,
  ].filter(Boolean);
}

function manageForm(scene, run) {
  const listed = scene.lineup;
  if (!listed.length) return null;
  const choice = select({ name: "combatant", "data-testid": "manage-who" }, listed.map((c) => [c.id, c.name]), listed[0].id);
  const actions = h("div", { class: "row", "data-testid": "manage-actions" });
  const surprise = h("div", { class: "row" });
  const show = () => {
    const c = scene.byId.get(choice.value);
    actions.replaceChildren(...combatantActions(scene, c, run));
    surprise.replaceChildren();
    const rounds = scene.view.phase === "bonus_round" || scene.view.phase === "rounds";
    const others = listed.filter((o) => o.id !== c.id && o.status === "active");
    if (scene.marvel && rounds && c.status === "active" && others.length) {
      const by = select({ name: "by", "data-testid": "surprise-by" }, others.map((o) => [o.id, o.name]), others[0].id);
      surprise.append(field(t("Surprised by"), by),
        button(t("Surprise"), "surprise", () => run("surprise", { target: c.id, by: [by.value] })));
    }
  };
  choice.addEventListener("change", show);
  show();
  return group(t("Combatants"), "manage", "manage", field(t("Combatant"), choice), actions, surprise);
}

// Initiative -----------------------------------------------------------------------------------------

/** A die's faces to choose from, none chosen yet: a face left out is never guessed. */
function dieSelect(testid, faces, label) {
  return select({ name: testid, "data-testid": testid },
    [["", "–"], ...faces.map((f) => [String(f), label ? label(f) : String(f)])], "");
}

/** The three dice of a d616, none chosen yet: the third is the Marvel die, whose 1 is the M
 * (protocol.md, Check). Their test ids are `prefix` and 1 to 3. */
export function d616Selects(prefix) {
  const marvelFace = (f) => (f === 1 ? "M" : String(f));
  const selects = [dieSelect(prefix + 1, D6), dieSelect(prefix + 2, D6), dieSelect(prefix + 3, D6, marvelFace)];
  const fields = [field(t("Die 1"), selects[0]), field(t("Die 2"), selects[1]),
    h("span", { class: "field-marvel" }, field(t("Marvel die"), selects[2]))];
  return { selects, fields };
}

/** Rolling a check, or entering the faces rolled at the table: for the narrator, any
 * combatant not yet rolled; for a player, its own (R2, R3). */
function initiativeForm(scene, run, refuse) {
  const marvel = scene.marvel;
  // A combatant defeated before the order is fixed still rolls (the daemon takes its check, and
  // start_combat rolls it if nobody did): its player may have rolled at the table.
  const waiting = scene.lineup.filter((c) => !c.check && c.status !== "removed" && scene.may(c.id));
  // A group rolls once: one member stands for it.
  const seen = new Set();
  const rollers = waiting.filter((c) => !c.group || (!seen.has(c.group) && seen.add(c.group)));
  if (!rollers.length) return null;
  const who = select({ name: "combatant", "data-testid": "roll-who" },
    rollers.map((c) => [c.id, c.group ? t("{name} (group {group})", { name: c.name, group: c.group }) : c.name]), rollers[0].id);
  const how = select({ name: "how", "data-testid": "roll-how" },
    [["digital", t("Turnkeeper rolls")], ["physical", t("Dice rolled at the table")]], "digital");
  const edges = marvel ? integer("roll-edges", 0, MAX_EDGES, 0) : null;
  const troubles = marvel ? integer("roll-troubles", 0, MAX_EDGES, 0) : null;
  const dice = h("div", { class: "row dice-entry", "data-testid": "roll-dice" });
  const rerolls = h("div", { class: "row dice-entry", "data-testid": "roll-rerolls" });
  dice.append(...(marvel ? d616Selects("face-").fields : [field(t("d20"), dieSelect("face-1", D20))]));
  // R3, R8: the check has one more trouble if any member of the roller's group is Surprised
  // (as the engine counts it). A player's view leaves hidden members out: for a group the page
  // says that they may change how many rerolls there are.
  const surprised = (c) => (c.group === null ? c.surprised
    : scene.view.combatants.some((m) => m.group === c.group && m.status !== "removed" && m.surprised));
  const netRerolls = () => {
    if (!marvel) return 0;
    const e = wholeIn(edges, 0, MAX_EDGES) ?? 0;
    const c = scene.byId.get(who.value);
    const tr = (wholeIn(troubles, 0, MAX_EDGES) ?? 0) + (c && surprised(c) ? 1 : 0);
    return Math.abs(e - tr);
  };
  const unseen = h("p", { class: "muted", "data-testid": "roll-unseen" },
    t("Members of the group hidden from you may be Surprised: Turnkeeper then asks for one reroll more or one fewer."));
  const show = () => {
    const physical = how.value === "physical";
    dice.hidden = !physical;
    unseen.hidden = !(marvel && physical && scene.session.role !== "narrator" && scene.byId.get(who.value)?.group);
    const wanted = physical ? netRerolls() : 0;
    while (rerolls.children.length > wanted) rerolls.lastChild.remove();
    while (rerolls.children.length < wanted) {
      const n = rerolls.children.length + 1;
      rerolls.append(field(t("Reroll {n}", { n }), dieSelect("reroll-" + n, D6)));
    }
    rerolls.hidden = !wanted;
  };
  for (const input of [how, who, edges, troubles]) input?.addEventListener("change", show);
  for (const input of [edges, troubles]) input?.addEventListener("input", show);
  show();
  const roll = () => {
    const params = { combatant: who.value };
    if (marvel) {
      const e = wholeIn(edges, 0, MAX_EDGES);
      const tr = wholeIn(troubles, 0, MAX_EDGES);
      if (e === null || tr === null) return refuse(t("Edges and troubles are whole numbers from 0 to 10."));
      params.edges = e;
      params.troubles = tr;
    }
    if (how.value === "physical") {
      const chosen = [...dice.querySelectorAll("select"), ...rerolls.querySelectorAll("select")].map((s) => s.value);
      if (chosen.includes("")) return refuse(t("Enter the face of every die."));
      params.faces = chosen.map(Number);
    }
    return clearWhenDone(run("rollInitiative", params), "roll-form");
  };
  return group(t("Initiative"), "roll-form", "roll",
    h("div", { class: "grid" },
      field(t("Combatant"), who),
      field(t("How"), how),
      marvel ? field(t("Edges"), edges) : null,
      marvel ? field(t("Troubles"), troubles) : null),
    dice, rerolls, unseen,
    // Start combat rolls every check still missing: no button to roll them all.
    h("div", { class: "row" }, button(t("Roll initiative"), "roll", roll, "primary")));
}

/** One picker per place, each offering the same [value, text] list: who goes first among
 * exact ties (marvel, R4) or in a group (R4). `send` gets the values in the order chosen,
 * once each. */
function orderingForm(title, testid, choices, send, refuse) {
  const rows = choices.map(([value], i) => select({ name: "at-" + i, "data-testid": testid + "-" + (i + 1) }, choices, value));
  const set = () => {
    const wanted = rows.map((row) => row.value);
    if (new Set(wanted).size !== wanted.length) return refuse(t("Name each combatant once."));
    return send(wanted);
  };
  return group(title, testid, testid,
    h("ol", { class: "ordering" }, rows.map((row) => h("li", null, row))),
    h("div", { class: "row" }, button(t("Set this order"), testid + "-set", set, "primary")));
}

/** Exact ties among the checks rolled (marvel's tie-breakers all equal: total, Fantastic,
 * modifier, player character; R4): the table may say their order rather than roll off, one
 * form per tied set, highest first. A group is one unit: all its members are sent, so whichever
 * acts first stands for it. */
function tiesForms(scene, run, refuse) {
  const units = new Map();
  for (const c of scene.lineup) {
    // A defeated combatant keeps its check and its place (R1): its ties are the table's too.
    if (!c.check || c.status === "removed") continue;
    const unit = c.group === null ? "#" + c.id : "group:" + c.group;
    if (!units.has(unit)) {
      units.set(unit, {
        total: c.check.total,
        key: JSON.stringify([c.check.total, c.check.fantastic, c.init_mod, c.player_character]),
        members: [],
        label: c.group === null ? c.name : t("Group {group}", { group: c.group }),
      });
    }
    units.get(unit).members.push(c.id);
  }
  const byKey = new Map();
  for (const [id, unit] of units) byKey.set(unit.key, [...(byKey.get(unit.key) || []), [id, unit]]);
  const tied = [...byKey.values()]
    .filter((list) => list.length > 1 && list.every(([, unit]) => unit.members.every((m) => scene.may(m))))
    .sort((a, b) => b[0][1].total - a[0][1].total);
  return tied.map((list, i) => orderingForm(t("Order the tie at {n}", { n: list[0][1].total }), "ties-" + (i + 1),
    list.map(([id, unit]) => [id, unit.label]),
    (wanted) => run("orderTies", { combatants: wanted.flatMap((id) => units.get(id).members) }), refuse));
}

function groupForms(scene, run, refuse) {
  const groups = new Map();
  for (const c of scene.lineup) {
    if (c.group && c.status !== "removed") groups.set(c.group, [...(groups.get(c.group) || []), c.id]);
  }
  return [...groups].filter(([, ids]) => ids.length > 1).map(([name, ids]) =>
    orderingForm(t("Order of group {group}", { group: name }), "group-" + name, ids.map((id) => [id, scene.name(id)]),
      (wanted) => run("reorderGroup", { group: name, combatants: wanted }), refuse));
}

// Conditions -----------------------------------------------------------------------------------------

function conditionForm(scene, run, refuse) {
  const listed = scene.lineup.filter((c) => c.status !== "removed");
  if (!listed.length) return null;
  const people = listed.map((c) => [c.id, c.name]);
  const target = select({ name: "target", "data-testid": "condition-target" }, people, people[0][0]);
  const note = text("condition-note", { name: "note", maxlength: MAX_TEXT });
  const rounds = integer("condition-rounds", 1, MAX_CONDITION_ROUNDS, 1);
  const boundary = select({ name: "boundary", "data-testid": "condition-boundary" },
    [["end", t("at the end of")], ["start", t("at the start of")]], "end");
  const anchor = select({ name: "anchor", "data-testid": "condition-anchor" }, [["", t("its own turns")], ...people], "");
  const source = select({ name: "source", "data-testid": "condition-source" }, [["", t("nobody")], ...people], "");
  const submit = (event) => {
    event.preventDefault();
    const n = wholeIn(rounds, 1, MAX_CONDITION_ROUNDS);
    if (n === null) return refuse(t("A condition lasts 1 to 1000 turns."));
    return clearWhenDone(run("applyCondition", {
      target: target.value, type: "custom", rounds: n, boundary: boundary.value,
      // "Its own turns" is the target's: the daemon's default anchor is the source when one is
      // named (protocol.md, apply_condition), so the page names the target itself.
      anchor: anchor.value || target.value, source: source.value || null, note: note.value.trim(),
    }), "condition-form");
  };
  return form(t("Conditions"), "condition-form", "condition", submit,
    conditionList(scene, run),
    h("div", { class: "grid" },
      field(t("On"), target),
      field(t("Condition"), note, t("Say what it is: Webbed, Stunned…")),
      field(t("Lasts (turns)"), rounds),
      field(t("Counted"), boundary),
      field(t("Whose turns"), anchor),
      field(t("Caused by"), source)),
    h("div", { class: "row" }, h("button", { type: "submit", class: "button primary", "data-testid": "apply-condition" }, t("Apply the condition"))));
}

function conditionList(scene, run) {
  const items = scene.view.conditions.map((c) => h("li", { class: "row spread", "data-testid": "applied-" + c.id },
    h("span", null, scene.name(c.target) + ": " + (c.note || c.type)),
    button(t("Remove"), "remove-condition-" + c.id, () => run("removeCondition", { condition: c.id }), "small")));
  return items.length ? h("ul", { class: "answers" }, items) : null;
}

// Reaction windows ----------------------------------------------------------------------------------

/** A moment the narrator names, offered to the combatants ticked (announce_trigger, R12): the
 * way a trigger said in words (no predicate) gets its window. The daemon opens it offered to
 * nobody too (it closes at once, or at the window's deadline), so it is opened even when
 * nobody is ticked or nobody could claim: a table whose reactions are all spent still
 * narrates its moments. */
function announceForm(scene, run, refuse) {
  const active = scene.lineup.filter((c) => c.status === "active");
  // marvel: a claim spends the reaction, and the daemon offers no window to a combatant whose
  // reaction is spent until it comes back, when the `reaction_refresh` option says.
  const spent = scene.marvel ? active.filter((c) => !c.reaction) : [];
  const offerable = active.filter((c) => !spent.includes(c));
  let spentNote = null;
  if (spent.length) {
    const names = spent.map((c) => c.name).join(", ");
    spentNote = h("p", { class: "muted", "data-testid": "reaction-spent" }, scene.option("reaction_refresh") === "round_start"
      ? t("Not offered, their reaction spent until the next round starts: {names}.", { names })
      : t("Not offered, their reaction spent until their own next turn: {names}.", { names }));
  }
  const moment = text("announce-text", { name: "text", maxlength: MAX_TEXT });
  const boxes = offerable.map((c) => [c.id, ...checkbox(c.name, "offer-" + c.id)]);
  // One window is offered to at most MAX_ITEMS combatants (`offer`): with more at the table,
  // the form says so and, once that many are ticked, the rest wait for one to be unticked.
  const crowded = boxes.length > MAX_ITEMS;
  const limitNote = crowded
    ? h("p", { class: "muted offer-limit", "data-testid": "offer-limit" },
      t("One window is offered to at most {n} combatants.", { n: MAX_ITEMS }))
    : null;
  const capOffer = () => {
    const full = boxes.filter(([, box]) => box.checked).length >= MAX_ITEMS;
    for (const [, box] of boxes) box.disabled = full && !box.checked;
  };
  if (crowded) for (const [, box] of boxes) box.addEventListener("change", capOffer);
  const submit = (event) => {
    event.preventDefault();
    const said = moment.value.trim();
    if (!said) return refuse(t("Say what happens."));
    const offer = boxes.filter(([, box]) => box.checked).map(([id]) => id);
    if (offer.length > MAX_ITEMS) return refuse(t("Offer it to at most {n} combatants.", { n: MAX_ITEMS }));
    return clearWhenDone(run("announceTrigger", { facts: { event: "narrated", text: said }, offer }), "announce-form");
  };
  return form(t("Open a reaction window"), "announce-form", "announce", submit,
    field(t("What happens"), moment),
    limitNote,
    h("div", { class: "row", role: "group", "aria-label": t("Offered to") }, boxes.map(([, , label]) => label)),
    spentNote,
    h("div", { class: "row" }, h("button", { type: "submit", class: "button primary", "data-testid": "announce" }, t("Open the window"))));
}

// The whole console ----------------------------------------------------------------------------------

/** What the narrator (or, for initiative and ties, a player) may set up now, as control groups. */
export function setupControls(scene, run, refuse) {
  const { phase } = scene.view;
  const narrator = scene.session.role === "narrator";
  const beforeOrder = phase === "setup" || phase === "initiative";
  const parts = [];
  if (beforeOrder) parts.push(initiativeForm(scene, run, refuse));
  if (beforeOrder && scene.marvel) parts.push(...tiesForms(scene, run, refuse));
  if (!narrator) return parts;
  // What a narrator does now and then folds away, so a phone shows the turn's controls first:
  // adding combatants is open while the table is setting up.
  const folded = (element, open) => (element ? fold(element, open) : null);
  parts.push(...groupForms(scene, run, refuse).map((element) => folded(element, false)));
  parts.push(folded(addCombatantForm(scene, run, refuse), beforeOrder));
  parts.push(folded(manageForm(scene, run), false));
  parts.push(folded(conditionForm(scene, run, refuse), false));
  if (!beforeOrder && !scene.view.window) parts.push(folded(announceForm(scene, run, refuse), false));
  return parts;
}
