// Turnkeeper for Foundry VTT: the combat tracker follows a Turnkeeper daemon (docs/bridges.md).
//
// Turnkeeper is the single writer of the turn order. A change Foundry would make itself (Begin
// Combat, Next Turn, an initiative roll, a combatant or its actor marked defeated, a combatant
// revealed) is cancelled in its pre-update hook and sent to the daemon as a command; the daemon's
// events are then written into the Combat document. One browser talks to the daemon: the active
// GM's (`game.users.activeGM`), with a narrator bridge token; when another GM becomes the active
// one, that GM's browser takes over. Anyone else's click becomes an "ask" on the module's socket;
// the bridge sends it `as` the user who sent it, so the daemon judges what that user may do (R16).

import { Client, COMMAND_METHODS } from "../lib/turnkeeper/index.js";

const ID = "foundry-turnkeeper";
/** The module's socket event (module.json has `"socket": true`): Foundry relays it to every
 * other connected browser. */
const SOCKET = `module.${ID}`;
const SPEAKER = { alias: "Turnkeeper" };
/** Equal places get fractions of 1/TIE_STEPS to keep Turnkeeper's order in Foundry's tracker:
 * more than the daemon's 500 combatants a combat may hold, so the fractions of one place never
 * reach the next whole number. */
const TIE_STEPS = 1000;
/** What an ask may name: the engine's commands, as the client's generated method table lists
 * them. Never a query, a table or token method, or a session method: the narrator's session
 * would answer those for whoever asked. */
const COMMANDS = new Set(COMMAND_METHODS);
/** Asks of this browser still unanswered, kept to be sent again to the next bridge if the
 * active GM leaves before answering: far more than a table clicks in the seconds a handover
 * takes. Past it the oldest is forgotten, never sent again. */
const MAX_WAITING_ASKS = 100;

/** The narrator's session: commands and the mirror. Null unless connected. */
let narrator = null;
/** The session whose narration goes to everyone's chat: an observer's, which shows only what
 * players may see (R16). Null: the narrator's narration is whispered to the GMs instead. */
let table = null;
/** The subscriptions of each combat followed (none yet while it is being set up). */
const followed = new Map();
/** This browser's connecting, while it becomes the bridge. */
let connecting = null;
/** This browser's asks the bridge has not answered, by ask id, as they went on the socket. */
const waiting = new Map();
/** The defeat or revive this browser asked for each combatant and is waiting on, by combatant
 * id: `{defeated, id}` (the ask's id). The tracker's skull changes the combatant and then its
 * actor's status: one command for both. */
const intended = new Map();

/** Options marking the bridge's own writes: the only turn-order writes let through. A fresh
 * object each time, since Foundry adds to the options it is given. */
const mirrored = () => ({ [ID]: true });
const setting = (key) => game.settings.get(ID, key);
const localize = (key, data) => game.i18n.format(`TURNKEEPER.${key}`, data ?? {});
const gms = () => game.users.filter((user) => user.isGM).map((user) => user.id);
/** Foundry's one connected GM that acts for all (v13, v14 `Users#activeGM`: "where only one
 * user should take action"): the same user in every browser. */
const isActiveGM = () => game.user === game.users.activeGM;
const isBridge = () => narrator !== null && isActiveGM();
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
});

function register(key, config, fallback) {
  const [name, hint] = [`TURNKEEPER.${key}.name`, `TURNKEEPER.${key}.hint`];
  game.settings.register(ID, key, { ...config, name, hint, default: fallback });
}

Hooks.once("ready", () => {
  // Foundry's server hands each socket message over with the id of the user whose browser sent
  // it: that, never a name inside the message, says who asked, and only a GM's answer counts.
  game.socket.on(SOCKET, (message, senderId) => {
    const fromGM = Boolean(game.users.get(senderId)?.isGM);
    if (message?.type === "ask") heard(message, senderId);
    else if (message?.type === "bridge" && senderId === game.users.activeGM?.id) askAgain();
    else if (fromGM && message?.user === game.user.id) answered(message);
  });
  takeOver();
  // The active GM changes when a GM joins or leaves (v13, v14 hook `userConnected`).
  Hooks.on("userConnected", takeOver);
});

/** Become the bridge when this browser's user is the active GM; stop being it when another GM
 * is. Foundry elects the same active GM in every browser, so exactly one connects. */
function takeOver() {
  if (!isActiveGM()) return close();
  if (narrator || connecting) return;
  connecting = connect()
    .catch((error) => report(error))
    .finally(() => {
      connecting = null;
      if (!isActiveGM()) close(); // another GM joined while this one was connecting
    });
}

