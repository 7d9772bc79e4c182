// The example module against a live daemon: Foundry is a stand-in (test-support/foundry.js); the
// daemon, its WebSocket and the JavaScript client (the copy `python -m turnkeeper.foundry lib`
// puts in lib/) are real. Run by tests/test_bridge_example.py, which starts the daemon and makes the tokens:
//   TURNKEEPER_TEST_WS_URL          ws://127.0.0.1:PORT/ws
//   TURNKEEPER_TEST_BRIDGE_TOKEN    turnkeeper token add bridge --narrator  (the GM's browser)
//   TURNKEEPER_TEST_OBSERVER_TOKEN  turnkeeper token add observer           (the table's chat)
//   TURNKEEPER_TEST_NARRATOR_TOKEN  turnkeeper token add narrator           (another table tool)

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { isDeepStrictEqual } from "node:util";
import { after, afterEach, before, test } from "node:test";
import { installFoundry } from "../test-support/foundry.js";

const ID = "foundry-turnkeeper";
/** The active GM: connected, with the lowest id. */
const GM = "gamemasterUser01";
/** Another GM, with the same bridge token in their browser: the next to act if the first
 * leaves. */
const GM2 = "gamemasterUser02";
const ALICE = "aliceUser0000001";
/** A second player, who owns no combatant. */
const BOB = "bobUser000000001";
/** Milliseconds anything may take: far more than it needs, so a hang fails fast. */
const WAIT = 10_000;

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run pytest tests/test_bridge_example.py`);
  return value;
};
const WS_URL = env("TURNKEEPER_TEST_WS_URL");

const foundry = await installFoundry({
  folder: fileURLToPath(new URL("..", import.meta.url)),
  users: [
    { id: GM, name: "Gamemaster", isGM: true },
    { id: GM2, name: "Assistant", isGM: true },
    { id: ALICE, name: "Alice", isGM: false },
    { id: BOB, name: "Bob", isGM: false },
  ],
  lang: "pt-BR", // the module's language setting is left empty: Turnkeeper speaks Foundry's
});
const SCRIPT = new URL("../scripts/bridge.js", import.meta.url).href;
const { Client } = await import("../lib/turnkeeper/index.js");

/** The narrator at another table tool (the table view, a Discord bot...). */
let other;

before(async () => {
  for (const user of game.users) await page(user.id);
  await game.settings.set(ID, "url", WS_URL);
  const connected = bridged(GM);
  for (const user of game.users) foundry.asClient(user.id, () => Hooks.callAll("ready"));
  await within(connected);
  const token = env("TURNKEEPER_TEST_NARRATOR_TOKEN");
  other = await Client.connect(WS_URL, { token, locale: "pt-BR", narrate: true });
});

after(() => {
  other?.close();
  for (const user of game.users) {
    foundry.asClient(user.id, () => game.modules.get(ID).api?.close());
  }
});

/** Load the module into `userId`'s browser and run its `init` there; a GM's browser gets the
 * tokens, in its own settings (the same bridge token for every GM). `ready` is the caller's. */
async function page(userId) {
  await foundry.load(userId, SCRIPT);
  await foundry.asClient(userId, async () => {
    Hooks.callAll("init");
    if (!game.user.isGM) return;
    await game.settings.set(ID, "token", env("TURNKEEPER_TEST_BRIDGE_TOKEN"));
    await game.settings.set(ID, "tableToken", env("TURNKEEPER_TEST_OBSERVER_TOKEN"));
  });
}

/** Resolves when `userId`'s browser has become the bridge. */
function bridged(userId) {
  return foundry.asClient(userId, () => new Promise((ok) => Hooks.once(`${ID}.connected`, ok)));
}

afterEach(() => {
  assert.deepEqual(foundry.problems, [], "a hook failed");
  assert.deepEqual(foundry.notices, [], "the module reported an error");
});

test("Foundry's turn changes become commands; Turnkeeper's events move the tracker", async () => {
  const combat = await fight();
  const view = async () => (await other.getCombat({ combat: combat.id })).view;

  // Begin Combat: Foundry's own write is cancelled, the daemon starts the combat.
  assert.equal(await combat.startCombat(), undefined);
  assert.equal(combat.round, 0);
  await eventually(async () => (await view()).phase === "rounds");
  await showing(combat, 1, "spidey");
  assert.deepEqual(initiatives(combat), { spidey: 18, ock: 6 });

  // Alice ends Spider-Man's turn in her browser: the command goes as alice, through the GM's.
  foundry.sent.length = 0;
  await foundry.asClient(ALICE, () => combat.nextTurn());
  await eventually(async () => (await view()).turn.combatant === "ock");
  await showing(combat, 1, "ock");
  const { events } = await other.history({ combat: combat.id });
  const ended = events.findLast((e) => e.event === "command_recorded" && e.command === "end_turn");
  assert.equal(ended.actor.role, "player");
  assert.equal(ended.actor.user, ALICE);
  assert.match(ended.actor.via, /^bridge:token:/);
  // It travelled on the module's socket and left nothing on any document.
  const [asked] = foundry.sent;
  const { type, method } = asked.message;
  assert.deepEqual([asked.from, type, method], [ALICE, "ask", "end_turn"]);
  assert.equal(leftoverAsks(), 0);

  // The GM's Next Turn on the last turn is Foundry's next round: one end_turn.
  await combat.nextTurn();
  await eventually(async () => (await view()).round === 2);
  await showing(combat, 2, "spidey");

  // Previous Turn undoes it; the tracker is read again from the daemon.
  await combat.previousTurn();
  await eventually(async () => (await view()).round === 1);
  await showing(combat, 1, "ock");

  // The table's chat told all of it, in the table's language, in order.
  const told = await history(combat);
  await eventually(() => chat(combat).length === told.length);
  assert.deepEqual(chat(combat), told);
  assert.ok(told.some((line) => line.includes("Rodada 2")), told.join("\n"));
});

test("another table tool's command moves Foundry's tracker and is told in chat", async () => {
  const combat = await fight();
  await combat.startCombat();
  await showing(combat, 1, "spidey");

  const done = await other.endTurn({ combat: combat.id, turn: { round: 1, combatant: "spidey" } });
  await showing(combat, 1, "ock");
  const started = done.events.find((e) => e.event === "turn_started");
  await eventually(() => chat(combat).includes(started.summary.trim()));
});

test("the turn flag names its turn by number: a stale click cannot end a held turn (R5)", async () => {
  const combat = await fight();
  await combat.startCombat();
  await showing(combat, 1, "spidey");
  const first = { ...combat.getFlag(ID, "turn") }; // a copy: Foundry merges flag updates in place
  // Spider-Man holds and will act right after Doctor Octopus, in the same round (R9).
  await other.hold({ combat: combat.id, turn: first });
  await showing(combat, 1, "ock");
  await other.takeHeldTurn({ combat: combat.id, combatant: "spidey", when: "after", other: "ock" });
  await combat.nextTurn();
  await showing(combat, 1, "spidey");
  const held = combat.getFlag(ID, "turn");
  assert.notEqual(held.number, first.number);
  // A click from a browser still showing the first turn names it, not the held one.
  await assert.rejects(other.endTurn({ combat: combat.id, turn: first }), { code: "stale_turn" });
  await other.endTurn({ combat: combat.id, turn: held });
});

test("the marvel bonus round shows as Foundry's round 1; the turn flag says round 0", async () => {
  const combat = await fight([6, 6, 1]); // Spider-Man's Marvel die shows M: Fantastic (R7)
  await combat.startCombat();
  await showing(combat, 0, "spidey");
  assert.equal(combat.round, 1);
  await eventually(() => chat(combat).includes("-- Rodada Bônus --"));

  // Its one turn over, round 1 begins with everyone: Foundry's round stays 1.
  await combat.nextTurn();
  await showing(combat, 1, "spidey");
  await combat.nextTurn();
  await showing(combat, 1, "ock");
});

test("a reaction window is a card for the player, whose claim goes as that player", async () => {
  const combat = await fight();
  await combat.startCombat();
  await showing(combat, 1, "spidey");

  // Alice reserves from a macro in her browser, through the module's api.
  const predicate = { events: ["action_declared"], actors: ["ock"] };
  const trigger = { text: "quando o Dr. Octopus atacar", predicate };
  foundry.asClient(ALICE, () =>
    game.modules.get(ID).api.ask("reserve", {
      combat: combat.id,
      turn: combat.getFlag(ID, "turn"),
      reserved_type: "standard",
      action: { kind: "attack", targets: ["ock"] },
      trigger,
    }),
  );
  let reservation;
  await eventually(async () => {
    [reservation] = (await other.getCombat({ combat: combat.id })).view.reservations;
    return reservation;
  });
  await combat.nextTurn();
  await showing(combat, 1, "ock");

  const turn = { round: 1, combatant: "ock" };
  const action = { kind: "attack", targets: ["spidey"] };
  await other.declareAction({ combat: combat.id, turn, action });
  const card = await eventually(() =>
    game.messages.find((m) => m.getFlag(ID, "answer")?.combat === combat.id),
  );
  assert.deepEqual(new Set(card.whisper), new Set([ALICE, GM, GM2]));
  assert.match(card.content, /Spider-Man pode reagir/);
  assert.match(card.content, /Reagir: quando o Dr. Octopus atacar/);

  foundry.click(ALICE, card, "claim", reservation.id);
  const claimed = await eventually(async () => {
    const { events } = await other.history({ combat: combat.id });
    const at = events.findIndex((e) => e.event === "reaction_claimed");
    return at >= 0 && [events[at - 1], events[at]];
  });
  const [recorded, claim] = claimed;
  assert.equal(recorded.actor.user, ALICE);
  assert.equal(claim.claim.combatant, "spidey");
  assert.equal(claim.claim.reservation, reservation.id);
});

test("an initiative roll in Foundry is Turnkeeper's; Foundry's own card is dropped", async () => {
  const combat = await Combat.create();
  await combat.createEmbeddedDocuments("Combatant", [{ _id: "ock", name: "Doctor Octopus" }]);
  await eventually(async () => (await other.getCombat({ combat: combat.id })).view.combatants[0]);

  await combat.rollInitiative(["ock"]);
  assert.equal(combat.combatants.get("ock").initiative, null); // Foundry's own roll is cancelled
  const { view } = await eventually(async () => {
    const snapshot = await other.getCombat({ combat: combat.id });
    return snapshot.view.combatants[0].check && snapshot;
  });
  await eventually(() => combat.combatants.get("ock").initiative === view.combatants[0].place);
  assert.equal(game.messages.find((m) => m.getFlag("core", "initiativeRoll")), undefined);
});

test("a player's refused ask is told to her on the socket and leaves nothing", async () => {
  const combat = await fight();
  await combat.startCombat();
  await showing(combat, 1, "spidey");
  await other.endTurn({ combat: combat.id, turn: { round: 1, combatant: "spidey" } });
  await showing(combat, 1, "ock");

  // Alice clicks Next Turn on Doctor Octopus's turn: a player cannot write the Combat document,
  // nor his combatant; the ask goes on the socket and the daemon refuses it as hers.
  foundry.sent.length = 0;
  await foundry.asClient(ALICE, () => combat.nextTurn());
  await eventually(() => foundry.notices.length > 0);
  assert.deepEqual(
    foundry.sent.map(({ from, message }) => [from, message.type, message.user]),
    [
      // The ask names no user: Foundry says whose browser sent it.
      [ALICE, "ask", undefined],
      [GM, "refused", ALICE],
    ],
  );
  assert.match(foundry.notices[0], /^warn: Turnkeeper: /);
  foundry.notices.length = 0;
  assert.equal(leftoverAsks(), 0);
  assert.equal((await other.getCombat({ combat: combat.id })).view.turn.combatant, "ock");
});

test("an ask goes as the user whose browser sent it, whatever it names", async () => {
  const combat = await fight();
  await combat.startCombat();
  await showing(combat, 1, "spidey");
  const turn = combat.getFlag(ID, "turn");
  foundry.sent.length = 0;

  // Bob, in a browser whose code he changed, names methods the narrator's session would answer
  // for him, then ends Spider-Man's turn naming Alice, who controls it: the first are dropped,
  // the last goes as Bob, who controls nothing, and is refused to him.
  foundry.asClient(BOB, () => {
    game.socket.emit(`module.${ID}`, { type: "ask", id: "h1", method: "hello", params: {} });
    const params = { combat: combat.id };
    game.socket.emit(`module.${ID}`, { type: "ask", id: "l1", method: "list_tokens", params });
    const forged = { ...params, turn };
    game.socket.emit(`module.${ID}`, {
      type: "ask", user: ALICE, id: "f1", method: "end_turn", params: forged,
    });
  });
  await eventually(() => foundry.notices.length > 0);
  const refused = foundry.sent.filter(({ message }) => message.type === "refused");
  assert.deepEqual(
    refused.map(({ from, message }) => [from, message.user]),
    [[GM, BOB]],
  );
  assert.deepEqual(foundry.notices.splice(0), [`warn: Turnkeeper: ${refused[0].message.text}`]);
  assert.equal((await other.getCombat({ combat: combat.id })).view.turn.combatant, "spidey");
  assert.equal(combat.combatant.id, "spidey");

  // A refusal only the bridge's GM may send: Bob's, addressed to Alice, is not shown to her.
  foundry.asClient(BOB, () => {
    game.socket.emit(`module.${ID}`, { type: "refused", user: ALICE, text: "forged" });
  });
  // The stand-in relays on a zero timer, in order: this one runs after the relay.
  await new Promise((resolve) => setTimeout(resolve, 0));
  assert.deepEqual(foundry.notices, []);
});

test("a v13 combatant group is a Turnkeeper group, and acts in Turnkeeper's order", async () => {
  const combat = await Combat.create();
  await combat.createEmbeddedDocuments("CombatantGroup", [{ _id: "goblins", name: "Goblins" }]);
  // Added in this order, which is the order a group acts in (R4); Foundry would sort them the
  // other way round, by id, since they share one initiative.
  await combat.createEmbeddedDocuments("Combatant", [
    { _id: "zgoblin", name: "Goblin", group: "goblins" },
    { _id: "agoblin", name: "Goblin", group: "goblins" },
    { _id: "ock", name: "Doctor Octopus" },
  ]);
  const { view } = await eventually(async () => {
    const snapshot = await other.getCombat({ combat: combat.id }).catch(() => null);
    return snapshot?.view.combatants.length === 3 && snapshot;
  });
  const groups = Object.fromEntries(view.combatants.map((c) => [c.id, c.group]));
  assert.deepEqual(groups, { zgoblin: "goblins", agoblin: "goblins", ock: null });
  await other.rollInitiative({ combat: combat.id, combatant: "agoblin", faces: [3, 3, 3] });
  await other.rollInitiative({ combat: combat.id, combatant: "ock", faces: [2, 2, 2] });

  await combat.startCombat();
  await showing(combat, 1, "zgoblin");
  const { order } = (await other.getCombat({ combat: combat.id })).view;
  assert.deepEqual(order, ["zgoblin", "agoblin", "ock"]);
  assert.deepEqual(
    combat.turns.map((c) => c.id),
    order,
  );
  // The tracker's numbers are still the places: the fraction only orders equal ones.
  assert.deepEqual(
    combat.turns.map((c) => Math.floor(c.initiative)),
    [9, 9, 6],
  );
  await combat.nextTurn();
  await showing(combat, 1, "agoblin");
});

test("a removal or a late arrival keeps Foundry's turn and runs no turn events", async () => {
  const combat = await Combat.create();
  await combat.createEmbeddedDocuments("Combatant", [
    { _id: "spidey", name: "Spider-Man", owners: [ALICE] },
    { _id: "rhino", name: "Rhino" },
    { _id: "ock", name: "Doctor Octopus" },
  ]);
  await eventually(async () => {
    const snapshot = await other.getCombat({ combat: combat.id }).catch(() => null);
    return snapshot?.view.combatants.length === 3;
  });
  const faces = { spidey: [6, 6, 6], rhino: [4, 4, 4], ock: [2, 2, 2] };
  for (const [combatant, rolled] of Object.entries(faces)) {
    await other.rollInitiative({ combat: combat.id, combatant, faces: rolled });
  }
  await combat.startCombat();
  await showing(combat, 1, "spidey");
  await other.endTurn({ combat: combat.id, turn: { round: 1, combatant: "spidey" } });
  await showing(combat, 1, "rhino");
  await other.endTurn({ combat: combat.id, turn: { round: 1, combatant: "rhino" } });
  await showing(combat, 1, "ock");
  assert.equal(combat.turn, 2);

  const turnEvents = [];
  const heard = (changed, before, after) => {
    if (changed === combat && game.user.id === GM) turnEvents.push(after.combatant);
  };
  Hooks.on("combatTurnChange", heard);
  // Rhino leaves from before the current turn: Foundry's turns shrink under its index.
  await other.removeCombatant({ combat: combat.id, combatant: "rhino" });
  await eventually(() => !combat.combatants.has("rhino"));
  assert.deepEqual([combat.round, combat.combatant?.id, combat.turn], [1, "ock", 1]);

  // A late arrival is rolled for and slotted by Turnkeeper (R1): its initiative re-sorts the turns.
  await combat.createEmbeddedDocuments("Combatant", [{ _id: "vulture", name: "Vulture" }]);
  const { view } = await eventually(async () => {
    const snapshot = await other.getCombat({ combat: combat.id });
    return snapshot.view.order.includes("vulture") && snapshot;
  });
  await eventually(() => combat.combatants.get("vulture").initiative !== null);
  assert.deepEqual(
    combat.turns.map((c) => c.id),
    view.order,
  );
  assert.equal(combat.combatant?.id, "ock");
  assert.deepEqual(turnEvents, []);

  // Turnkeeper's next turn is a real turn change: Foundry's turn events run for it.
  await other.endTurn({ combat: combat.id, turn: { round: 1, combatant: "ock" } });
  await eventually(() => turnEvents.length > 0);
  assert.equal(turnEvents.at(-1), combat.combatant.id);
});

test("the skull: a defeat taken shows with its status, a refused one nowhere", async () => {
  const ockActor = await Actor.create({ name: "Doctor Octopus" });
  const spideyActor = await Actor.create({ name: "Spider-Man", owners: [ALICE] });
  const combat = await Combat.create();
  await combat.createEmbeddedDocuments("Combatant", [
    { _id: "spidey", name: "Spider-Man", owners: [ALICE], actorId: spideyActor.id },
    { _id: "ock", name: "Doctor Octopus", actorId: ockActor.id },
  ]);
  await eventually(async () => {
    const snapshot = await other.getCombat({ combat: combat.id }).catch(() => null);
    return snapshot?.view.combatants.length === 2;
  });
  await other.rollInitiative({ combat: combat.id, combatant: "spidey", faces: [6, 6, 6] });
  await other.rollInitiative({ combat: combat.id, combatant: "ock", faces: [2, 2, 2] });
  await combat.startCombat();
  await showing(combat, 1, "spidey");
  const ock = combat.combatants.get("ock");
  const spidey = combat.combatants.get("spidey");

  // The GM's skull on Doctor Octopus: the daemon defeats him, then the tracker and token show it.
  // The skull marks the combatant, then toggles the status: one command for both.
  await foundry.toggleDefeated(ock);
  await eventually(() => ock.defeated && ockActor.statuses.has("dead"));
  const status = (await other.getCombat({ combat: combat.id })).view.combatants;
  assert.equal(status.find((c) => c.id === "ock").status, "defeated");
  assert.deepEqual(await commands(combat, "defeat_combatant"), ["narrator"]);

  // Another tool revives him: the status effect goes with it.
  await other.reviveCombatant({ combat: combat.id, combatant: "ock" });
  await eventually(() => !ock.defeated && !ockActor.statuses.has("dead"));

  // Once Turnkeeper's combat is over it refuses a defeat: neither mark may show.
  await other.endCombat({ combat: combat.id });
  await foundry.toggleDefeated(spidey);
  await eventually(() => foundry.notices.length > 0);
  assert.match(foundry.notices[0], /^warn: Turnkeeper: /);
  foundry.notices.length = 0;
  assert.equal(spidey.defeated, false);
  assert.equal(spideyActor.statuses.has("dead"), false);
  assert.equal(spidey.isDefeated, false);
});

test("the Token HUD's defeated status is a command, shown once Turnkeeper takes it", async () => {
  const ockActor = await Actor.create({ name: "Doctor Octopus" });
  const spideyActor = await Actor.create({ name: "Spider-Man", owners: [ALICE] });
  const combat = await fight(undefined, { spidey: spideyActor.id, ock: ockActor.id });
  await combat.startCombat();
  await showing(combat, 1, "spidey");
  const ock = combat.combatants.get("ock");

  // The GM sets the status on Doctor Octopus's token: nothing shows until the daemon defeats him.
  await foundry.hudToggle(ockActor, "dead", { overlay: true });
  assert.equal(ockActor.statuses.has("dead"), false);
  await eventually(() => ock.defeated && ockActor.statuses.has("dead"));
  assert.deepEqual(await commands(combat, "defeat_combatant"), ["narrator"]);

  // And takes it off: a revival.
  await foundry.hudToggle(ockActor, "dead");
  assert.equal(ockActor.statuses.has("dead"), true);
  await eventually(() => !ock.defeated && !ockActor.statuses.has("dead"));
  assert.deepEqual(await commands(combat, "revive_combatant"), ["narrator"]);

  // Alice sets it on her own token: the ask goes as her, and a player may not defeat (R16), so
  // the status never shows and Spider-Man stays in the fight.
  foundry.sent.length = 0;
  await foundry.asClient(ALICE, () => foundry.hudToggle(spideyActor, "dead", { overlay: true }));
  await eventually(() => foundry.notices.length > 0);
  assert.match(foundry.notices.splice(0)[0], /^warn: Turnkeeper: /);
  const asked = foundry.sent.find(({ message }) => message.type === "ask").message;
  assert.deepEqual([asked.method, asked.params.combatant], ["defeat_combatant", "spidey"]);
  assert.equal(spideyActor.statuses.has("dead"), false);
  assert.equal(combat.combatants.get("spidey").isDefeated, false);
  const { view } = await other.getCombat({ combat: combat.id });
  assert.equal(view.combatants.find((c) => c.id === "spidey").status, "active");
});

test("a combatant's group change is refused: Turnkeeper has no command for it", async () => {
  const combat = await Combat.create();
  await combat.createEmbeddedDocuments("CombatantGroup", [
    { _id: "goblins", name: "Goblins" },
    { _id: "orcs", name: "Orcs" },
  ]);
  await combat.createEmbeddedDocuments("Combatant", [
    { _id: "goblin", name: "Goblin", group: "goblins" },
  ]);
  await eventually(async () => {
    const snapshot = await other.getCombat({ combat: combat.id }).catch(() => null);
    return snapshot?.view.combatants.length === 1;
  });
  const goblin = combat.combatants.get("goblin");
  assert.equal(await goblin.update({ group: "orcs" }), undefined);
  assert.equal(goblin.group.id, "goblins");
  const [notice, ...more] = foundry.notices.splice(0);
  assert.deepEqual(more, []);
  assert.equal(notice, `warn: ${localized("GroupFixed", { name: "Goblin" })}`);
  const { view } = await other.getCombat({ combat: combat.id });
  assert.equal(view.combatants[0].group, "goblins");
});

test("exactly one GM acts: the next takes over, asks neither lost nor applied twice", async () => {
  const combat = await fight();
  await combat.startCombat();
  await showing(combat, 1, "spidey");

  // Alice ends Spider-Man's turn, and the active GM's browser closes before the ask reaches it.
  const second = bridged(GM2);
  foundry.asClient(ALICE, () => combat.nextTurn());
  close(GM);
  // The other GM is the active GM now: that browser connects, the ask comes again, it is applied.
  await within(second);
  await showing(combat, 1, "ock");
  assert.deepEqual(await commands(combat, "end_turn"), [ALICE]);

  // Alice ends nothing, the narrator's tool ends Doctor Octopus's turn: GM2's mirror follows.
  await other.endTurn({ combat: combat.id, turn: { round: 1, combatant: "ock" } });
  await showing(combat, 2, "spidey");

  // The first GM comes back: the active GM again (the lowest id). GM2's browser stops at once,
  // though it may have sent Alice's ask already: the returning GM's browser sends it again with
  // the same request id, and the daemon applies it once.
  foundry.asClient(ALICE, () => combat.nextTurn());
  await new Promise((resolve) => setTimeout(resolve, 0)); // the ask reaches GM2's browser
  foundry.join(GM);
  const back = bridged(GM);
  await page(GM);
  foundry.asClient(GM, () => Hooks.callAll("ready"));
  await within(back);
  await showing(combat, 2, "ock");
  assert.deepEqual(await commands(combat, "end_turn"), [ALICE, "narrator", ALICE]);

  // The table's chat told every line once, across both handovers.
  const told = await history(combat);
  await eventually(() => chat(combat).length === told.length);
  assert.deepEqual(chat(combat), told);
});

// -----------------------------------------------------------------------------------------------

/** `userId`'s browser closes: the module's connections with it. */
function close(userId) {
  foundry.asClient(userId, () => game.modules.get(ID).api.close());
  foundry.leave(userId);
}

/** Who sent each recorded `method` of the combat, in order: a player's user id, or "narrator"
 * (the bridge's GM, or another table tool). */
async function commands(combat, method) {
  const { events } = await other.history({ combat: combat.id });
  return events
    .filter((e) => e.event === "command_recorded" && e.command === method)
    .map((e) => (e.actor.role === "player" ? e.actor.user : e.actor.role));
}

/** A Foundry combat the module made a Turnkeeper marvel combat: Spider-Man (Alice's) rolled
 * `faces` (18) and acts first, Doctor Octopus rolled 6. */
async function fight(faces = [6, 6, 6], actors = {}) {
  const combat = await Combat.create();
  await combat.createEmbeddedDocuments("Combatant", [
    { _id: "spidey", name: "Spider-Man", owners: [ALICE], actorId: actors.spidey },
    { _id: "ock", name: "Doctor Octopus", actorId: actors.ock },
  ]);
  const { view } = await eventually(async () => {
    const snapshot = await other.getCombat({ combat: combat.id }).catch(() => null);
    return snapshot?.view.combatants.length === 2 && snapshot;
  });
  assert.equal(view.ruleset, "marvel");
  const spidey = view.combatants.find((c) => c.id === "spidey");
  assert.deepEqual([spidey.controller, spidey.player_character], [ALICE, true]);
  // The dice as if rolled at the table (R2), so the order is known.
  await other.rollInitiative({ combat: combat.id, combatant: "spidey", faces });
  await other.rollInitiative({ combat: combat.id, combatant: "ock", faces: [2, 2, 2] });
  return combat;
}

/** Wait until Foundry shows Turnkeeper's round `round` (the bonus round 0 as 1) with `combatant`
 * to act. */
async function showing(combat, round, combatant) {
  const shown = Math.max(round, 1);
  await eventually(() => {
    const flag = combat.getFlag(ID, "turn");
    return (
      combat.round === shown &&
      combat.combatant?.id === combatant &&
      isDeepStrictEqual([flag?.round, flag?.combatant], [round, combatant]) &&
      Number.isInteger(flag?.number)
    );
  });
}

function initiatives(combat) {
  return Object.fromEntries(combat.combatants.contents.map((c) => [c.id, c.initiative]));
}

/** The lines the table's chat shows for a combat, unescaped. */
function chat(combat) {
  return game.messages
    .filter((m) => m.getFlag(ID, "combat") === combat.id && m.whisper.length === 0)
    .sort((a, b) => a.getFlag(ID, "seq") - b.getFlag(ID, "seq"))
    .map((m) => m.content.replace(/&#(\d+);/g, (_, code) => String.fromCharCode(Number(code))));
}

/** The narration of a combat, as the other tool reads it, from the first event its chat told. */
async function history(combat) {
  await eventually(() => chat(combat).length > 0);
  const told = game.messages.filter((m) => m.getFlag(ID, "combat") === combat.id);
  const first = Math.min(...told.map((m) => m.getFlag(ID, "seq")));
  const { events } = await other.history({ combat: combat.id, after: first - 1 });
  return events.filter((e) => e.summary).map((e) => e.summary.trim());
}

/** How many documents carry an ask flag, the way requests travelled before the socket. */
function leftoverAsks() {
  const combats = game.combats.contents;
  const documents = [...combats, ...combats.flatMap((c) => c.combatants.contents)];
  return documents.filter((document) => document.flags[ID]?.ask !== undefined).length;
}

/** A text of the module's, in the test's language (pt-BR). */
function localized(key, data) {
  return game.i18n.format(`TURNKEEPER.${key}`, data);
}

/** Poll `check` until it gives something truthy, which is returned. */
async function eventually(check) {
  const deadline = Date.now() + WAIT;
  let last;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) throw new Error(`not within ${WAIT} ms: ${check}`, { cause: last });
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function within(promise) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`nothing within ${WAIT} ms`)), WAIT);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}
