// Turnkeeper for Foundry VTT: the combat tracker follows a Turnkeeper daemon (docs/bridges.md).
//
// Turnkeeper is the single writer of the turn order. A change Foundry would make itself (Begin
// Combat, Next Turn, an initiative roll, a combatant marked defeated or revealed) is cancelled in
// its pre-update hook and sent to the daemon as a command; the daemon's events are then written
// into the Combat document. One browser talks to the daemon: the active GM's, with a narrator
// bridge token. Anyone else's click becomes an "ask", a flag written on a document that user may
// change; Foundry tells the GM's browser who wrote it, and the command goes `as` that user, so
// the daemon judges what the user may do (R16).

import { Client } from "../lib/turnkeeper/index.js";

const ID = "foundry-turnkeeper";
const SPEAKER = { alias: "Turnkeeper" };

/** The narrator's session: commands and the mirror. Null unless connected. */
let narrator = null;
/** The session whose narration goes to everyone's chat: an observer's, which shows only what
 * players may see (R16). Null: the narrator's narration is whispered to the GMs instead. */
let table = null;
/** The subscriptions of each combat followed (none yet while it is being set up). */
const followed = new Map();

/** Options marking the bridge's own writes: the only turn-order writes let through. A fresh
 * object each time, since Foundry adds to the options it is given. */
const mirrored = () => ({ [ID]: true });
const setting = (key) => game.settings.get(ID, key);
const localize = (key, data) => game.i18n.format(`TURNKEEPER.${key}`, data ?? {});
const gms = () => game.users.filter((user) => user.isGM).map((user) => user.id);
const isBridge = () => narrator !== null && game.user === game.users.activeGM;
const isFollowed = (combat) => Boolean(combat?.getFlag(ID, "follow"));

Hooks.once("init", () => {
  const world = { scope: "world", config: true, requiresReload: true, type: String };
  // Tokens stay in the browser they are typed in: world settings reach every player's browser.
  const browser = { ...world, scope: "client" };
  register("url", world, "ws://127.0.0.1:7617/ws");
  register("token", browser, "");
  register("tableToken", browser, "");
  register("locale", world, "");
  const rulesets = { marvel: "Marvel Multiverse", dnd3e: "D&D 3e" };
  register("ruleset", { ...world, choices: rulesets }, "marvel");
  game.modules.get(ID).api = { ask, close };
  // v13 renamed the hook (and passes an HTMLElement rather than jQuery).
  const rendered = game.release.generation >= 13 ? "renderChatMessageHTML" : "renderChatMessage";
  Hooks.on(rendered, bindCard);
});

function register(key, config, fallback) {
  const [name, hint] = [`TURNKEEPER.${key}.name`, `TURNKEEPER.${key}.hint`];
  game.settings.register(ID, key, { ...config, name, hint, default: fallback });
}

Hooks.once("ready", () => {
  if (game.user === game.users.activeGM) connect().catch((error) => report(error));
});

async function connect() {
  const token = setting("token");
  if (!token) return ui.notifications.warn(localize("NoToken"));
  const [url, tableToken] = [setting("url"), setting("tableToken")];
  const options = { locale: setting("locale") || game.i18n.lang, name: ID, kind: "bridge" };
  narrator = await Client.connect(url, { ...options, token, narrate: !tableToken });
  narrator.onStatus((status, error) => {
    if (status !== "closed") return;
    narrator = null;
    report(error);
  });
  if (tableToken) {
    table = await Client.connect(url, { ...options, token: tableToken, narrate: true });
    table.onStatus((status, error) => status === "closed" && report(error));
  }
  for (const combat of game.combats) await follow(combat).catch((error) => report(error));
  Hooks.callAll(`${ID}.connected`);
}

/** Disconnect this browser (a reload connects again). */
function close() {
  for (const client of [narrator, table]) client?.close();
  narrator = table = null;
  followed.clear();
}

