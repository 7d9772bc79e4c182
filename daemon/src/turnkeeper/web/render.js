// The combat as the session sees it, drawn from one View (protocol.md, State types). The page
// draws only what the daemon sent: for players and observers the daemon has already left out
// hidden combatants and the reservations of narrator-run ones (R16).

import { clock, h } from "./dom.js";
import { t, term } from "./i18n.js";

/** What every panel needs: the view, who is looking, and a few lookups. */
export class Scene {
  constructor(view, session) {
    this.view = view;
    this.session = session;
    this.byId = new Map(view.combatants.map((c) => [c.id, c]));
  }

  name(id) {
    const found = this.byId.get(id);
    return found ? found.name : id;
  }

  names(ids) {
    return ids.map((id) => this.name(id)).join(", ");
  }

  get marvel() {
    return this.view.ruleset === "marvel";
  }

  /** A rule option's value (protocol.md, Rule options), or undefined when the view does not
   * tell it (a daemon older than the view's `options`): callers then assume its default. */
  option(name) {
    const found = (this.view.options || []).find(([key]) => key === name);
    return found ? found[1] : undefined;
  }

  /** Whether this session may command the combatant: the narrator always, a player its own. */
  may(id) {
    if (this.session.role === "narrator") return true;
    const found = this.byId.get(id);
    return this.session.role === "player" && found !== undefined && found.controller !== null
      && found.controller === this.session.user;
  }

  /** The combatants to list: the initiative order, then anyone not in it yet (not removed). */
  get lineup() {
    const listed = this.view.order.filter((id) => this.byId.has(id));
    const rest = this.view.combatants
      .filter((c) => c.status !== "removed" && !listed.includes(c.id))
      .map((c) => c.id);
    return [...listed, ...rest].map((id) => this.byId.get(id));
  }
}

function badge(text, kind, testid) {
  return h("span", { class: "badge badge-" + kind, "data-testid": testid || null }, text);
}

function panel(testid, title, body, extra) {
  return h("section", { class: "panel", "data-testid": testid, "aria-label": title },
    h("h2", null, title, extra || null), body);
}

function empty(text) {
  return h("p", { class: "empty" }, text);
}

/** An action type (standard, movement…) in people's words. */
export function actionType(type) {
  return term("action_type", type);
}

/** An action's kind (attack, use_item…) in people's words. */
export function actionKind(kind) {
  return term("action_kind", kind);
}

function action(scene, spec) {
  const targets = spec.targets.length ? " → " + scene.names(spec.targets) : "";
  const kind = actionKind(spec.kind);
  const what = spec.description ? kind + ": " + spec.description : kind;
  return h("span", { class: "action" }, what + targets + " ",
    h("span", { class: "action-type" }, "[" + actionType(spec.type) + "]"));
}

/**
 * A countdown the page's ticker keeps running: it counts from the deadline and the daemon's own
 * time for it (see table.js), and turns urgent within `warn` seconds of the end.
 */
function countdown(testid, deadline, since, warn) {
  return h("span", {
    class: "countdown",
    "data-testid": testid,
    "data-deadline": deadline,
    "data-since": since,
    "data-warn": warn,
    role: "timer",
  }, clock(deadline - since));
}

