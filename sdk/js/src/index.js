// The Turnkeeper client for JavaScript: the protocol over WebSocket, in browsers and in Node 20+
// (`node --experimental-websocket`, or any WebSocket constructor passed in as `WebSocket`).
//
// Layers, as in the Python async client (sdk/src/turnkeeper_sdk/aio.py): a WebSocket whose binary
// frames each carry one MessagePack-RPC message; a Connection matching msgids to waiting
// requests; the Client on top, which keeps what must survive a reconnect (the requests still
// waiting for an answer, the subscriptions and the last seq each delivered) and brings a dropped
// session back. The same files are served to browsers as they are: no build step, only relative
// imports and the bare specifier `@msgpack/msgpack` (an import map resolves it in a page).

import { decode, encode } from "@msgpack/msgpack";
import { LOCAL_CODES, TurnkeeperError } from "./errors.js";
import {
  COMMAND_METHODS,
  METHODS,
  QUERY_METHODS,
  SESSION_METHODS,
  TABLE_METHODS,
  camelCase,
} from "./methods.js";
import { Subscription } from "./subscription.js";

export {
  COMMAND_METHODS,
  LOCAL_CODES,
  METHODS,
  QUERY_METHODS,
  SESSION_METHODS,
  Subscription,
  TABLE_METHODS,
  TurnkeeperError,
  camelCase,
};

/** The protocol level this client speaks. */
export const PROTOCOL_VERSION = 1;

/** Milliseconds a request waits for its answer on an open connection. The daemon answers in
 * order and gives a reply up to 30 s to be queued; a longer silence means something is wrong. */
export const CALL_TIMEOUT_MS = 30_000;

/** Milliseconds one connection attempt may take, so a silent host cannot use up the whole
 * reconnect budget in a single try. */
export const CONNECT_TIMEOUT_MS = 10_000;

/** Milliseconds the client keeps trying to reconnect after a drop: a restarted daemon listens
 * again within a second or two; one gone for good is reported in bounded time. */
export const RECONNECT_TIMEOUT_MS = 30_000;

/** First pause between reconnect attempts; it doubles up to `BACKOFF_MAX_MS`, and each pause is
 * randomly shortened by up to half so the clients of a restarted daemon do not come back in
 * lockstep. */
export const BACKOFF_FIRST_MS = 50;
export const BACKOFF_MAX_MS = 2_000;

/** Times one request is sent, each on a fresh connection after the last one dropped before the
 * answer: a request that outlives this many connections is more likely what breaks them. */
export const MAX_SENDS = 5;
/** Table methods that change the token file and take no `request_id`: sent again after a lost
 * answer, they would make a second table or token. Once sent, a drop fails them instead. */
const SENT_ONCE = new Set(["create_table", "add_token", "revoke_token"]);

/** Unread events one subscription holds. The daemon queues at most 1024 messages for a
 * connection and drops one that falls further behind, so more would not help; it also holds a
 * whole catch-up (at most 1000 events). */
export const EVENT_BUFFER = 1024;

/** Requests waiting for their answers (or for a reconnect). Each is at most a megabyte, so this
 * bounds what a client piles up for a daemon that does not answer. */
export const MAX_PENDING = 1024;

const MAX_MSGID = 2 ** 32 - 1;
/** Largest message when a hello names no limit: the protocol's own. */
const FALLBACK_MESSAGE_BYTES = 1_048_576;
/** `history` page size when a hello names none: within every daemon's bound. */
const FALLBACK_HISTORY_PAGE = 100;
/** `list_combats` page size when a hello names none: within every daemon's bound. */
const FALLBACK_COMBAT_PAGE = 100;
/**
 * Whether `a` sorts after `b` by Unicode code point, as the daemon orders ids (JavaScript's own
 * `>` compares UTF-16 code units, which differs for characters beyond the BMP).
 * @param {string} a
 * @param {string} b
 */
function sortsAfter(a, b) {
  const x = [...a];
  const y = [...b];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = /** @type {number} */ (x[i].codePointAt(0)) - /** @type {number} */ (y[i].codePointAt(0));
    if (d !== 0) return d > 0;
  }
  return x.length > y.length;
}

/**
 * Every `list_combats` row after `after`, read page after page: a daemon answers at most a
 * page per request, and ids only sort on, so pages neither miss nor repeat one.
 * @param {(method: string, params: Record<string, unknown>) => Promise<any>} ask
 * @param {number} page
 * @param {string} [after]
 * @returns {Promise<any[]>}
 */
async function everyCombat(ask, page, after) {
  const rows = [];
  for (;;) {
    /** @type {Record<string, unknown>} */
    const params = { limit: page };
    if (after !== undefined) params.after = after;
    const cursor = after;
    /** @type {any[]} */
    const got = (await ask("list_combats", params)).filter(
      (/** @type {any} */ r) => cursor === undefined || sortsAfter(r.combat, cursor),
    );
    rows.push(...got);
    if (got.length < page) return rows;
    after = got[got.length - 1].combat;
  }
}