// Turnkeeper → Foundry --------------------------------------------------------------------------

/** Make a Foundry combat a Turnkeeper combat of the same id (adding the combatants it lacks),
 * mirror it as it stands, then follow its events from there. */
async function follow(combat) {
  if (followed.has(combat.id)) return;
  followed.set(combat.id, []);
  try {
    await narrator.createCombat({ combat_id: combat.id, ruleset: setting("ruleset") });
  } catch (error) {
    if (error.code !== "combat_exists") {
      followed.delete(combat.id);
      throw error;
    }
  }
  await combat.setFlag(ID, "follow", true); // every browser's guards apply from here on
  const { seq, view } = await narrator.getCombat({ combat: combat.id });
  for (const combatant of combat.combatants) {
    if (!view.combatants.some((c) => c.id === combatant.id)) add(combatant);
  }
  await resync(combat, view);
  const subscriptions = [await narrator.subscribe({ combat: combat.id, after: seq })];
  pump(subscriptions[0], apply);
  if (table) {
    subscriptions.push(await table.subscribe({ combat: combat.id, after: seq }));
    pump(subscriptions[1], (event) => tell(event));
  }
  followed.set(combat.id, subscriptions);
}

async function pump(subscription, handle) {
  try {
    for await (const event of subscription) await handle(event).catch((error) => report(error));
  } catch (error) {
    report(error); // the subscription ended: too far behind, or the session is gone
  }
}

/** One of the narrator's events, written into the Combat document it is about. */
async function apply(event) {
  if (!table) await tell(event, gms());
  const combat = game.combats.get(event.combat);
  if (!combat) return;
  const combatant = (id) => combat.combatants.get(id);
  switch (event.event) {
    case "initiative_rolled": {
      const members = event.members.filter((id) => combatant(id));
      const updates = members.map((id) => ({ _id: id, initiative: event.check.total }));
      return combat.updateEmbeddedDocuments("Combatant", updates, mirrored());
    }
    case "place_changed":
      return combatant(event.combatant)?.update({ initiative: event.place }, mirrored());
    case "round_started":
      return combat.update({ round: Math.max(event.round, 1) }, mirrored());
    case "turn_started":
      return showTurn(combat, {
        round: event.round, combatant: event.combatant, number: event.number ?? null,
      });
    case "combatant_defeated":
    case "combatant_revived": {
      const defeated = event.event === "combatant_defeated";
      return combatant(event.combatant)?.update({ defeated }, mirrored());
    }
    case "combatant_revealed":
      return combatant(event.combatant.id)?.update({ hidden: false }, mirrored());
    case "combatant_removed":
      return combatant(event.combatant)?.delete(mirrored());
    case "window_opened":
      return cards(combat, event.window);
    case "command_undone":
      // The undone events are not taken back one by one: read the combat again.
      return resync(combat, (await narrator.getCombat({ combat: combat.id })).view);
  }
}

/** Foundry's round and current combatant as Turnkeeper has them. Foundry has no round 0 in a
 * begun combat (`started` is round > 0), so the marvel bonus round shows as round 1 (the chat
 * says which it is). The turn as Turnkeeper names it is kept in a flag, for end_turn. */
function showTurn(combat, ref) {
  const changes = { round: Math.max(ref.round, 1), flags: { [ID]: { turn: ref } } };
  const index = combat.turns.findIndex((c) => c.id === ref.combatant);
  if (index >= 0) changes.turn = index;
  return combat.update(changes, mirrored());
}

/** The whole combat as a view shows it: initiative, defeated, hidden, round and turn. */
async function resync(combat, view) {
  const updates = view.combatants
    .filter((c) => c.status !== "removed" && combat.combatants.get(c.id))
    .map((c) => ({
      _id: c.id,
      initiative: c.place,
      defeated: c.status === "defeated",
      hidden: c.hidden,
    }));
  await combat.updateEmbeddedDocuments("Combatant", updates, mirrored());
  const { turn } = view;
  if (turn) {
    return showTurn(combat, { round: turn.round, combatant: turn.combatant, number: turn.number });
  }
  const round = view.round === null ? 0 : Math.max(view.round, 1);
  return combat.update({ round, turn: null, flags: { [ID]: { turn: null } } }, mirrored());
}

