// The session: hello with token, locale and narration; the client's functions are exactly the
// daemon's methods; commands go round; refusals are TurnkeeperErrors with code and field.

import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import test from "node:test";
import {
  COMMAND_METHODS,
  Client,
  METHODS,
  PROTOCOL_VERSION,
  TurnkeeperError,
  camelCase,
} from "../src/index.js";
import { PLAYER, URL, bank, connect, fresh, take } from "../test-support/live.js";

/** The client's functions that are no protocol method. */
const GENERIC = ["call", "close", "onError", "onStatus"];

test("hello opens a narrator session with the negotiated locale", async () => {
  const client = await connect({ locale: "pt-BR" });
  try {
    assert.equal(client.status, "open");
    assert.equal(client.helloResult.protocol, PROTOCOL_VERSION);
    assert.equal(client.session.role, "narrator");
    assert.equal(client.session.user, null);
    assert.equal(client.session.locale, "pt-BR");
    assert.equal(typeof client.session.connection, "string");
    assert.deepEqual(await client.hello(), client.helloResult);
  } finally {
    client.close();
  }
});

test("a language match counts, anything else is English", async () => {
  for (const [asked, got] of [
    ["pt", "pt-BR"],
    ["pt_BR", "pt-BR"],
    ["fr", "en"],
    [undefined, "en"],
  ]) {
    const client = await connect({ locale: asked });
    assert.equal(client.session.locale, got, `locale ${asked}`);
    client.close();
  }
});

test("a player token is bound to its user", async () => {
  const client = await connect({ token: PLAYER, kind: "bridge" });
  try {
    assert.deepEqual([client.session.role, client.session.user], ["player", "alice"]);
  } finally {
    client.close();
  }
});

test("a refused hello rejects connect with the daemon's code and field", async () => {
  await assert.rejects(Client.connect(URL, { token: "not-a-token" }), {
    name: "TurnkeeperError",
    code: "unauthenticated",
    field: "token",
  });
});

test("the client has one function per method of hello, and no other", async () => {
  const client = await connect();
  try {
    const methods = client.helloResult.methods;
    const names = methods.map((/** @type {any} */ m) => m.name).sort();
    assert.deepEqual([...METHODS].sort(), names);
    const commands = methods.filter((/** @type {any} */ m) => m.kind === "command");
    assert.deepEqual([...COMMAND_METHODS].sort(), commands.map((m) => m.name).sort());
    const functions = Object.getOwnPropertyNames(Client.prototype).filter(
      (name) =>
        name !== "constructor" &&
        !name.startsWith("_") &&
        typeof Object.getOwnPropertyDescriptor(Client.prototype, name)?.value === "function",
    );
    assert.deepEqual(
      functions.filter((name) => !GENERIC.includes(name)).sort(),
      names.map(camelCase).sort(),
    );
    // And each is typed.
    const types = await readFile(new globalThis.URL("../src/index.d.ts", import.meta.url), "utf8");
    for (const name of names) {
      assert.match(types, new RegExp(`^  ${camelCase(name)}\\(`, "m"), `${name} has no type`);
    }
  } finally {
    client.close();
  }
});

test("a command goes round: its result, the combat's new seq, the view", async () => {
  const client = await connect();
  const combat = fresh("round-trip");
  try {
    assert.equal(await bank(client, combat), 12);
    const ended = await client.endTurn({ combat, turn: { round: 1, combatant: "spidey" } });
    assert.equal(ended.combat, combat);
    assert.equal(ended.events[0].event, "command_recorded");
    assert.equal(ended.events[0].command, "end_turn");
    assert.deepEqual(
      ended.events.map((e) => e.seq),
      Array.from(ended.events, (_, i) => 13 + i),
    );
    const { seq, view } = await client.getCombat({ combat });
    assert.equal(seq, ended.seq);
    assert.equal(view.turn?.combatant, "ock");
    const row = (await client.listCombats()).find((r) => r.combat === combat);
    assert.deepEqual(row, { combat, ruleset: "marvel", phase: "rounds", round: 1, seq });
    const page = await client.history({ combat, after: 12, limit: 1000 });
    assert.deepEqual(page.events, ended.events);
    assert.deepEqual(Object.keys(await client.listPlugins()).sort(), [
      "failed",
      "loaded",
      "skipped",
    ]);
  } finally {
    client.close();
  }
});

test("narrate adds every event's summary, in results and in subscriptions", async () => {
  const client = await connect({ locale: "pt-BR", narrate: true });
  const combat = fresh("narrated");
  try {
    const created = await client.createCombat({ combat_id: combat, ruleset: "marvel" });
    for (const event of created.events) assert.ok("summary" in event, `${event.event}: no summary`);
    const told = created.events.find((e) => e.event === "combat_created")?.summary;
    assert.equal(typeof told, "string");
    const sub = await client.subscribe({ combat });
    assert.deepEqual(
      (await take(sub, 2)).map(({ combat: c, ...rest }) => rest),
      created.events,
    );
  } finally {
    client.close();
  }
});

test("a refusal is a TurnkeeperError with the protocol's code and field", async () => {
  const client = await connect();
  const player = await connect({ token: PLAYER });
  const combat = fresh("refusals");
  try {
    await bank(client, combat);
    // @ts-expect-error: a string where the protocol wants an integer, on purpose
    const wrongType = client.endTurn({ combat, turn: { round: "one", combatant: "spidey" } });
    await assert.rejects(wrongType, (/** @type {any} */ e) => {
      assert.ok(e instanceof TurnkeeperError);
      assert.deepEqual([e.code, e.field], ["invalid_params", "turn.round"]);
      assert.ok(e.message.length > 0);
      return true;
    });
    await assert.rejects(client.endTurn({ combat, turn: { round: 1, combatant: "ock" } }), {
      code: "stale_turn",
      field: "turn",
    });
    await assert.rejects(player.removeCombatant({ combat, combatant: "ock" }), {
      code: "forbidden",
      field: "actor",
    });
    await assert.rejects(client.getCombat({ combat: fresh("nowhere") }), {
      code: "unknown_combat",
    });
    await assert.rejects(client.call("no_such_method"), {
      code: "unknown_method",
      field: "method",
    });
    // The session survives its refusals.
    assert.equal((await client.getCombat({ combat })).seq, 12);
  } finally {
    client.close();
    player.close();
  }
});

test("close rejects what is still waiting with client_closed, and every later call", async () => {
  const client = await connect();
  const combat = fresh("closing");
  /** @type {string[]} */
  const statuses = [];
  client.onStatus((status) => statuses.push(status));
  await bank(client, combat);
  const sub = await client.subscribe({ combat, after: 12 });
  const waiting = client.listCombats(); // its answer cannot have come yet
  client.close();
  await assert.rejects(waiting, { code: "client_closed" });
  await assert.rejects(sub.next(), { code: "client_closed" });
  await assert.rejects(client.startCombat({ combat }), { code: "client_closed" });
  await assert.rejects(client.subscribe({ combat }), { code: "client_closed" });
  assert.deepEqual(statuses, ["closed"]);
});