/**
 * `subscribe_all`, its `seqs` completed from `list_combats` when the daemon names only a page
 * of combats in its answer. A combat's seq read later is no less than at the answer, and its
 * events in between came as notifications before the page that names it.
 * @param {(method: string, params: Record<string, unknown>) => Promise<any>} ask
 * @param {number} page
 * @returns {Promise<{seqs: Record<string, number>, until?: string | null, more?: boolean}>}
 */
async function subscribeEverywhere(ask, page) {
  const result = { ...(await ask("subscribe_all", { limit: page })) };
  if (result.more) {
    const seqs = { ...result.seqs };
    for (const row of await everyCombat(ask, page, result.until)) {
      if (!("quarantined" in row)) seqs[row.combat] = row.seq;
    }
    result.seqs = seqs;
  }
  return result;
}

/** The client's own failures, as opposed to the daemon's refusals. @type {Set<string>} */
const LOCAL = new Set([
  LOCAL_CODES.CONNECTION_LOST,
  LOCAL_CODES.CLIENT_CLOSED,
  LOCAL_CODES.CALL_TIMEOUT,
  LOCAL_CODES.TOO_MANY_REQUESTS,
]);
/** Methods whose state the client keeps across reconnects: only their own functions send them. */
const STATEFUL = new Set(["hello", "subscribe", "unsubscribe", "subscribe_all", "unsubscribe_all"]);
const COMMANDS = new Set(COMMAND_METHODS);

/** A request's bookkeeping before its first send. */
const UNSENT = Object.freeze({ sends: 0, conn: null, msgid: -1, timer: undefined });

/** @typedef {"open" | "reconnecting" | "closed"} Status */

/** The connection a request was on dropped before its answer: internal, never reaches a caller. */
class Dropped extends Error {}

/** One WebSocket, said hello on, and the requests waiting on it. Never reused once dropped. */
class Connection {
  /** @param {WebSocket} ws */
  constructor(ws) {
    this.ws = ws;
    /** @type {Map<number, Request>} */
    this.pending = new Map();
    this.closed = false;
    this.reason = "the daemon closed the connection";
    this.code = "";
    this.nextId = 0;
  }
}

/**
 * @typedef {object} Request
 * @property {string} method
 * @property {Record<string, unknown>} params
 * @property {(result: any) => void} resolve
 * @property {(error: Error) => void} reject
 * @property {boolean} pinned internal: bound to one connection, rejected with Dropped if it drops
 * @property {number} sends
 * @property {Connection | null} conn the connection it waits on; null while it waits for one
 * @property {number} msgid
 * @property {ReturnType<typeof setTimeout> | undefined} timer
 * @property {((params: Record<string, unknown>) => void) | undefined} prepare run before each send
 */

export class Client {
  /**
   * Open a session: connect, say hello, and keep it up until `close()`.
   * Rejects with the daemon's refusal of hello (`unauthenticated`, ...) or `connection_lost`.
   * @param {string} url `ws://HOST:PORT/ws`
   * @param {import("./index.d.ts").ClientOptions} [options]
   * @returns {Promise<Client>}
   */
  static async connect(url, options = {}) {
    const client = new Client(url, options);
    try {
      client._conn = await client._open(CONNECT_TIMEOUT_MS);
    } catch (e) {
      const error =
        e instanceof TurnkeeperError
          ? e
          : new TurnkeeperError(LOCAL_CODES.CONNECTION_LOST, errorText(e));
      client._giveUp(error);
      throw error;
    }
    client._setStatus("open");
    return client;
  }

