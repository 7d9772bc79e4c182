// Load generator for the fan-out comparison: subscribers ("sub") and the writer ("write"),
// for Improved Initiative's socket.io relay ("ii") or Turnkeeper's WebSocket endpoint ("tk").
// A copy of shared/peers/fanout_client.mjs with two changes, for both systems alike: views are
// opened OPEN_BATCH at a time (the daemon lets one address have at most 8 connections waiting
// for their hello: protocol.md, "Session"), and a Turnkeeper session closed before its hello's
// answer fails the run instead of waiting forever.
// Times are wall-clock milliseconds with sub-ms resolution (performance.timeOrigin + now()),
// so a writer process and subscriber processes on this host can be compared.
//   node fanout_client.mjs sub   ii|tk URL N OUT.json [TOKEN COMBAT]
//   node fanout_client.mjs write ii|tk URL COUNT INTERVAL_MS OUT.json [TOKEN COMBAT]
// NODE_PATH must hold socket.io-client, ws and @msgpack/msgpack.
import { createRequire } from "module";
import { writeFileSync } from "fs";
const require = createRequire(import.meta.url);
const now = () => performance.timeOrigin + performance.now();
const [role, kind, url, ...rest] = process.argv.slice(2);
const OPEN_BATCH = 8;

function tkSocket(token) {
  const WebSocket = require("ws");
  const { encode, decode } = require("@msgpack/msgpack");
  const ws = new WebSocket(url);
  ws.binaryType = "nodebuffer";
  let next = 1;
  const waiting = new Map();
  const api = { ws, onEvent: null };
  api.call = (method, params) => new Promise((resolve, reject) => {
    const id = next++;
    waiting.set(id, { resolve, reject });
    ws.send(encode([0, id, method, [params]]));
  });
  ws.on("message", data => {
    const at = now();
    const m = decode(data);
    if (m[0] === 1) {
      const w = waiting.get(m[1]); waiting.delete(m[1]);
      if (m[2]) w.reject(new Error(JSON.stringify(m[2]))); else w.resolve(m[3]);
    } else if (m[0] === 2 && m[1] === "event" && api.onEvent) {
      api.onEvent(m[2][0], at);
    }
  });
  api.open = () => new Promise((resolve, reject) => {
    ws.on("open", async () => {
      try {
        await api.call("hello", { protocol: 1, client: { name: "peer-bench", kind: "tool" }, token });
        resolve(api);
      } catch (e) { reject(e); }
    });
    ws.on("error", reject);
    ws.on("close", () => reject(new Error("closed before the hello's answer")));
  });
  return api;
}

function iiSocket() {
  const { io } = require("socket.io-client");
  // Transports as a browser ends up: websocket (the default client starts with polling and
  // upgrades; going straight to websocket keeps 500 connections cheap to open).
  return io(url, { transports: ["websocket"], forceNew: true, reconnection: false });
}

async function sub() {
  const [nStr, out, token, combat] = rest;
  const n = parseInt(nStr, 10);
  const receipts = [];
  const conns = [];
  for (let start = 0; start < n; start += OPEN_BATCH) {
    const batch = [];
    for (let i = start; i < Math.min(n, start + OPEN_BATCH); i++) {
      if (kind === "ii") {
        batch.push(new Promise((resolve, reject) => {
          const s = iiSocket();
          s.on("connect", () => {
            s.emit("join encounter", "bench");
            s.on("encounter updated", enc => receipts.push([enc.ElapsedSeconds, now()]));
            resolve(s);
          });
          s.on("connect_error", reject);
        }));
      } else {
        batch.push((async () => {
          const c = await tkSocket(token).open();
          c.onEvent = (ev, at) => receipts.push([ev.seq, at]);
          await c.call("subscribe", { combat, after: 0 }).catch(async e => {
            if (!String(e).includes("too_far_behind")) throw e;
          });
          return c;
        })());
      }
    }
    conns.push(...(await Promise.all(batch)));
  }
  // socket.io joins are fire-and-forget: give the server a moment to process them.
  await new Promise(r => setTimeout(r, 300));
  receipts.length = 0;
  console.log("READY");
  const finish = () => {
    writeFileSync(out, JSON.stringify({ receipts, conns: conns.length }));
    process.exit(0);
  };
  process.on("SIGTERM", finish);
  setTimeout(finish, 120000);
}

function encounter(n, active) {
  const combatants = [];
  for (let i = 0; i < 10; i++) {
    combatants.push({
      Name: `Combatant ${i}`, HPDisplay: i < 4 ? `${20 + i}/${30 + i}` : "<span class='healthyHP'>Healthy</span>",
      HPColor: "green", Initiative: 20 - i, Id: `c${i}`, Tags: i % 3 ? [] : [{ Text: "Poisoned", DurationRemaining: 2, DurationTiming: "EndOfTurn", DurationCombatantId: `c${i}` }],
      IsPlayerCharacter: i < 4, ImageURL: "", AC: 12 + i, Color: "", ReactionsSpent: 0,
    });
  }
  return { ActiveCombatantId: `c${active % 10}`, RoundCounter: 1 + Math.floor(active / 10),
           ElapsedSeconds: n, Combatants: combatants };
}

async function write() {
  const [countStr, intervalStr, out, token, combat] = rest;
  const count = parseInt(countStr, 10), interval = parseFloat(intervalStr);
  const sent = {};
  const replies = [];
  if (kind === "ii") {
    const s = iiSocket();
    await new Promise((resolve, reject) => { s.on("connect", resolve); s.on("connect_error", reject); });
    s.emit("join encounter", "bench");
    await new Promise(r => setTimeout(r, 100));
    for (let n = 1; n <= count; n++) {
      const state = encounter(n, n);
      const at = now();
      s.emit("update encounter", "bench", state);
      sent[n] = at;
      await new Promise(r => setTimeout(r, interval));
    }
    s.close();
  } else {
    const c = await tkSocket(token).open();
    const got = await c.call("get_combat", { combat });
    let turn = got.view.turn;
    for (let n = 1; n <= count; n++) {
      const at = now();
      const result = await c.call("end_turn", {
        combat, request_id: `w-${Date.now()}-${n}`,
        turn: { round: turn.round, combatant: turn.combatant, number: turn.number },
      });
      replies.push(now() - at);
      for (const ev of result.events) {
        sent[ev.seq] = at;
        if (ev.event === "turn_started") turn = { round: ev.round, combatant: ev.combatant, number: ev.number };
      }
      await new Promise(r => setTimeout(r, interval));
    }
    c.ws.close();
  }
  writeFileSync(out, JSON.stringify({ sent, replies }));
  process.exit(0);
}

if (role === "sub") sub().catch(e => { console.error(e); process.exit(1); });
else write().catch(e => { console.error(e); process.exit(1); });
