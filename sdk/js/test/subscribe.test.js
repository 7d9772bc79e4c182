// Subscriptions: missed events after `after`, then live ones, each once and in seq order.

import assert from "node:assert/strict";
import test from "node:test";
import { bank, connect, fresh, range, take, within } from "../test-support/live.js";

/** @param {{seq: number}[]} events */
const seqs = (events) => events.map((e) => e.seq);

test("subscribe replays what came after `after`, then goes live", async () => {
  const client = await connect();
  const combat = fresh("resume");
  try {
    await bank(client, combat);
    const sub = await client.subscribe({ combat, after: 5 });
    assert.deepEqual(sub.result, { combat, seq: 12 });
    const missed = await take(sub, 7);
    assert.deepEqual(seqs(missed), range(6, 12));
    assert.ok(missed.every((e) => e.combat === combat && typeof e.event === "string"));

    const ended = await client.endTurn({ combat, turn: { round: 1, combatant: "spidey" } });
    const live = await take(sub, ended.seq - 12);
    assert.deepEqual(
      live.map(({ combat: c, ...rest }) => rest),
      ended.events,
    );

    // Resuming from a seq gives exactly what followed it.
    await sub.close();
    assert.equal(sub.closed, true);
    assert.deepEqual(await sub.next(), { value: undefined, done: true });
    const again = await client.subscribe({ combat, after: ended.seq - 2 });
    assert.deepEqual(await take(again, 2), live.slice(-2));
  } finally {
    client.close();
  }
});

test("a combat followed already is refused, and leaving a loop early unsubscribes", async () => {
  const client = await connect();
  const combat = fresh("twice");
  try {
    await bank(client, combat);
    const sub = await client.subscribe({ combat });
    await assert.rejects(client.subscribe({ combat }), {
      code: "already_subscribed",
      field: "combat",
    });
    for await (const event of sub) {
      assert.equal(event.seq, 1);
      break;
    }
    assert.equal(sub.closed, true);
    const again = await client.subscribe({ combat, after: 11 });
    assert.deepEqual(seqs(await take(again, 1)), [12]);
    await client.unsubscribe({ combat });
    assert.equal(again.closed, true);
  } finally {
    client.close();
  }
});

test("too far behind: subscribe refuses, and a full buffer ends a subscription", async () => {
  const client = await connect({ eventBuffer: 3 });
  const combat = fresh("behind");
  try {
    await bank(client, combat);
    const sub = await client.subscribe({ combat, after: 0 }); // 12 events into a buffer of 3
    assert.deepEqual(seqs(await take(sub, 3)), [1, 2, 3]);
    await assert.rejects(sub.next(), (/** @type {any} */ e) => {
      assert.equal(e.code, "too_far_behind");
      assert.deepEqual(e.seqs, { [combat]: 3 });
      return true;
    });
    // It is forgotten at once, so the caller can follow the combat again from where it was.
    const again = await client.subscribe({ combat, after: 3 });
    assert.deepEqual(seqs(await take(again, 3)), [4, 5, 6]);
  } finally {
    client.close();
  }
});

test("subscribeAll follows every combat, new ones included", async () => {
  const watcher = await connect();
  const writer = await connect();
  const combat = fresh("everything");
  try {
    const all = await watcher.subscribeAll();
    assert.ok("seqs" in all.result && typeof all.result.seqs === "object");
    await assert.rejects(watcher.subscribeAll(), { code: "already_subscribed", field: "method" });
    const created = await writer.createCombat({ combat_id: combat, ruleset: "dnd3e" });
    const events = [];
    while (events.length < created.events.length) {
      const next = await within(all.next());
      assert.ok(!next.done);
      if (next.value.combat === combat) events.push(next.value); // other combats may interleave
    }
    assert.deepEqual(
      events.map(({ combat: c, ...rest }) => rest),
      created.events,
    );
    await watcher.unsubscribeAll();
    assert.equal(all.closed, true);
  } finally {
    watcher.close();
    writer.close();
  }
});