  /**
   * Use `Client.connect()`; the constructor alone does not connect.
   * @param {string} url
   * @param {import("./index.d.ts").ClientOptions} options
   */
  constructor(url, options) {
    const WebSocketImpl = options.WebSocket ?? globalThis.WebSocket;
    if (typeof WebSocketImpl !== "function") {
      throw new TypeError(
        "no WebSocket: pass options.WebSocket, or run Node with --experimental-websocket",
      );
    }
    const eventBuffer = options.eventBuffer ?? EVENT_BUFFER;
    if (!(eventBuffer >= 1)) throw new RangeError(`eventBuffer must be at least 1`);
    this.url = url;
    /** Milliseconds a request waits for its answer on an open connection. */
    this.callTimeout = options.callTimeout ?? CALL_TIMEOUT_MS;
    /** Milliseconds to reconnect after a drop before giving up; 0 with `reconnect: false`. */
    this.reconnectTimeout =
      options.reconnect === false ? 0 : (options.reconnectTimeout ?? RECONNECT_TIMEOUT_MS);
    /** Unread events each new subscription holds. */
    this.eventBuffer = eventBuffer;
    /** The whole result of the current connection's hello. */
    this.helloResult = /** @type {any} */ (null);
    this._WebSocket = WebSocketImpl;
    this._options = options;
    /** @type {Connection | null} */
    this._conn = null;
    /** @type {WebSocket | null} a connection attempt in progress, closed if the client is */
    this._dialing = null;
    /** @type {Set<Request>} every request not yet settled, in the order made */
    this._requests = new Set();
    /** @type {Map<string, Subscription>} */
    this._subs = new Map();
    /**
     * Unsubscribes that could not be sent while the client was reconnecting: sent first on
     * the next connection. At most one per subscription that was open.
     * @type {Array<[string, Record<string, unknown>]>}
     */
    this._untold = [];
    /** @type {Subscription | null} */
    this._all = null;
    /** @type {TurnkeeperError | null} why the client is closed, once it is */
    this._lost = null;
    /** @type {"connecting" | "open" | "reconnecting" | "closed"} */
    this._status = "connecting";
    /** @type {Set<(status: Status, error?: TurnkeeperError) => void>} */
    this._statusListeners = new Set();
    /** @type {Set<(error: TurnkeeperError) => void>} */
    this._errorListeners = new Set();
    /** @type {(() => void) | null} ends a reconnect pause early when the client closes */
    this._wake = null;
  }

  /** The current session, from its hello: `{role, user, connection, locale}`. */
  get session() {
    return this.helloResult?.session;
  }

  /** `"open"`, `"reconnecting"` or `"closed"`. */
  get status() {
    return this._status;
  }

  /**
   * Call `listener(status, error)` on every change of `status`; `error` says why for
   * `"reconnecting"` and `"closed"`. Returns a function that removes the listener.
   * @param {(status: Status, error?: TurnkeeperError) => void} listener
   */
  onStatus(listener) {
    this._statusListeners.add(listener);
    return () => this._statusListeners.delete(listener);
  }

  /**
   * Call `listener(error)` for each error notification from the daemon (`error.fatal`: the
   * connection closes next, and the client reconnects) and for unreadable data from it.
   * Returns a function that removes the listener.
   * @param {(error: TurnkeeperError) => void} listener
   */
  onError(listener) {
    this._errorListeners.add(listener);
    return () => this._errorListeners.delete(listener);
  }

  /** Close the session: every call still waiting, and every subscription, ends with
   * `client_closed`. */
  close() {
    this._giveUp(new TurnkeeperError(LOCAL_CODES.CLIENT_CLOSED, "the client is closed"));
  }

  /**
   * Call any query or command by its wire name with its wire params; a command without
   * `request_id` gets one. `hello` and the subscription methods have their own functions, which
   * keep what the client restores after a reconnect, and are refused here.
   * @param {string} method
   * @param {Record<string, unknown>} [params]
   */
  call(method, params = {}) {
    if (STATEFUL.has(method)) {
      return Promise.reject(
        new TypeError(`use client.${camelCase(method)}() rather than call("${method}")`),
      );
    }
    const kind = this.helloResult?.methods?.find((/** @type {any} */ m) => m.name === method)?.kind;
    return COMMANDS.has(method) || kind === "command"
      ? this._command(method, params)
      : this._call(method, { ...params });
  }

  // Session and queries -----------------------------------------------------------------------

  /** The hello result of the current connection: the client says hello itself, with its
   * token, on every connection (the daemon refuses a second one). */
  async hello() {
    if (this._lost) throw this._failure(this._lost);
    return this.helloResult;
  }

  /**
   * Combats in id order: `{combat, ruleset, phase, round, seq}`, or `{combat, quarantined}`.
   * Those whose ids sort after `after` (every one by default); with `limit`, one page of at
   * most that many (page on with `after` = the last row's `combat`), otherwise all of them,
   * read a page at a time.
   * @param {{after?: string, limit?: number}} [params]
   */
  listCombats(params = {}) {
    if (params.limit !== undefined) return this._call("list_combats", { ...params });
    return everyCombat((m, p) => this._call(m, p), this._combatPage(), params.after);
  }

  /** The daemon's `list_combats` page size, or one every daemon takes. */
  _combatPage() {
    return this.helloResult?.limits?.max_combat_page ?? FALLBACK_COMBAT_PAGE;
  }

  /** A combat as the caller may see it: `{combat, seq, view}`. @param {{combat: string}} params */
  getCombat(params) {
    return this._call("get_combat", { ...params });
  }

  /** Recorded events after `after`: `{combat, seq, until, events}`.
   * @param {{combat: string, after?: number, limit?: number}} params */
  history(params) {
    return this._call("history", { ...params });
  }

  /** The daemon's plugins: `{loaded, failed, skipped}`. */
  listPlugins() {
    return this._call("list_plugins", {});
  }

  // Tables: the operator's, and a hosting bridge's for the tables it manages --------------------