/** An event's narration as a chat line, for everyone or whispered. */
function tell(event, whisper = []) {
  if (!event.summary) return Promise.resolve();
  const content = escape(event.summary.trim());
  const flags = { [ID]: { combat: event.combat, seq: event.seq } };
  return ChatMessage.create({ content, speaker: SPEAKER, whisper, flags });
}

/** A reaction window (R12): a card for each combatant offered it, whispered to its player and the
 * GMs, with a Claim button per reservation it holds and a Pass button. Foundry has no reaction
 * windows; the card is this module's own. */
async function cards(combat, window) {
  const { view } = await narrator.getCombat({ combat: combat.id });
  for (const id of window.offered) {
    const offered = view.combatants.find((c) => c.id === id);
    const claims = view.reservations
      .filter((r) => r.combatant === id)
      .map((r) => button("claim", localize("ClaimWith", { trigger: r.trigger.text }), r.id));
    const content =
      `<div class="${ID}-card"><p>${escape(localize("MayReact", { name: offered.name }))}</p>` +
      `${claims.join(" ")} ${button("pass", localize("Pass"))}</div>`;
    const users = new Set([offered.controller, ...gms()]);
    const whisper = [...users].filter((user) => game.users.get(user));
    const answer = { combat: combat.id, window: window.id, combatant: id };
    await ChatMessage.create({ content, speaker: SPEAKER, whisper, flags: { [ID]: { answer } } });
  }
}

function button(answer, label, reservation) {
  const data = reservation ? ` data-reservation="${escape(reservation)}"` : "";
  return `<button type="button" data-answer="${answer}"${data}>${escape(label)}</button>`;
}

function bindCard(message, html) {
  const answer = message.getFlag(ID, "answer");
  if (!answer) return;
  const root = html.jquery ? html[0] : html;
  for (const element of root.querySelectorAll("button[data-answer]")) {
    element.addEventListener("click", () => {
      const combatant = game.combats.get(answer.combat)?.combatants.get(answer.combatant);
      if (!combatant) return;
      const { reservation } = element.dataset;
      if (element.dataset.answer === "pass") return ask(combatant, "pass_reaction", answer);
      ask(combatant, "claim_reaction", { ...answer, reservation });
    });
  }
}

// Foundry → Turnkeeper --------------------------------------------------------------------------

/**
 * Send a command for this browser's user: at once from the bridge's browser; from any other, as
 * an ask written on `document`, one the user may change (a combatant the player owns; the combat
 * for a GM). The bridge hears it with the user Foundry says wrote it. Macros use it too:
 * `game.modules.get("foundry-turnkeeper").api.ask(combatant, "hold", {combat, turn})`.
 */
function ask(document, method, params) {
  if (isBridge()) return void send(method, params, game.user.id);
  // A string, not an object: Foundry merges an object flag into the one before it.
  const request = JSON.stringify({ id: foundry.utils.randomID(), method, params });
  document.setFlag(ID, "ask", request).catch((error) => report(error));
}

function heard(document, changed, options, userId) {
  const request = changed.flags?.[ID]?.ask;
  if (!request || !isBridge()) return;
  const { id, method, params } = JSON.parse(request);
  // The ask's own id makes the request id: an ask heard twice is one command, applied once.
  void send(method, params, userId, `${userId}.${id}`);
}

async function send(method, params, userId, requestId) {
  const command = { ...params, request_id: requestId };
  delete command.as;
  // A GM's command is the narrator's; anyone else's runs exactly as that user's would (R16).
  if (!game.users.get(userId)?.isGM) command.as = userId;
  try {
    return await narrator.call(method, command);
  } catch (error) {
    report(error, userId);
  }
}

