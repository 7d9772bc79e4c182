// More combats than a page: listCombats and subscribeAll read every page, in id order.

import assert from "node:assert/strict";
import test from "node:test";
import { connect, fresh } from "../test-support/live.js";

test("listCombats and subscribeAll page through more combats than one page", async () => {
  const client = await connect();
  try {
    const page = client.helloResult.limits.max_combat_page;
    assert.ok(Number.isInteger(page) && page >= 1);
    const prefix = fresh("crowd");
    const ids = Array.from({ length: page + 3 }, (_, i) => `${prefix}-${String(i).padStart(4, "0")}`);
    await Promise.all(ids.map((id) => client.createCombat({ combat_id: id, ruleset: "marvel" })));

    const rows = await client.listCombats();
    const names = rows.map((r) => r.combat);
    assert.deepEqual(names, [...names].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
    assert.deepEqual(
      names.filter((n) => n.startsWith(`${prefix}-`)),
      ids,
    );
    const two = await client.listCombats({ after: ids[9], limit: 2 });
    assert.deepEqual(
      two.map((r) => r.combat),
      ids.slice(10, 12),
    );

    const all = await client.subscribeAll();
    assert.ok("seqs" in all.result);
    for (const id of ids) assert.equal(all.result.seqs[id], 2);
    await client.unsubscribeAll();
  } finally {
    client.close();
  }
});

test("listCombats pages by code point, as the daemon orders ids", async () => {
  const client = await connect();
  try {
    // U+FF01 sorts before U+1F600 by code point, after it by UTF-16 code unit.
    const prefix = fresh("astral");
    const ids = [`${prefix}-\uff01`, `${prefix}-\u{1f600}`];
    for (const id of ids) await client.createCombat({ combat_id: id, ruleset: "marvel" });
    const first = await client.listCombats({ after: `${prefix}-`, limit: 1 });
    assert.deepEqual(
      first.map((r) => r.combat),
      [ids[0]],
    );
    // Every page after a cursor: the client keeps the rows the daemon sends after it.
    const rest = await client.listCombats({ after: ids[0] });
    assert.equal(rest[0]?.combat, ids[1]);
  } finally {
    client.close();
  }
});