  /** Make a table, managed by the caller: `{table, name, created}`.
   * @param {{name: string}} params */
  createTable(params) {
    return this._call("create_table", { ...params });
  }

  /** The tables the caller manages: `[{table, name, created}]`. */
  listTables() {
    return this._call("list_tables", {});
  }

  /** Make a token of a table: `{id, table, role, user, narrator, host, created, secret}`; the
   * secret is in this answer only.
   * @param {{table: string, role: string, user?: string, narrator?: boolean}} params */
  addToken(params) {
    return this._call("add_token", { ...params });
  }

  /** The tokens of a table, never their secrets. @param {{table: string}} params */
  listTokens(params) {
    return this._call("list_tokens", { ...params });
  }

  /** Revoke a token of a table: its sessions end. @param {{table: string, id: string}} params */
  revokeToken(params) {
    return this._call("revoke_token", { ...params });
  }

  /**
   * Follow a combat: the events after seq `after` (missed ones first, then live ones), as an
   * async iterable. Refused locally if this client follows the combat already.
   * @param {{combat: string, after?: number}} params
   * @returns {Promise<Subscription>}
   */
  async subscribe(params) {
    const combat = params.combat;
    const after = params.after ?? 0;
    if (this._lost) throw this._failure(this._lost);
    if (this._subs.has(combat)) {
      throw new TurnkeeperError("already_subscribed", "this client follows it already", "combat");
    }
    const sub = new Subscription(this, combat, after, this.eventBuffer);
    this._subs.set(combat, sub);
    // Registered before the request: the catch-up arrives before the answer. Sent again after a
    // drop, it asks only for what the subscription has not delivered yet.
    const prepare = (/** @type {Record<string, unknown>} */ p) => {
      p.after = sub._lastSeq(combat);
    };
    try {
      sub.result = await this._call("subscribe", { ...params, after }, prepare);
    } catch (e) {
      await this._leave(sub);
      throw e;
    }
    sub._confirmed = true;
    return sub;
  }

  /**
   * Stop following a combat: its subscription's iteration ends. Always succeeds at the daemon.
   * @param {{combat: string}} params
   */
  async unsubscribe(params) {
    const sub = this._subs.get(params.combat);
    if (sub) await this._leave(sub, false);
    return this._call("unsubscribe", { ...params });
  }

  /**
   * Follow every combat, those created later included, from the moment of the answer on;
   * `result.seqs` holds each combat's last seq then.
   * @returns {Promise<Subscription>}
   */
  async subscribeAll() {
    if (this._lost) throw this._failure(this._lost);
    if (this._all) {
      throw new TurnkeeperError("already_subscribed", "this client follows it already", "method");
    }
    const sub = new Subscription(this, null, 0, this.eventBuffer);
    this._all = sub;
    try {
      sub.result = await subscribeEverywhere((m, p) => this._call(m, p), this._combatPage());
      for (const [combat, seq] of Object.entries(sub.result?.seqs ?? {})) {
        sub._last.set(combat, Math.max(sub._lastSeq(combat), seq));
      }
    } catch (e) {
      await this._leave(sub);
      throw e;
    }
    sub._confirmed = true;
    return sub;
  }

  /** Stop `subscribeAll`: its iteration ends; per-combat subscriptions go on. */
  async unsubscribeAll() {
    if (this._all) await this._leave(this._all, false);
    return this._call("unsubscribe_all", {});
  }

  // Requests ----------------------------------------------------------------------------------

  /**
   * @param {string} method
   * @param {Record<string, unknown>} params
   */
  _command(method, params) {
    // A copy: the request_id filled in here is the one every resend carries.
    const p = { ...params };
    p.request_id ??= newRequestId();
    return this._call(method, p);
  }

  /**
   * Send a request until it is answered, over reconnects.
   * @param {string} method
   * @param {Record<string, unknown>} params
   * @param {Request["prepare"]} [prepare]
   * @returns {Promise<any>}
   */
  _call(method, params, prepare) {
    if (this._lost) return Promise.reject(this._failure(this._lost, params));
    if (this._requests.size >= MAX_PENDING) {
      return Promise.reject(
        new TurnkeeperError(
          LOCAL_CODES.TOO_MANY_REQUESTS,
          `${MAX_PENDING} requests are waiting for their answers already`,
        ),
      );
    }
    return new Promise((resolve, reject) => {
      /** @type {Request} */
      const req = { method, params, resolve, reject, prepare, pinned: false, ...UNSENT };
      this._requests.add(req);
      const conn = this._conn;
      // Otherwise it waits for the reconnect, which sends it.
      if (conn && !conn.closed && this._status === "open") this._send(conn, req);
    });
  }

