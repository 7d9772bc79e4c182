// Tables: a hosting bridge makes a table and issues its tokens through the client; a session of
// that table sees its own combats only, and another table's combat is one that does not exist.

import assert from "node:assert/strict";
import test from "node:test";
import { connect, control, fresh, sleep } from "../test-support/live.js";

test("a hosting bridge makes a table whose sessions see only its combats", async () => {
  const { secret } = await control({ op: "token", args: ["bridge", "--host"] });
  const host = await connect({ token: secret });
  const neighbour = await connect(); // a narrator of the default table
  /** @type {import("../src/index.js").Client | null} */
  let guest = null;
  try {
    assert.equal(host.session.host, true);
    const { table } = await host.createTable({ name: "JS table" });
    assert.match(table, /^t[0-9a-f]{10}$/);
    assert.ok((await host.listTables()).some((row) => row.table === table));
    const token = await host.addToken({ table, role: "narrator" });
    assert.equal(token.table, table);
    guest = await connect({ token: token.secret });
    assert.equal(guest.session.table, table);
    const combat = `${table}/${fresh("js")}`;
    await guest.createCombat({ combat_id: combat, ruleset: "marvel" });
    assert.deepEqual((await guest.listCombats()).map((row) => row.combat), [combat]);
    const outside = fresh("js-outside");
    await neighbour.createCombat({ combat_id: outside, ruleset: "marvel" });
    await assert.rejects(guest.getCombat({ combat: outside }), {
      code: "unknown_combat",
      field: "combat",
    });
    await assert.rejects(host.listTokens({ table: "t0000000000" }), {
      code: "unknown_table",
      field: "table",
    });
    assert.deepEqual((await host.listTokens({ table })).map((row) => row.id), [token.id]);
    assert.deepEqual(await host.revokeToken({ table, id: token.id }), { id: token.id, table });
    assert.deepEqual(await host.listTokens({ table }), []);
  } finally {
    host.close();
    neighbour.close();
    guest?.close();
  }
});

test("a table method whose connection drops once sent is not sent again", async (t) => {
  const { secret } = await control({ op: "token", args: ["bridge", "--host"] });
  const host = await connect({ token: secret });
  t.after(() => host.close());
  const name = `dropped ${fresh("js")}`;
  // Frozen, the daemon leaves the request unanswered on its socket; killed, it never reads it.
  await control({ op: "freeze" });
  const made = host.createTable({ name });
  made.catch(() => {}); // its failure is the test's when it awaits it
  await sleep(300);
  await control({ op: "restart" });
  await assert.rejects(made, (/** @type {any} */ e) => {
    assert.equal(e.code, "connection_lost");
    assert.match(e.message, /^create_table: the connection dropped/);
    return true;
  });
  // The client goes on, and nothing made a table behind the caller's back.
  assert.deepEqual(
    (await host.listTables()).filter((row) => row.name === name),
    [],
  );
});