/** Round, phase, whose turn, what it has spent, and the turn timer. */
export function summary(scene) {
  const { view } = scene;
  let heading;
  if (view.phase === "ended") heading = t("Combat over");
  else if (view.phase === "bonus_round" || view.round === 0) heading = t("Bonus round");
  else if (view.round !== null) heading = t("Round {n}", { n: view.round });
  else if (view.phase === "initiative") heading = t("Rolling initiative");
  else heading = t("Setting up");

  const turn = view.turn;
  let current;
  if (turn) {
    // A held turn being taken: marvel holds (R9), dnd3e delays.
    const kinds = { normal: null, held: scene.marvel ? t("held turn") : t("delayed turn"), floor: t("at the delay floor") };
    current = h("div", { class: "turn", "data-testid": "turn", "data-combatant": turn.combatant },
      h("span", { class: "turn-label" }, t("Now acting")),
      h("strong", { class: "turn-name", "data-testid": "turn-name" }, scene.name(turn.combatant)),
      kinds[turn.kind] ? badge(kinds[turn.kind], "held", "turn-kind") : null,
      turn.used.length
        ? h("span", { class: "spent" }, t("Spent: {types}", { types: turn.used.map(actionType).join(", ") }))
        : null);
  } else {
    current = h("div", { class: "turn", "data-testid": "turn" },
      h("span", { class: "turn-label" }, view.phase === "rounds" ? t("No turn you can see") : t("No turn in progress")));
  }

  let timer = null;
  if (turn && turn.deadline !== null) {
    const warn = turn.warn_at !== null ? turn.deadline - turn.warn_at : 0;
    timer = h("div", { class: "timer" + (turn.warned ? " warned" : ""), "data-testid": "timer" },
      h("span", { class: "timer-label" }, t("Turn timer")),
      countdown("timer-countdown", turn.deadline, turn.started_at, warn));
  }

  return h("section", { class: "summary", "data-testid": "summary" },
    h("div", { class: "round" },
      h("span", { class: "round-name", "data-testid": "round", "data-round": view.round ?? "" }, heading),
      h("span", { class: "ruleset" }, view.ruleset + " · " + view.combat_id)),
    current, timer);
}

function checkCell(check) {
  if (!check) return h("span", { class: "muted" }, t("Not rolled yet"));
  const dice = check.faces.map((face, i) => {
    const marvelDie = check.dice === "d616" && i === 2;
    return h("span", {
      class: "die" + (marvelDie ? " die-marvel" : ""),
      title: marvelDie ? t("Marvel die") : null,
    }, marvelDie && face === 1 ? "M" : String(face));
  });
  const modifier = check.modifier
    ? h("span", { class: "modifier" }, (check.modifier > 0 ? "+" : "−") + Math.abs(check.modifier))
    : null;
  let fantastic = null;
  if (check.ultimate) fantastic = badge("★ " + t("Ultimate Fantastic"), "fantastic", "fantastic");
  else if (check.fantastic) fantastic = badge("★ " + t("Fantastic"), "fantastic", "fantastic");
  return h("span", { class: "check", "data-testid": "check" },
    h("span", { class: "dice-name" }, check.dice),
    h("span", {
      class: "dice",
      title: check.supplied_by ? t("Dice rolled by {who}", { who: check.supplied_by }) : t("Rolled by Turnkeeper"),
    }, dice),
    modifier,
    h("span", { class: "total", "data-testid": "total" }, "= " + check.total),
    fantastic,
    check.edges ? badge(t("Edges: {n}", { n: check.edges }), "edge") : null,
    check.troubles ? badge(t("Troubles: {n}", { n: check.troubles }), "trouble") : null);
}

/** Where a hold says its held turn will be taken. */
function holdPlan(scene, hold) {
  if (hold.plan === "before") return t("acts just before {name}", { name: scene.name(hold.target) });
  if (hold.plan === "after") return t("acts just after {name}", { name: scene.name(hold.target) });
  if (hold.plan === "at") return t("acts at {n}", { n: hold.number });
  if (hold.number !== null) return t("named {n}; not yet said when", { n: hold.number });
  return t("not yet said when");
}

/** Why a combatant's number is what it is, when it is not its check's total: a hold (R9), a
 * readied action that went off (R11), a refocus (R14). */
function placeNote(scene, c, hold) {
  if (hold) {
    const rolled = c.check ? t("rolled {n}", { n: c.check.total }) : null;
    const holding = scene.marvel ? t("holding since round {n}", { n: hold.round }) : t("delaying since round {n}", { n: hold.round });
    return [holding, holdPlan(scene, hold), rolled].filter(Boolean).join("; ");
  }
  if (c.check && c.place !== null && c.place !== c.check.total) {
    return t("now acts at {place} (rolled {n})", { place: c.place, n: c.check.total });
  }
  return null;
}