function add(combatant) {
  const players = combatant.players;
  const params = {
    combat: combatant.parent.id,
    id: combatant.id,
    display_name: combatant.name,
    controller: players[0]?.id ?? null, // Turnkeeper's user ids are Foundry's
    player_character: players.length > 0,
    hidden: combatant.hidden,
  };
  // A combatant created while its combat was being set up may be added twice: once is enough.
  narrator.addCombatant(params).catch((e) => e.code === "duplicate_combatant" || report(e));
}

Hooks.on("updateCombat", heard);
Hooks.on("updateCombatant", heard);

Hooks.on("createCombat", (combat) => {
  if (isBridge()) follow(combat).catch((error) => report(error));
});
Hooks.on("createCombatant", (combatant, options) => {
  if (isBridge() && isFollowed(combatant.parent) && !options[ID]) add(combatant);
});
Hooks.on("deleteCombatant", (combatant, options) => {
  if (!isBridge() || !isFollowed(combatant.parent) || options[ID]) return;
  const params = { combat: combatant.parent.id, combatant: combatant.id };
  void send("remove_combatant", params, game.user.id);
});
Hooks.on("deleteCombat", (combat) => {
  if (!isBridge() || !followed.has(combat.id)) return;
  for (const subscription of followed.get(combat.id)) void subscription.close();
  followed.delete(combat.id);
  narrator.endCombat({ combat: combat.id }).catch((e) => e.code === "combat_ended" || report(e));
});

// These fire in the browser that clicked, before Foundry writes anything.
Hooks.on("combatStart", (combat) => {
  if (isFollowed(combat)) ask(combat, "start_combat", { combat: combat.id });
});
Hooks.on("combatTurn", advance);
Hooks.on("combatRound", advance);

function advance(combat, data, options) {
  if (!isFollowed(combat)) return;
  if (options.direction < 0) return ask(combat, "undo", { combat: combat.id });
  // The turn this browser shows: a click on a turn that has passed is stale_turn (R5), never
  // the end of the next one.
  const turn = combat.getFlag(ID, "turn");
  ask(combat.combatant ?? combat, "end_turn", { combat: combat.id, turn });
}

// Foundry's own writes of what Turnkeeper decides are cancelled (returning false cancels them).
Hooks.on("preUpdateCombat", (combat, changed, options) => {
  return !isFollowed(combat) || options[ID] === true || !("round" in changed || "turn" in changed);
});
Hooks.on("preUpdateCombatant", (combatant, changed, options) => {
  const combat = combatant.parent;
  if (!isFollowed(combat) || options[ID] === true) return true;
  const params = { combat: combat.id, combatant: combatant.id };
  if (typeof changed.initiative === "number") ask(combatant, "roll_initiative", params);
  if ("defeated" in changed) {
    ask(combatant, changed.defeated ? "defeat_combatant" : "revive_combatant", params);
  }
  if (changed.hidden === false) ask(combatant, "reveal_combatant", params);
  return !["initiative", "defeated", "hidden"].some((key) => key in changed);
});
// Foundry's initiative roll card shows a roll that did not count: Turnkeeper rolls (R2).
Hooks.on("preCreateChatMessage", (message) => {
  return !(message.getFlag("core", "initiativeRoll") && isFollowed(game.combat));
});

// -----------------------------------------------------------------------------------------------

/** Tell this browser's user, or whisper to another, what went wrong. */
function report(error, userId = game.user.id) {
  if (!error || error.code === "client_closed") return;
  const text = `Turnkeeper: ${error.message}`;
  if (userId === game.user.id) ui.notifications.warn(text);
  else ChatMessage.create({ content: escape(text), speaker: SPEAKER, whisper: [userId] });
}

function escape(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