async function connect() {
  const token = setting("token");
  if (!token) return ui.notifications.warn(localize("NoToken"));
  const [url, tableToken] = [setting("url"), setting("tableToken")];
  const options = { locale: setting("locale") || game.i18n.lang, name: ID, kind: "bridge" };
  const session = await Client.connect(url, { ...options, token, narrate: !tableToken });
  narrator = session;
  session.onStatus((status, error) => {
    if (status !== "closed" || narrator !== session) return; // not one this browser closed
    narrator = null;
    report(error);
  });
  if (tableToken) {
    table = await Client.connect(url, { ...options, token: tableToken, narrate: true });
    table.onStatus((status, error) => status === "closed" && report(error));
  }
  // Another GM became the active one meanwhile: takeOver closes this browser's sessions.
  if (!isActiveGM()) return;
  for (const combat of game.combats) await follow(combat).catch((error) => report(error));
  // Asks the previous bridge left unanswered come again, with their ids: the request ids they
  // make are the ones it used, so what it had sent is not applied twice (idempotency, with the
  // same bridge token in every GM's browser). This browser's own are sent at once.
  askAgain();
  game.socket.emit(SOCKET, { type: "bridge" });
  Hooks.callAll(`${ID}.connected`);
}

/** Disconnect this browser (a reload connects again, if its user is the active GM). */
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
    // From the last line the table's chat has: a GM taking over (or reloading) tells what
    // happened since, and nothing twice.
    const after = told(combat) ?? seq;
    subscriptions.push(await table.subscribe({ combat: combat.id, after }));
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

/** Events after which Turnkeeper's places or order may differ from Foundry's initiatives. */
const REORDERING = new Set([
  "initiative_rolled",
  "ties_ordered",
  "group_reordered",
  "combat_started",
  "combatant_slotted",
  "place_changed",
]);

/** One of the narrator's events, written into the Combat document it is about. */
async function apply(event) {
  if (!table) await tell(event, gms());
  const combat = game.combats.get(event.combat);
  if (!combat) return;
  const combatant = (id) => combat.combatants.get(id);
  if (REORDERING.has(event.event)) return arrange(combat, await read(combat));
  switch (event.event) {
    case "round_started": {
      // The round's first turn_started moves the turn and runs Foundry's turn events.
      const round = Math.max(event.round, 1);
      return combat.update({ round }, { ...mirrored(), turnEvents: false });
    }
    case "turn_started":
      return showTurn(combat, {
        round: event.round, combatant: event.combatant, number: event.number ?? null,
      });
    case "combatant_defeated":
    case "combatant_revived": {
      const defeated = event.event === "combatant_defeated";
      const updated = await combatant(event.combatant)?.update({ defeated }, mirrored());
      return updated && showDefeated(updated);
    }
    case "combatant_revealed":
      return combatant(event.combatant.id)?.update({ hidden: false }, mirrored());
    case "combatant_removed":
      return combatant(event.combatant)?.delete(keepingTurn(combat, event.combatant));
    case "window_opened":
      return cards(combat, event.window);
    case "command_undone":
      // The undone events are not taken back one by one: read the combat again.
      return resync(combat, await read(combat));
  }
}

async function read(combat) {
  return (await narrator.getCombat({ combat: combat.id })).view;
}

/** Foundry's round and current combatant as Turnkeeper has them. Foundry has no round 0 in a
 * begun combat (`started` is round > 0), so the marvel bonus round shows as round 1 (the chat
 * says which it is). The turn as Turnkeeper names it is kept in a flag, for end_turn. A real turn
 * change, so Foundry's own turn events fire. */
function showTurn(combat, ref) {
  const changes = { round: Math.max(ref.round, 1), flags: { [ID]: { turn: ref } } };
  const index = combat.turns.findIndex((c) => c.id === ref.combatant);
  if (index >= 0) changes.turn = index;
  return combat.update(changes, mirrored());
}

/** The whole combat as a view shows it: initiative, defeated, hidden, round and turn. */
async function resync(combat, view) {
  const wanted = initiatives(view);
  const updates = view.combatants
    .filter((c) => c.status !== "removed" && combat.combatants.get(c.id))
    .map((c) => ({
      _id: c.id,
      initiative: wanted.get(c.id),
      defeated: c.status === "defeated",
      hidden: c.hidden,
    }));
  await combat.updateEmbeddedDocuments("Combatant", updates, quietly());
  for (const { _id } of updates) await showDefeated(combat.combatants.get(_id));
  const { turn } = view;
  if (turn) {
    return showTurn(combat, { round: turn.round, combatant: turn.combatant, number: turn.number });
  }
  const round = view.round === null ? 0 : Math.max(view.round, 1);
  return combat.update({ round, turn: null, flags: { [ID]: { turn: null } } }, mirrored());
}