/** What a row says about its combatant beyond its check: its hold, reservations, conditions. */
function rowNotes(scene, c, hold) {
  const notes = [];
  const place = placeNote(scene, c, hold);
  if (place) notes.push(h("li", { "data-testid": "row-hold" }, place));
  for (const r of scene.view.reservations.filter((r) => r.combatant === c.id)) {
    const what = r.mode === "reserve" ? t("Reserved: {type}", { type: actionType(r.reserved_type) }) : t("Readied");
    notes.push(h("li", { "data-testid": "row-reservation" }, badge(what, "reserved"), " ", action(scene, r.action), " ",
      h("q", null, r.trigger.text)));
  }
  for (const k of scene.view.conditions.filter((k) => k.target === c.id)) {
    // The note is people's words, of any length: plain text that wraps, after the badge.
    const kind = k.type === "surprised" ? t("Surprised") : k.type === "custom" ? t("Condition") : k.type;
    // A clock counted on a combatant hidden from this session is left out of its view: no
    // rounds to show then, rather than a made-up 0.
    const left = k.clocks.length ? Math.max(...k.clocks.map((clock) => clock.remaining)) : null;
    notes.push(h("li", { "data-testid": "row-condition" }, badge(kind, "condition"),
      k.note ? [" ", h("span", { class: "note" }, k.note)] : null,
      left === null ? null : [" ", h("span", { class: "muted" }, t("Rounds left: {n}", { n: left }))]));
  }
  return notes.length ? h("ul", { class: "row-notes" }, notes) : null;
}

/** The initiative order with each check, who is holding, and each combatant's state. */
export function order(scene) {
  const { view } = scene;
  const holding = new Map(view.holds.map((hold) => [hold.combatant, hold]));
  const current = view.turn ? view.turn.combatant : null;
  const rows = scene.lineup.map((c) => {
    const hold = holding.get(c.id);
    const marks = [
      // TRANSLATORS: short for player character.
      c.player_character ? badge(t("PC"), "pc") : null,
      c.group ? badge(t("Group {group}", { group: c.group }), "group badge-text") : null,
      c.hidden ? badge(t("Hidden"), "hidden", "hidden") : null,
      c.surprised ? badge(t("Surprised"), "surprised") : null,
      hold ? badge(scene.marvel ? t("Holding") : t("Delaying"), "holding", "holding") : null,
      c.status === "defeated" ? badge(t("Defeated"), "defeated") : null,
      c.status === "removed" ? badge(t("Removed"), "defeated") : null,
      scene.marvel && !c.reaction ? badge(t("Reaction spent"), "spent") : null,
    ];
    return h("tr", {
      class: [c.id === current ? "current" : "", c.status, c.hidden ? "is-hidden" : ""].join(" ").trim(),
      "data-testid": "combatant-" + c.id,
      "aria-current": c.id === current ? "true" : null,
    },
    h("td", { class: "place", "data-testid": "place" }, c.place ?? "–"),
    h("th", { scope: "row", class: "who" },
      h("span", { class: "name", "data-testid": "name" }, c.name), h("span", { class: "marks" }, marks),
      h("span", { class: "played-by" }, c.controller === null ? t("Narrator") : c.controller),
      rowNotes(scene, c, hold)),
    h("td", { class: "initiative" }, checkCell(c.check)));
  });
  const table = rows.length
    ? h("table", { class: "order" },
      h("thead", null, h("tr", null,
        // TRANSLATORS: column of the current initiative number, kept short.
        h("th", { scope: "col" }, t("Init")),
        h("th", { scope: "col" }, t("Combatant")),
        h("th", { scope: "col" }, t("Initiative check")))),
      h("tbody", null, rows))
    : empty(t("No combatants yet."));
  return panel("order", t("Initiative order"), table);
}

