// Load generator for the fan-out comparison: subscribers ("sub") and the writer ("write"),
// for Improved Initiative's socket.io relay ("ii") or Turnkeeper's WebSocket endpoint ("tk").
// A copy of shared/peers/fanout_client.mjs with three changes, for both systems alike: views
// are opened OPEN_BATCH at a time (the daemon lets one address have at most 8 connections
// waiting for their hello: protocol.md, "Session"); a Turnkeeper session closed before its
// hello's answer fails the run instead of waiting forever; and once every view is open, a view
// keeps the bytes its TCP socket reads, each read stamped as it comes, and parses them (frames,
// then msgpack or socket.io's JSON) only once the run is over. Parsed as they came, the 500th
// view's receipt waited behind the parsing of the 499 before it in this one Node process: that
// measured the client (the more so for socket.io's larger JSON), not when the server's bytes
// came. bench_fanout.py's Unix-socket subscribers stamp their reads the same way.
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
  const api = { ws };
  api.call = (method, params) => new Promise((resolve, reject) => {
    const id = next++;
    waiting.set(id, { resolve, reject });
    ws.send(encode([0, id, method, [params]]));
  });
  ws.on("message", data => {
    const m = decode(data);
    if (m[0] === 1) {
      const w = waiting.get(m[1]); waiting.delete(m[1]);
      if (m[2]) w.reject(new Error(JSON.stringify(m[2]))); else w.resolve(m[3]);
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

// A view's TCP socket under its WebSocket: the ws library's, for socket.io the one of its
// engine's websocket transport (the only transport these views use).
const rawSocket = conn => (kind === "ii" ? conn.io.engine.transport.ws : conn.ws)._socket;

// The reads of one view, kept with their times, and no longer handed to its WebSocket.
function record(socket) {
  const reads = [];
  socket.removeAllListeners("data");
  socket.on("data", chunk => reads.push([now(), chunk]));
  return reads;
}

// Each whole server frame's payload (unmasked, as a server sends) with the time of the read that
// completed it; a frame split over reads counts when its last byte came.
function* frames(reads) {
  let buf = Buffer.alloc(0);
  for (const [at, chunk] of reads) {
    buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
    for (;;) {
      if (buf.length < 2) break;
      let size = buf[1] & 0x7f, head = 2;
      if (size === 126) { if (buf.length < 4) break; size = buf.readUInt16BE(2); head = 4; }
      else if (size === 127) { if (buf.length < 10) break; size = Number(buf.readBigUInt64BE(2)); head = 10; }
      if (buf.length < head + size) break;
      yield [at, buf[0] & 0x0f, buf.subarray(head, head + size)];
      buf = buf.subarray(head + size);
    }
  }
}

// The update each frame carries, by the same keys the live handlers used.
function receiptsOf(reads, receipts) {
  const { decode } = require("@msgpack/msgpack");
  for (const [at, opcode, payload] of frames(reads)) {
    if (kind === "tk" && opcode === 2) {
      const m = decode(payload);
      if (m[0] === 2 && m[1] === "event") receipts.push([m[2][0].seq, at]);
    } else if (kind === "ii" && opcode === 1) {
      // engine.io "4" (message) + socket.io "2" (event), then the JSON of [name, ...args].
      const text = payload.toString();
      if (!text.startsWith("42")) continue;
      const [name, enc] = JSON.parse(text.slice(2));
      if (name === "encounter updated") receipts.push([enc.ElapsedSeconds, at]);
    }
  }
}

async function sub() {
  const [nStr, out, token, combat] = rest;
  const n = parseInt(nStr, 10);
  const conns = [];
  for (let start = 0; start < n; start += OPEN_BATCH) {
    const batch = [];
    for (let i = start; i < Math.min(n, start + OPEN_BATCH); i++) {
      if (kind === "ii") {
        batch.push(new Promise((resolve, reject) => {
          const s = iiSocket();
          s.on("connect", () => {
            s.emit("join encounter", "bench");
            resolve(s);
          });
          s.on("connect_error", reject);
        }));
      } else {
        batch.push((async () => {
          const c = await tkSocket(token).open();
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
  // What came before (catch-ups, the joins' echoes) is not kept: from here on, the reads are.
  const reads = conns.map(c => record(rawSocket(c)));
  console.log("READY");
  const finish = () => {
    const receipts = [];
    for (const view of reads) receiptsOf(view, receipts);
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
