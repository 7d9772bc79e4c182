// A session that survives the daemon being killed and restarted: subscriptions resume with no
// gap and no duplicate, a command in flight is sent again with its request_id and applied once.
// The pytest wrapper does the killing, asked through its control socket.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import test from "node:test";
import { bank, connect, control, fresh, range, sleep, take } from "../test-support/live.js";

test("killed and restarted mid-command: resumed, retried once, none missed or twice", async (t) => {
  const client = await connect();
  const combat = fresh("restart");
  /** @type {string[]} */
  const statuses = [];
  client.onStatus((status) => statuses.push(status));
  const once = await connect({ reconnect: false });
  const impatient = await connect({ reconnect: false, callTimeout: 300 });
  t.after(() => {
    for (const c of [client, once, impatient]) c.close();
  });

  assert.equal(await bank(client, combat), 12);
  const sub = await client.subscribe({ combat, after: 0 });
  const all = await client.subscribeAll();
  assert.deepEqual(
    (await take(sub, 12)).map((e) => e.seq),
    range(1, 12),
  );

  await control({ op: "freeze" });
  let answered = false;
  try {
    await assert.rejects(impatient.listCombats(), { code: "call_timeout" });
    const request_id = randomUUID();
    const turn = { round: 1, combatant: "spidey" };
    const inFlight = client.endTurn({ combat, turn, request_id });
    inFlight.then(
      () => (answered = true),
      () => {}, // its failure is the test's when it awaits it
    );
    // Without reconnecting, a drop ends the client and what was waiting.
    const cutOff = assert.rejects(once.listCombats(), { code: "connection_lost" });
    await sleep(300); // the request reaches the frozen daemon's socket, unanswered
    assert.equal(answered, false);

    // Killed; while its WebSocket endpoint is still closed, another client records two events
    // this one misses; then it is back on the same port.
    const away = [1, 2].map((n) => [
      "record_outcome",
      { combat, request_id: `away-${n}-${combat}`, kind: "note", text: `while away ${n}` },
    ]);
    await control({ op: "restart", while_down: away });

    const ended = await inFlight;
    assert.equal(ended.events[0].command, "end_turn");
    assert.equal(ended.events[0].seq, 17); // after the 4 events recorded while away
    const resumed = await take(sub, ended.seq - 12);
    assert.deepEqual(
      resumed.map((e) => e.seq),
      range(13, ended.seq),
    );
    assert.deepEqual(
      resumed.slice(0, 4).map((e) => e.event),
      ["command_recorded", "outcome_recorded", "command_recorded", "outcome_recorded"],
    );
    assert.deepEqual(
      resumed.slice(4).map(({ combat: c, ...rest }) => rest),
      ended.events,
    );
    // subscribeAll has no `after`: it filled the gap from history, just as exactly.
    const everywhere = [];
    while (everywhere.length < ended.seq - 12) {
      const [event] = await take(all, 1);
      if (event.combat === combat) everywhere.push(event);
    }
    assert.deepEqual(everywhere, resumed);

    // Sent twice (once to the frozen daemon, once after), applied once.
    const page = await client.history({ combat, limit: 1000 });
    const endTurns = page.events.filter(
      (e) => e.event === "command_recorded" && e.command === "end_turn",
    );
    assert.equal(endTurns.length, 1);
    assert.deepEqual(await client.endTurn({ combat, turn, request_id }), ended);
    assert.deepEqual(statuses, ["reconnecting", "open"]);
    assert.equal(client.status, "open");

    await cutOff;
    assert.equal(once.status, "closed");
    assert.equal(impatient.status, "closed");
  } finally {
    await control({ op: "thaw" }); // never leave the daemon frozen for the tests that follow
  }
});

test("a revoked token: the fatal error is reported, the refused hello closes", async () => {
  const { id, secret } = await control({ op: "token", args: ["observer"] });
  const client = await connect({ token: secret });
  /** @type {import("../src/index.js").TurnkeeperError[]} */
  const errors = [];
  client.onError((error) => errors.push(error));
  try {
    await client.listCombats();
    await control({ op: "revoke", id });
    await assert.rejects(client.listCombats(), (/** @type {any} */ e) => {
      assert.equal(e.code, "connection_lost");
      assert.match(e.message, /token_revoked.*unauthenticated/s);
      return true;
    });
    assert.deepEqual(
      errors.map((e) => [e.code, e.fatal]),
      [["token_revoked", true]],
    );
    assert.equal(client.status, "closed");
  } finally {
    client.close();
  }
});