/** Held (marvel) or delayed (dnd3e) turns and when each is to be taken. */
export function holds(scene) {
  const { view } = scene;
  const items = view.holds.map((hold) => h("li", { "data-testid": "hold-" + hold.combatant },
    h("div", null, h("strong", null, scene.name(hold.combatant)), " ",
      h("span", { class: "muted" }, t("since round {n}", { n: hold.round }))),
    h("div", { "data-testid": "plan" }, holdPlan(scene, hold))));
  return panel("holds", scene.marvel ? t("Holding") : t("Delaying"),
    items.length ? h("ul", { class: "items" }, items) : empty(t("Nobody.")));
}

/** Reserved (marvel) or readied (dnd3e) actions with their triggers. */
export function reservations(scene) {
  const items = scene.view.reservations.map((r) => h("li", { "data-testid": "reservation-" + r.id, "data-combatant": r.combatant },
    h("div", null, h("strong", null, scene.name(r.combatant)), " ",
      badge(r.mode === "reserve" ? t("Reserved: {type}", { type: actionType(r.reserved_type) }) : t("Readied"), "reserved"),
      " ", h("span", { class: "muted" }, t("round {n}", { n: r.round }))),
    h("div", null, action(scene, r.action)),
    h("div", { class: "trigger" }, h("span", { class: "trigger-label" }, t("Trigger:")), " ",
      h("q", { "data-testid": "trigger" }, r.trigger.text))));
  return panel("reservations", scene.marvel ? t("Reserved actions") : t("Readied actions"),
    items.length ? h("ul", { class: "items" }, items) : empty(t("None.")));
}

/** The reaction window, if one is open or resolving: its moment, who was offered it and how
 * each answered, its deadline. */
export function reactionWindow(scene) {
  const w = scene.view.window;
  if (!w) return null;
  const claims = new Map(w.claims.map((claim) => [claim.combatant, claim]));
  const passes = new Set(w.passes);
  const everyone = [...w.offered, ...w.claims.map((claim) => claim.combatant).filter((id) => !w.offered.includes(id))];
  // For a player, index -1 while someone hidden from them reacts (R16): nobody shown reacting.
  const unseen = w.status === "resolving" && w.index < 0;
  const reacting = w.status === "resolving" && !unseen ? w.sequence[w.index] : null;
  const answers = everyone.map((id) => {
    const claim = claims.get(id);
    let answer;
    if (claim) {
      const reserved = claim.reservation ? t("with a reservation") : null;
      answer = h("span", null, badge(t("Claims"), "claim"), " ", action(scene, claim.action),
        reserved ? h("span", { class: "muted" }, " · " + reserved) : null);
    } else if (passes.has(id)) answer = badge(t("Passes"), "pass");
    else answer = badge(t("Waiting"), "waiting");
    return h("li", { "data-testid": "offered-" + id, class: id === reacting ? "reacting" : null },
      h("div", null, h("strong", null, scene.name(id)), " ",
        id === reacting ? badge(t("Reacting now"), "reacting") : null),
      h("div", null, answer));
  });
  const moment = w.facts.text || w.facts.event;
  const waits = w.status === "open" && w.deadline > w.opened_at;
  return panel("window", t("Reaction window"), h("div", { class: "window", "data-window": w.id, "data-status": w.status },
    h("p", { class: "moment" },
      badge(w.status === "open" ? t("Open") : t("Resolving"), w.status, "window-status"), " ",
      h("q", { "data-testid": "moment" }, moment),
      w.facts.actor ? h("span", { class: "muted" }, " · " + scene.name(w.facts.actor)) : null),
    w.action ? h("p", null, t("Waiting to resolve:"), " ", action(scene, w.action)) : null,
    waits ? h("p", { class: "deadline" }, t("Closes in"), " ", countdown("window-countdown", w.deadline, w.opened_at, 10)) : null,
    // The narrator sees everyone: a window offered to nobody (announced while every reaction is
    // spent) is offered to nobody at all.
    answers.length ? h("ul", { class: "items" }, answers)
      : empty(scene.session.role === "narrator" ? t("Offered to nobody.") : t("Offered to nobody you can see.")),
    unseen ? h("p", { class: "muted", "data-testid": "unseen-reactor" }, t("Someone you cannot see is reacting now.")) : null,
    w.status === "resolving" && w.sequence.length
      ? h("p", { class: "muted" }, t("Resolving in order: {names}", { names: scene.names(w.sequence) }))
      : null));
}

