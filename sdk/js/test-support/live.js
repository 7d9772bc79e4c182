// What the client's tests share: the live daemon they run against, named by the environment the
// pytest wrapper (tests/test_js_client.py) sets, and a control socket through which a test asks
// that wrapper to freeze, kill and restart the daemon or to manage tokens. Kept out of test/,
// where Node's test runner would run it as a test file of its own.

import { createConnection } from "node:net";
import { randomUUID } from "node:crypto";
import { Client } from "../src/index.js";

/** Milliseconds any one step may take: far more than it needs, so a hang fails fast. */
export const WAIT = 10_000;

/** @param {string} name */
function env(name) {
  const value = process.env[name];
  if (!value) {
    throw new Error(`${name} is not set: run these tests with pytest tests/test_js_client.py`);
  }
  return value;
}

export const URL = env("TURNKEEPER_TEST_WS_URL");
export const NARRATOR = env("TURNKEEPER_TEST_NARRATOR_TOKEN");
/** A player token of the user `alice`. */
export const PLAYER = env("TURNKEEPER_TEST_PLAYER_TOKEN");

/**
 * A client of the live daemon, as narrator unless a token is given; a call that hangs fails
 * within `WAIT`.
 * @param {import("../src/index.d.ts").ClientOptions} [options]
 */
export function connect(options = {}) {
  return Client.connect(URL, { token: NARRATOR, name: "js-tests", callTimeout: WAIT, ...options });
}

/** A combat id no other test uses. @param {string} prefix */
export function fresh(prefix) {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

/**
 * A marvel combat in round 1, Spider-Man's turn (he is alice's); returns its last seq (12).
 * @param {Client} client
 * @param {string} combat
 */
export async function bank(client, combat) {
  await client.createCombat({ combat_id: combat, ruleset: "marvel" });
  await client.addCombatant({
    combat,
    id: "spidey",
    display_name: "Spider-Man",
    controller: "alice",
    player_character: true,
    faces: [6, 6, 6],
  });
  await client.addCombatant({
    combat,
    id: "ock",
    display_name: "Doctor Octopus",
    faces: [2, 2, 2],
  });
  return (await client.startCombat({ combat })).seq;
}

/**
 * A promise that fails if `promise` takes longer than `ms`.
 * @template T
 * @param {Promise<T>} promise
 * @param {number} [ms]
 * @returns {Promise<T>}
 */
export function within(promise, ms = WAIT) {
  /** @type {ReturnType<typeof setTimeout>} */
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`nothing within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/**
 * The next `n` events of a subscription, read with `next()` so the subscription stays open.
 * @param {AsyncIterator<any>} sub
 * @param {number} n
 */
export async function take(sub, n) {
  const events = [];
  while (events.length < n) {
    const { value, done } = await within(sub.next());
    if (done) break;
    events.push(value);
  }
  return events;
}

/** @param {number} first @param {number} last */
export function range(first, last) {
  return Array.from({ length: last - first + 1 }, (_, i) => first + i);
}

/** @param {number} ms */
export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Whether the wrapper offers its control socket (it always does; a manual run may not). */
export const CONTROL = process.env.TURNKEEPER_TEST_CONTROL;

/**
 * Ask the pytest wrapper to act on the daemon: one JSON line there, one back. Operations:
 * `{op: "freeze"}` (SIGSTOP), `{op: "thaw"}` (SIGCONT), `{op: "restart", while_down}` (SIGKILL,
 * run `while_down`'s `[method, params]` commands with the WebSocket endpoint still closed, then
 * start it again on the same port), `{op: "token", args}` (→ `{id, secret}`), `{op: "revoke",
 * id}`.
 * @param {Record<string, unknown>} request
 * @returns {Promise<any>}
 */
export function control(request) {
  const path = env("TURNKEEPER_TEST_CONTROL");
  return new Promise((resolve, reject) => {
    const socket = createConnection(path);
    let answer = "";
    socket.setEncoding("utf8");
    socket.on("connect", () => socket.write(`${JSON.stringify(request)}\n`));
    socket.on("data", (chunk) => (answer += chunk));
    socket.on("error", reject);
    socket.on("end", () => {
      const reply = JSON.parse(answer);
      if (reply.ok) resolve(reply);
      else reject(new Error(`the wrapper could not ${request.op}: ${reply.error}`));
    });
    // A restart takes a few seconds; nothing takes this long unless something is stuck.
    socket.setTimeout(60_000, () => socket.destroy(new Error(`no answer to ${request.op}`)));
  });
}
