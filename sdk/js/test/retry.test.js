// Request ids: every command carries one, and the same one twice is applied once.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import test from "node:test";
import { bank, connect, fresh } from "../test-support/live.js";

/**
 * How many times the combat recorded `command`.
 * @param {import("../src/index.js").Client} client
 * @param {string} combat
 * @param {string} command
 */
async function recorded(client, combat, command) {
  const page = await client.history({ combat, limit: 1000 });
  return page.events.filter((e) => e.event === "command_recorded" && e.command === command).length;
}

test("the same request_id twice gives the same result, applied once", async () => {
  const client = await connect();
  const combat = fresh("retry");
  try {
    await bank(client, combat);
    const request_id = randomUUID();
    const turn = { round: 1, combatant: "spidey" };
    const first = await client.endTurn({ combat, turn, request_id });
    // The turn has passed: only a remembered request can still be answered with success.
    const again = await client.endTurn({ combat, turn, request_id });
    assert.deepEqual(again, first);
    const viaCall = await client.call("end_turn", { combat, turn, request_id });
    assert.deepEqual(viaCall, first);
    assert.equal((await client.getCombat({ combat })).seq, first.seq);
    assert.equal(await recorded(client, combat, "end_turn"), 1);

    await assert.rejects(
      client.hold({ combat, turn: { round: 1, combatant: "ock" }, request_id }),
      {
        code: "request_id_reused",
      },
    );
  } finally {
    client.close();
  }
});

test("a command without request_id gets a fresh one each time", async () => {
  const client = await connect();
  const combat = fresh("fresh-ids");
  try {
    await client.createCombat({ combat_id: combat, ruleset: "marvel" });
    const params = { combat, kind: "note", text: "twice" };
    await client.recordOutcome(params);
    await client.call("record_outcome", params);
    assert.deepEqual(params, { combat, kind: "note", text: "twice" }); // the caller's is untouched
    assert.equal(await recorded(client, combat, "record_outcome"), 2);
  } finally {
    client.close();
  }
});

test("call refuses the methods whose state the client keeps itself", async () => {
  const client = await connect();
  try {
    for (const method of [
      "hello",
      "subscribe",
      "unsubscribe",
      "subscribe_all",
      "unsubscribe_all",
    ]) {
      await assert.rejects(client.call(method, {}), TypeError);
    }
  } finally {
    client.close();
  }
});