/** The rule options this page words itself; any other (a plugin's ruleset's) is shown as named. */
const WORDED_OPTIONS = new Set(["turn_time_limit", "turn_warning", "turn_expiry", "window_deadline",
  "reaction_refresh", "ready", "delay"]);

/** The combat's rule options, read-only, in people's words (protocol.md, Rule options): the
 * forms offer only what they allow. Nothing from a daemon whose view does not tell them. */
export function rules(scene) {
  const options = scene.view.options || [];
  if (!options.length) return null;
  const value = (name) => scene.option(name);
  const entries = [];
  const limit = value("turn_time_limit");
  entries.push(["turn_time_limit", t("Turn timer"), limit === null ? t("none") : clock(limit)]);
  if (limit !== null) {
    const warning = value("turn_warning");
    // The warning fires only if it is more than 0 and less than the limit.
    if (warning > 0 && warning < limit) {
      entries.push(["turn_warning", t("Warns"), t("{time} before the end", { time: clock(warning) })]);
    }
    entries.push(["turn_expiry", t("When the timer runs out"),
      value("turn_expiry") === "hold" ? t("holds the turn") : t("ends the turn")]);
  }
  const wait = value("window_deadline");
  entries.push(["window_deadline", t("Reactions wait"), wait ? clock(wait) : t("only for the answers")]);
  if (value("reaction_refresh") !== undefined) {
    entries.push(["reaction_refresh", t("A spent reaction comes back"),
      value("reaction_refresh") === "round_start" ? t("at each round's start") : t("at its own turn")]);
  }
  if (value("ready") !== undefined) {
    entries.push(["ready", t("Readied action rules"),
      value("ready") === "3.5" ? t("3.5: a standard, move or free action") : t("3.0: a standard or move action")]);
  }
  if (value("delay") !== undefined) {
    entries.push(["delay", t("Delay rules"),
      value("delay") === "3.5" ? t("3.5: no floor") : t("3.0: down to −10 minus the initiative modifier")]);
  }
  for (const [name, v] of options) {
    if (!WORDED_OPTIONS.has(name)) entries.push([name, name, v === null ? "–" : String(v)]);
  }
  return panel("rules", t("Rules"), h("dl", { class: "rules" }, entries.map(([name, label, text]) =>
    h("div", { "data-testid": "rule-" + name }, h("dt", null, label), h("dd", null, text)))));
}

/** Conditions in effect and how long each lasts. */
export function conditions(scene) {
  const items = scene.view.conditions.map((c) => {
    const kind = c.type === "surprised" ? t("Surprised") : c.type === "custom" ? t("Condition") : c.type;
    const clocks = c.clocks.map((k) => h("li", { "data-testid": "clock" },
      h("span", { class: "left", "data-testid": "left" }, t("Rounds left: {n}", { n: k.remaining })), " ",
      h("span", { class: "muted" }, k.boundary === "start"
        ? t("counted at the start of {name}'s turns", { name: scene.name(k.anchor) })
        : t("counted at the end of {name}'s turns", { name: scene.name(k.anchor) }))));
    return h("li", { "data-testid": "condition-" + c.id, "data-target": c.target },
      h("div", null, h("strong", null, scene.name(c.target)), " ", badge(kind, "condition"),
        c.source ? h("span", { class: "muted" }, " " + t("from {name}", { name: scene.name(c.source) })) : null),
      c.note ? h("div", { class: "note" }, c.note) : null,
      c.surprisers.length ? h("div", { class: "muted" }, t("Surprised by {names}", { names: scene.names(c.surprisers) })) : null,
      h("ul", { class: "clocks" }, clocks));
  });
  return panel("conditions", t("Conditions"), items.length ? h("ul", { class: "items" }, items) : empty(t("None.")));
}