  /**
   * A request on one connection only (hello, resubscribing): it fails with Dropped if that
   * connection drops, and the reconnect tries again on the next one.
   * @param {Connection} conn
   * @param {string} method
   * @param {Record<string, unknown>} params
   * @returns {Promise<any>}
   */
  _ask(conn, method, params) {
    return new Promise((resolve, reject) => {
      if (conn.closed) {
        reject(new Dropped(conn.reason));
        return;
      }
      /** @type {Request} */
      const req = { method, params, resolve, reject, prepare: undefined, pinned: true, ...UNSENT };
      this._requests.add(req);
      this._send(conn, req);
    });
  }

  /**
   * @param {Connection} conn
   * @param {Request} req
   */
  _send(conn, req) {
    clearTimeout(req.timer);
    req.prepare?.(req.params);
    let msgid = conn.nextId;
    while (conn.pending.has(msgid)) msgid = (msgid + 1) % (MAX_MSGID + 1); // after wrapping only
    conn.nextId = (msgid + 1) % (MAX_MSGID + 1);
    let data;
    try {
      // undefined fields are left out: the same as not giving them, the daemon's defaults apply.
      data = encode([0, msgid, req.method, [req.params]], { ignoreUndefined: true });
    } catch (e) {
      this._settle(req, new TurnkeeperError("invalid_message", errorText(e), "params"));
      return;
    }
    const limit = this.helloResult?.limits?.max_message_bytes ?? FALLBACK_MESSAGE_BYTES;
    if (data.byteLength > limit) {
      // Refused before sending, as the daemon would: it drops a connection that sends one.
      const why = `the request is ${data.byteLength} bytes, more than ${limit}`;
      this._settle(req, new TurnkeeperError("message_too_large", why));
      return;
    }
    req.conn = conn;
    req.msgid = msgid;
    req.sends += 1;
    conn.pending.set(msgid, req);
    req.timer = setTimeout(() => this._timedOut(req), this.callTimeout);
    // A send on a closing socket is discarded; its close event follows and the request waits.
    conn.ws.send(data);
  }

  /** @param {Request} req */
  _timedOut(req) {
    req.conn?.pending.delete(req.msgid);
    req.conn = null;
    const why = `no answer to ${req.method} within ${this.callTimeout} ms`;
    this._settle(
      req,
      this._failure(new TurnkeeperError(LOCAL_CODES.CALL_TIMEOUT, why), req.params),
    );
  }

  /**
   * @param {Request} req
   * @param {Error | null} error
   * @param {unknown} [result]
   */
  _settle(req, error, result) {
    if (!this._requests.delete(req)) return;
    clearTimeout(req.timer);
    if (error) req.reject(error);
    else req.resolve(result);
  }

  /** Send, on a fresh connection, every request waiting for one, in the order they were made.
   * @param {Connection} conn */
  _flush(conn) {
    for (const req of [...this._requests]) {
      if (!req.pinned && req.conn === null && !conn.closed) this._send(conn, req);
    }
  }

  /**
   * The client's own error, for one caller: a command's carries its request_id.
   * @param {TurnkeeperError} error
   * @param {Record<string, unknown>} [params]
   */
  _failure(error, params) {
    const requestId = typeof params?.request_id === "string" ? params.request_id : undefined;
    return new TurnkeeperError(error.code, error.message, error.field, { requestId });
  }

  // Connections -------------------------------------------------------------------------------

  /**
   * @param {number} timeout
   * @returns {Promise<WebSocket>}
   */
  _dial(timeout) {
    return new Promise((resolve, reject) => {
      /** @type {WebSocket} */
      let ws;
      try {
        ws = new this._WebSocket(this.url);
      } catch (e) {
        reject(new Dropped(`cannot open ${this.url}: ${errorText(e)}`));
        return;
      }
      ws.binaryType = "arraybuffer";
      this._dialing = ws;
      const fail = (/** @type {string} */ why) => {
        clearTimeout(timer);
        this._dialing = null;
        ws.onopen = ws.onerror = ws.onclose = null;
        ws.close();
        reject(new Dropped(why));
      };
      const timer = setTimeout(() => fail(`no connection within ${timeout} ms`), timeout);
      ws.onopen = () => {
        clearTimeout(timer);
        this._dialing = null;
        resolve(ws);
      };
      ws.onerror = () => fail(`cannot connect to ${this.url}`);
      ws.onclose = (event) => fail(`cannot connect to ${this.url} (close code ${event.code})`);
    });
  }

  /**
   * A fresh connection with hello said.
   * @param {number} timeout for the connection attempt
   */
  async _open(timeout) {
    const ws = await this._dial(timeout);
    const conn = new Connection(ws);
    ws.onmessage = (event) => this._received(conn, event.data);
    ws.onclose = () => this._dropped(conn);
    ws.onerror = null; // a close event always follows
    const { token, locale, narrate, name = "turnkeeper-js", kind = "tool" } = this._options;
    /** @type {Record<string, unknown>} */
    const params = { protocol: PROTOCOL_VERSION, client: { name, kind } };
    if (token !== undefined) params.token = token;
    if (locale !== undefined) params.locale = locale;
    if (narrate !== undefined) params.narrate = narrate;
    try {
      this.helloResult = await this._ask(conn, "hello", params);
    } catch (e) {
      this._drop(conn, "hello failed");
      throw e;
    }
    return conn;
  }