/** Write Turnkeeper's places as Foundry's initiatives where they differ. */
async function arrange(combat, view) {
  const wanted = initiatives(view);
  const updates = combat.combatants
    .filter((c) => wanted.has(c.id) && c.initiative !== wanted.get(c.id))
    .map((c) => ({ _id: c.id, initiative: wanted.get(c.id) }));
  if (updates.length === 0) return;
  await combat.updateEmbeddedDocuments("Combatant", updates, quietly());
}

/**
 * Each combatant's initiative for Foundry: its place, and for places several combatants share
 * (a group, an exact tie) a fraction below 1 that keeps them in Turnkeeper's order, since Foundry
 * breaks equal initiatives by combatant id. Before the order is fixed (`order` empty) equal places
 * stay equal: Turnkeeper has not ordered them yet (R4).
 */
function initiatives(view) {
  const places = new Map(
    view.combatants.filter((c) => c.status !== "removed").map((c) => [c.id, c.place]),
  );
  const sharing = new Map(); // place -> ids in Turnkeeper's order
  for (const id of view.order) {
    const place = places.get(id);
    if (place === null || place === undefined) continue;
    sharing.set(place, [...(sharing.get(place) ?? []), id]);
  }
  const wanted = new Map(places);
  for (const [place, ids] of sharing) {
    ids.forEach((id, k) => wanted.set(id, place + (ids.length - 1 - k) / TIE_STEPS));
  }
  return wanted;
}

/**
 * The options of a write of combatants that is no turn change. Foundry (v12 on) keeps the current
 * combatant's turn across a write of initiatives itself: Combatant's `_preUpdateOperation` gives
 * the operation the `combatTurn` the current combatant has in the new order (foundryvtt#11531,
 * #12990). `turnEvents: false` says the write is no turn change: some v13 releases ran turn
 * events when the index moved although the combatant had not (foundryvtt#12747).
 */
const quietly = () => ({ ...mirrored(), turnEvents: false });

/**
 * The options that delete `removed` without moving Foundry's current turn: for a deletion the
 * module names the turn itself, the index the current combatant has among those left, so that the
 * turns shrinking under the turn's index never put it on someone else. The current combatant
 * removed: its index, where Turnkeeper's next turn_started moves on from.
 */
function keepingTurn(combat, removed) {
  const options = quietly();
  const current = combat.combatant?.id;
  const after = combat.turns.filter((c) => c.id !== removed);
  if (!current || after.length === 0) return options;
  const index = after.findIndex((c) => c.id === current);
  options.combatTurn = index >= 0 ? index : Math.min(combat.turn, after.length - 1);
  return options;
}

/** The actor's defeated status effect (the token's overlay, and what Foundry's `isDefeated`
 * also reads) as the combatant's `defeated`, which only Turnkeeper's events set. */
async function showDefeated(combatant) {
  const actor = combatant?.actor;
  const status = CONFIG.specialStatusEffects.DEFEATED;
  if (!actor || actor.statuses.has(status) === combatant.defeated) return;
  await actor.toggleStatusEffect(status, { active: combatant.defeated, overlay: true });
}

/** The seq of the last event of `combat` told to everyone's chat, if any. */
function told(combat) {
  const seqs = game.messages
    .filter((m) => m.getFlag(ID, "combat") === combat.id && m.whisper.length === 0)
    .map((m) => m.getFlag(ID, "seq"));
  return seqs.length ? Math.max(...seqs) : null;
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
  const view = await read(combat);
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

/** v13 and v14 render a chat message with this hook, handing it the message's HTMLElement. */
Hooks.on("renderChatMessageHTML", (message, html) => {
  const answer = message.getFlag(ID, "answer");
  if (!answer) return;
  for (const element of html.querySelectorAll("button[data-answer]")) {
    element.addEventListener("click", () => {
      const { reservation } = element.dataset;
      if (element.dataset.answer === "pass") return ask("pass_reaction", answer);
      ask("claim_reaction", { ...answer, reservation });
    });
  }
});

// Foundry → Turnkeeper --------------------------------------------------------------------------

/**
 * Send a command for this browser's user: at once from the bridge's browser (the narrator's);
 * from any other, as an ask on the module's socket, which the bridge sends `as` the user whose
 * browser sent it. Macros use it too:
 * `game.modules.get("foundry-turnkeeper").api.ask("hold", {combat, turn})`.
 */
function ask(method, params) {
  void request(method, params);
}

/** `ask`, giving the ask's id. */
function request(method, params) {
  const id = foundry.utils.randomID();
  if (isBridge()) {
    send(method, params).finally(() => settled(id));
    return id;
  }
  if (waiting.size >= MAX_WAITING_ASKS) settled(waiting.keys().next().value);
  // A copy, as it goes now: what it names may change in place (Foundry merges a flag's update
  // into the object `getFlag` gave), and sent again it must be the same command.
  const ask = { type: "ask", id, method, params: structuredClone(params) };
  waiting.set(id, ask);
  game.socket.emit(SOCKET, ask);
  return id;
}

/** Send this browser's unanswered asks again: the bridge has changed. From the bridge's own
 * browser, send them itself, as the bridge it replaces would have. */
function askAgain() {
  for (const ask of waiting.values()) {
    if (!isBridge()) game.socket.emit(SOCKET, ask);
    else dispatch(ask, game.user.id);
  }
}

/** The bridge's answer to one of this browser's asks: done, or refused with the reason. */
function answered({ type, id, text }) {
  if (type !== "done" && type !== "refused") return;
  settled(id);
  if (type === "refused") ui.notifications.warn(`Turnkeeper: ${text}`);
}

/** An ask of this browser is over: nothing waits on it any more. */
function settled(id) {
  waiting.delete(id);
  for (const [combatant, intent] of intended) if (intent.id === id) intended.delete(combatant);
}

/**
 * An ask from another browser, heard by every browser but the asker's; only the bridge acts on
 * it. Foundry's server says which user's browser sent it (`senderId`), and the bridge sends it as
 * that user's player command, never the narrator's: the daemon then allows it only what that
 * user's own token would be allowed (R16). Anything in the message that names a user is ignored.
 */
function heard({ id, method, params }, senderId) {
  if (!isBridge() || !game.users.get(senderId) || !COMMANDS.has(method)) return;
  if (typeof id !== "string" || typeof params !== "object" || params === null) return;
  void dispatch({ id, method, params }, senderId);
}

/** Send an ask as `senderId`, then answer that user's browser: done, or refused. An ask the
 * bridge could not finish (it closed) gets no answer: its browser sends it to the next. */
async function dispatch({ id, method, params }, senderId) {
  // The ask's own id makes the request id: an ask heard twice, or sent again to the next
  // bridge, is one command, applied once.
  const requestId = `${senderId}.${id}`;
  const answer = (type, more) => ({ type, user: senderId, id, ...more });
  try {
    await narrator.call(method, { ...without(params, "as"), request_id: requestId, as: senderId });
  } catch (error) {
    if (error?.code === "client_closed") return;
    if (senderId === game.user.id) return answered(answer("refused", { text: error.message }));
    return game.socket.emit(SOCKET, answer("refused", { text: error.message }));
  }
  if (senderId === game.user.id) answered(answer("done"));
  else game.socket.emit(SOCKET, answer("done"));
}

/** A command of the bridge's own user, the narrator; a refusal is told in this browser. */
async function send(method, params) {
  try {
    return await narrator.call(method, without(params, "as"));
  } catch (error) {
    report(error);
  }
}

function without(params, key) {
  const copy = { ...params };
  delete copy[key];
  return copy;
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
    // A v13 CombatantGroup is a Turnkeeper group: its members share one check and act together
    // (R4). Its id, not its name: two groups may have the same name.
    group: combatant._source.group ?? null,
  };
  // A combatant created while its combat was being set up may be added twice: once is enough.
  narrator.addCombatant(params).catch((e) => e.code === "duplicate_combatant" || report(e));
}

Hooks.on("createCombat", (combat) => {
  if (isBridge()) follow(combat).catch((error) => report(error));
});
Hooks.on("createCombatant", (combatant, options) => {
  if (isBridge() && isFollowed(combatant.parent) && !options[ID]) add(combatant);
});
Hooks.on("deleteCombatant", (combatant, options) => {
  if (!isBridge() || !isFollowed(combatant.parent) || options[ID]) return;
  void send("remove_combatant", { combat: combatant.parent.id, combatant: combatant.id });
});
Hooks.on("deleteCombat", (combat) => {
  if (!isBridge() || !followed.has(combat.id)) return;
  for (const subscription of followed.get(combat.id)) void subscription.close();
  followed.delete(combat.id);
  narrator.endCombat({ combat: combat.id }).catch((e) => e.code === "combat_ended" || report(e));
});