  /**
   * One frame from the daemon: exactly one message.
   * @param {Connection} conn
   * @param {unknown} data
   */
  _received(conn, data) {
    if (conn.closed) return;
    if (typeof data === "string") {
      this._unreadable(conn, "invalid_message", "the daemon sent a text frame");
      return;
    }
    let message;
    try {
      message = decode(asBytes(data));
    } catch (e) {
      this._unreadable(
        conn,
        "malformed_msgpack",
        `the daemon sent unreadable data: ${errorText(e)}`,
      );
      return;
    }
    if (Array.isArray(message) && message[0] === 1 && message.length === 4) {
      this._answered(conn, message[1], message[2], message[3]);
    } else if (Array.isArray(message) && message[0] === 2 && message.length === 3) {
      const params = Array.isArray(message[2]) ? message[2][0] : undefined;
      this._notified(conn, message[1], params && typeof params === "object" ? params : {});
    } else {
      this._unreadable(conn, "invalid_message", "the daemon sent a message of no known shape");
    }
  }

  /**
   * @param {Connection} conn
   * @param {unknown} msgid
   * @param {any} error
   * @param {unknown} result
   */
  _answered(conn, msgid, error, result) {
    const req = conn.pending.get(/** @type {number} */ (msgid));
    if (!req) return; // its caller timed out
    conn.pending.delete(req.msgid);
    clearTimeout(req.timer);
    req.conn = null;
    if (error === null || error === undefined) {
      this._settle(req, null, result);
      return;
    }
    const refusal = new TurnkeeperError(
      String(error.code ?? ""),
      String(error.message ?? ""),
      String(error.field ?? ""),
    );
    if (
      refusal.code === "shutting_down" &&
      !req.pinned &&
      this.reconnectTimeout > 0 &&
      req.sends < MAX_SENDS
    ) {
      // The daemon is stopping and closes this connection once its commands drain: the request
      // goes again, the same, to the daemon that comes back (or fails if none does in time).
      req.timer = setTimeout(() => this._settle(req, refusal), this.callTimeout);
      return;
    }
    this._settle(req, refusal);
  }

  /**
   * @param {Connection} conn
   * @param {unknown} method
   * @param {any} params
   */
  _notified(conn, method, params) {
    if (method === "event") {
      const sub = typeof params.combat === "string" ? this._subs.get(params.combat) : undefined;
      sub?._push(params);
      // A copy when both get it: each subscriber may keep or change what it receives.
      this._all?._push(sub ? { ...params } : params);
    } else if (method === "error") {
      const error = new TurnkeeperError(
        String(params.code ?? ""),
        String(params.message ?? ""),
        String(params.field ?? ""),
        { fatal: params.fatal === true },
      );
      this._emitError(error);
      // The daemon closes the connection next; this is why.
      if (error.fatal) this._drop(conn, `${error.code}: ${error.message}`, error.code);
    }
    // Other notifications are ignored: a newer daemon may send some.
  }

  /**
   * Data the client cannot read: nothing after it on this connection can be trusted.
   * @param {Connection} conn
   * @param {string} code
   * @param {string} message
   */
  _unreadable(conn, code, message) {
    this._emitError(new TurnkeeperError(code, message, "", { fatal: true }));
    this._drop(conn, message, code);
  }

  /**
   * Close a connection now, for a reason, rather than wait for its close event.
   * @param {Connection} conn
   * @param {string} reason
   * @param {string} [code]
   */
  _drop(conn, reason, code = "") {
    if (!conn.closed) {
      conn.reason = reason;
      conn.code = code;
    }
    this._dropped(conn);
    conn.ws.close();
  }

  /**
   * A connection is gone: its internal requests fail, the others wait for the reconnect.
   * @param {Connection} conn
   */
  _dropped(conn) {
    if (conn.closed) return;
    conn.closed = true;
    const current = conn === this._conn && !this._lost;
    for (const req of conn.pending.values()) {
      clearTimeout(req.timer);
      req.conn = null;
      if (req.pinned) {
        this._settle(req, new Dropped(conn.reason));
      } else if (SENT_ONCE.has(req.method)) {
        const why = `${req.method}: the connection dropped before the answer, and it is not sent again, for it may have been done: list_tables and list_tokens tell`;
        this._settle(req, new TurnkeeperError(LOCAL_CODES.CONNECTION_LOST, why));
      } else if (!current || this.reconnectTimeout <= 0 || req.sends >= MAX_SENDS) {
        const why =
          req.sends >= MAX_SENDS && this.reconnectTimeout > 0
            ? `${req.method}: the connection dropped ${MAX_SENDS} times before the answer`
            : conn.reason;
        const lost = new TurnkeeperError(LOCAL_CODES.CONNECTION_LOST, why);
        this._settle(req, this._failure(lost, req.params));
      } // else: it stays in this._requests, unsent, and the reconnect sends it again
    }
    conn.pending.clear();
    if (!current) return;
    if (this.reconnectTimeout > 0) {
      void this._reconnect(conn);
    } else {
      this._giveUp(new TurnkeeperError(LOCAL_CODES.CONNECTION_LOST, conn.reason));
    }
  }