// These fire in the browser that clicked, before Foundry writes anything.
Hooks.on("combatStart", (combat) => {
  if (isFollowed(combat)) ask("start_combat", { combat: combat.id });
});
Hooks.on("combatTurn", advance);
Hooks.on("combatRound", advance);

function advance(combat, data, options) {
  if (!isFollowed(combat)) return;
  if (options.direction < 0) return ask("undo", { combat: combat.id });
  // The turn this browser shows: a click on a turn that has passed is stale_turn (R5), never
  // the end of the next one.
  ask("end_turn", { combat: combat.id, turn: combat.getFlag(ID, "turn") });
}

// Foundry's own writes of what Turnkeeper decides are cancelled (returning false cancels them).
// v13's resetAll() writes every combatant's initiative through the Combat itself.
Hooks.on("preUpdateCombat", (combat, changed, options) => {
  if (!isFollowed(combat) || options[ID] === true) return true;
  return !["round", "turn", "combatants"].some((key) => key in changed);
});
Hooks.on("preUpdateCombatant", (combatant, changed, options) => {
  const combat = combatant.parent;
  if (!isFollowed(combat) || options[ID] === true) return true;
  const params = { combat: combat.id, combatant: combatant.id };
  if (typeof changed.initiative === "number") ask("roll_initiative", params);
  if ("defeated" in changed && changed.defeated !== combatant.defeated) {
    intend(combatant, Boolean(changed.defeated));
  }
  if (changed.hidden === false) ask("reveal_combatant", params);
  // Turnkeeper has no command that moves a combatant to another group: a v13 group change would
  // show members acting together whom Turnkeeper orders apart, or the reverse.
  const group = combatant._source.group ?? null;
  const regroups = "group" in changed && (changed.group ?? null) !== group;
  if (regroups) ui.notifications.warn(localize("GroupFixed", { name: combatant.name }));
  return !regroups && !["initiative", "defeated", "hidden"].some((key) => key in changed);
});

/** Ask for the combatant's defeat or revival, unless this browser already waits on that one. */
function intend(combatant, defeated) {
  if (intended.get(combatant.id)?.defeated === defeated) return;
  const method = defeated ? "defeat_combatant" : "revive_combatant";
  const id = request(method, { combat: combatant.parent.id, combatant: combatant.id });
  intended.set(combatant.id, { defeated, id });
}

// The actor's defeated status effect, however it is toggled (the Token HUD, the tracker's skull
// after it marks the combatant, a macro), shows only what Turnkeeper decided: it is let through
// when it agrees with the actor's combatants' `defeated`, which only Turnkeeper's events set
// (showDefeated writes it so). Otherwise it is cancelled and becomes a command for each of them,
// the status following once the daemon takes it: a defeat the daemon refuses never shows.
Hooks.on("preCreateActiveEffect", (effect) => agreesWithTurnkeeper(effect, true));
Hooks.on("preDeleteActiveEffect", (effect) => agreesWithTurnkeeper(effect, false));

function agreesWithTurnkeeper(effect, defeated) {
  if (!effect.statuses.has(CONFIG.specialStatusEffects.DEFEATED)) return true;
  const actor = effect.parent;
  const combatants = game.combats
    .filter(isFollowed)
    .flatMap((combat) => combat.combatants.filter((c) => c.actor === actor));
  if (combatants.every((combatant) => combatant.defeated === defeated)) return true;
  // The status is the actor's: with some of its combatants already so (Turnkeeper decided it
  // for them), it cannot show for one without the others, and asks nothing.
  if (combatants.some((combatant) => combatant.defeated === defeated)) return false;
  for (const combatant of combatants) intend(combatant, defeated);
  return false;
}
// Foundry's initiative roll card shows a roll that did not count: Turnkeeper rolls (R2).
Hooks.on("preCreateChatMessage", (message) => {
  return !(message.getFlag("core", "initiativeRoll") && isFollowed(game.combat));
});

// -----------------------------------------------------------------------------------------------

/** Tell this browser's user what went wrong. */
function report(error) {
  if (!error || error.code === "client_closed") return;
  ui.notifications.warn(`Turnkeeper: ${error.message}`);
}

function escape(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