  /**
   * Bring the session back after a drop: connect again with backoff, say hello, follow again
   * what was followed, then send the requests still waiting. Bounded by `reconnectTimeout`.
   * @param {Connection} old
   */
  async _reconnect(old) {
    this._setStatus("reconnecting", new TurnkeeperError(LOCAL_CODES.CONNECTION_LOST, old.reason));
    const deadline = Date.now() + this.reconnectTimeout;
    let delay = BACKOFF_FIRST_MS;
    let failure = "";
    while (!this._lost) {
      /** @type {Connection | null} */
      let conn = null;
      try {
        conn = await this._open(Math.max(Math.min(CONNECT_TIMEOUT_MS, deadline - Date.now()), 1));
        await this._resubscribe(conn);
        while (this._untold.length > 0) {
          const [method, params] = /** @type {[string, Record<string, unknown>]} */ (
            this._untold.shift()
          );
          await this._unfollow(conn, method, params);
        }
        if (this._lost) {
          this._drop(conn, "the client is closed");
          return;
        }
        this._conn = conn;
        this._flush(conn); // before the listeners hear "open" and make calls of their own
        this._setStatus("open");
        return;
      } catch (e) {
        if (conn) this._drop(conn, "reconnecting failed");
        if (this._lost) return;
        if (isRefusal(e)) {
          // The daemon is there but refuses these credentials now (a revoked token, say):
          // trying again cannot help.
          const why = `${old.reason}; hello was refused on reconnecting: ${e.code}: ${e.message}`;
          this._giveUp(new TurnkeeperError(LOCAL_CODES.CONNECTION_LOST, why));
          return;
        }
        failure = errorText(e);
      }
      const pause = delay * (0.5 + Math.random() / 2);
      if (Date.now() + pause >= deadline) break;
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, pause);
        this._wake = () => {
          clearTimeout(timer);
          resolve(undefined);
        };
      });
      this._wake = null;
      delay = Math.min(delay * 2, BACKOFF_MAX_MS);
    }
    if (this._lost) return;
    const why = `${old.reason}; not reconnected within ${this.reconnectTimeout} ms (${failure})`;
    this._giveUp(new TurnkeeperError(LOCAL_CODES.CONNECTION_LOST, why));
  }

  /**
   * Follow again, on a fresh connection, what was followed: each combat from the last seq its
   * subscription delivered, so nothing is missed and nothing comes twice.
   * @param {Connection} conn
   */
  async _resubscribe(conn) {
    for (const [combat, sub] of [...this._subs]) {
      if (!sub._confirmed || sub.closed) continue; // one still being opened is sent by its caller
      try {
        await this._ask(conn, "subscribe", { combat, after: sub._lastSeq(combat) });
      } catch (e) {
        if (!isRefusal(e)) throw e;
        if (e.code === "too_far_behind") {
          sub._failBehind(`too far behind to resume after a reconnect (${e.message})`);
        } else sub._end(e);
        continue;
      }
      if (this._subs.get(combat) !== sub) await this._unfollow(conn, "unsubscribe", { combat });
    }
    const all = this._all;
    if (all && all._confirmed && !all.closed) await this._resubscribeAll(conn, all);
  }

  /**
   * `subscribe_all` has no `after`: subscribe, then read what each combat recorded meanwhile
   * from `history`, holding live events aside (bounded) until the gap is filled.
   * @param {Connection} conn
   * @param {Subscription} sub
   */
  async _resubscribeAll(conn, sub) {
    sub._hold();
    /** @type {Record<string, number>} */
    let seqs;
    try {
      const ask = (/** @type {string} */ m, /** @type {Record<string, unknown>} */ p) =>
        this._ask(conn, m, p);
      seqs = (await subscribeEverywhere(ask, this._combatPage())).seqs;
    } catch (e) {
      if (!isRefusal(e)) throw e;
      sub._end(e);
      return;
    }
    // From here on the daemon follows every combat for this connection: a subscription that
    // ends while the gap is filled must be unfollowed, or a later subscribeAll is refused.
    const page = this.helloResult?.limits?.max_history_page ?? FALLBACK_HISTORY_PAGE;
    for (const [combat, seq] of Object.entries(seqs)) {
      let after = sub._lastSeq(combat);
      while (after < seq && !sub.closed) {
        let got;
        try {
          got = await this._ask(conn, "history", { combat, after, limit: page });
        } catch (e) {
          if (!isRefusal(e)) throw e;
          if (e.code === "combat_quarantined") break; // unreadable for everyone until repaired
          sub._end(e);
          break;
        }
        for (const event of got.events) sub._deliver({ combat, ...event });
        if (got.until <= after) break;
        after = got.until;
      }
    }
    sub._release();
    if (this._all !== sub) await this._unfollow(conn, "unsubscribe_all", {});
  }

  /**
   * Stop following: end the subscription and, unless the caller sends the request itself, tell
   * the daemon (best effort) so a later subscribe is not refused as already_subscribed.
   * @param {Subscription} sub
   * @param {boolean} [tell]
   */
  async _leave(sub, tell = true) {
    sub._end(null);
    /** @type {[string, Record<string, unknown>]} */
    let request;
    if (sub.combat === null) {
      if (this._all !== sub) return;
      this._all = null;
      request = ["unsubscribe_all", {}];
    } else {
      if (this._subs.get(sub.combat) !== sub) return;
      this._subs.delete(sub.combat);
      request = ["unsubscribe", { combat: sub.combat }];
    }
    const conn = this._conn;
    if (!tell) return;
    if (conn && !conn.closed && this._status === "open") {
      await this._unfollow(conn, ...request);
    } else {
      // Reconnecting: the new connection may have followed it again already.
      this._untold.push(request);
    }
  }

  /**
   * @param {Connection} conn
   * @param {string} method
   * @param {Record<string, unknown>} params
   */
  async _unfollow(conn, method, params) {
    try {
      await this._ask(conn, method, params);
    } catch {
      // Best effort: a dropped connection ends the daemon's side of it anyway.
    }
  }

  /**
   * The end: every waiting call and subscription fails with `error`, the connection closes.
   * @param {TurnkeeperError} error
   */
  _giveUp(error) {
    if (this._lost) return;
    this._lost = error;
    for (const req of [...this._requests]) this._settle(req, this._failure(error, req.params));
    const subs = [...this._subs.values(), ...(this._all ? [this._all] : [])];
    this._subs.clear();
    this._all = null;
    for (const sub of subs) sub._end(this._failure(error));
    if (this._conn) this._drop(this._conn, error.message, error.code);
    this._dialing?.close();
    this._wake?.();
    this._setStatus("closed", error);
  }

  /**
   * @param {Status} status
   * @param {TurnkeeperError} [error]
   */
  _setStatus(status, error) {
    if (this._status === status) return;
    this._status = status;
    for (const listener of [...this._statusListeners]) callSafely(listener, status, error);
  }

  /** @param {TurnkeeperError} error */
  _emitError(error) {
    for (const listener of [...this._errorListeners]) callSafely(listener, error);
  }
}

// One function per command, made from the method table: each takes the command's params object
// (the protocol's own field names, `combat`, `request_id`, `as`) and fills `request_id` in.
for (const name of COMMAND_METHODS) {
  Object.defineProperty(Client.prototype, camelCase(name), {
    value: /** @this {Client} */ function (/** @type {Record<string, unknown>} */ params = {}) {
      return this._command(name, params);
    },
    writable: true,
    configurable: true,
  });
}

/**
 * A refusal the daemon means: not the client's own failure, and not `shutting_down` (the daemon
 * is going away; the one that comes back is asked again).
 * @param {unknown} e
 * @returns {e is TurnkeeperError}
 */
function isRefusal(e) {
  return e instanceof TurnkeeperError && !LOCAL.has(e.code) && e.code !== "shutting_down";
}

/** @param {unknown} e */
function errorText(e) {
  return e instanceof Error ? e.message : String(e);
}

/** @param {unknown} data an ArrayBuffer (binaryType "arraybuffer") or a view of bytes */
function asBytes(data) {
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data))
    return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  throw new Error(`a frame of type ${Object.prototype.toString.call(data)}`);
}

/**
 * A listener's failure must not break the client's own bookkeeping: report it and go on.
 * @param {Function} listener
 * @param {...unknown} args
 */
function callSafely(listener, ...args) {
  try {
    listener(...args);
  } catch (e) {
    const report = /** @type {any} */ (globalThis).reportError ?? console.error;
    report(e);
  }
}

/** A fresh request id: a UUID. */
function newRequestId() {
  const crypto = globalThis.crypto;
  if (typeof crypto.randomUUID === "function") return crypto.randomUUID();
  // randomUUID exists only in secure contexts (https, localhost); a page served over plain http
  // on a LAN still has getRandomValues, so build the same version 4 UUID from it.
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const hex = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  const cut = [0, 8, 12, 16, 20, 32];
  return cut
    .slice(1)
    .map((end, i) => hex.slice(cut[i], end))
    .join("-");
}
