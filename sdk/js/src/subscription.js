// One subscription's events, as an async iterable. The client pushes events in as they arrive;
// the subscription keeps the last seq it delivered per combat, which is both its dedupe (a
// catch-up overlapping what came before) and where a reconnect resumes from.

import { LOCAL_CODES, TurnkeeperError } from "./errors.js";

/** @typedef {import("./index.d.ts").TurnkeeperEvent} TurnkeeperEvent */
/**
 * @typedef {object} Reader
 * @property {(result: IteratorResult<TurnkeeperEvent>) => void} resolve
 * @property {(error: Error) => void} reject
 */

export class Subscription {
  /**
   * Made by `client.subscribe()` / `client.subscribeAll()`, never directly.
   * @param {{_leave(sub: Subscription): Promise<void>}} client
   * @param {string | null} combat the combat followed, null for every combat
   * @param {number} after
   * @param {number} size most unread events held
   */
  constructor(client, combat, after, size) {
    /** The combat followed, or null for every combat (`subscribeAll`). */
    this.combat = combat;
    /** The daemon's answer: `{combat, seq}` or `{seqs}`. */
    this.result = null;
    this._client = client;
    this._size = size;
    /** @type {TurnkeeperEvent[]} events delivered, not yet read */
    this._queue = [];
    /** @type {Reader[]} iterations waiting for the next event */
    this._readers = [];
    /** @type {Map<string, number>} last seq delivered per combat */
    this._last = new Map(combat === null ? [] : [[combat, after]]);
    /** @type {TurnkeeperEvent[] | null} live events kept aside while a gap is filled */
    this._held = null;
    this._confirmed = false;
    this._ended = false;
    /** @type {TurnkeeperError | null} */
    this._error = null;
  }

  /** Iterate with `for await`; leaving the loop early (break, return, throw) closes it. */
  [Symbol.asyncIterator]() {
    return this;
  }

  /** @returns {Promise<IteratorResult<TurnkeeperEvent>>} */
  next() {
    const event = this._queue.shift();
    if (event !== undefined) return Promise.resolve({ value: event, done: false });
    if (this._ended) {
      return this._error ? Promise.reject(this._error) : Promise.resolve(done());
    }
    // No deadline: a combat may stay quiet for hours; the end of the subscription wakes it.
    return new Promise((resolve, reject) => this._readers.push({ resolve, reject }));
  }

  /** Called by `for await` when the loop is left early: the subscription is closed. */
  async return() {
    await this.close();
    return done();
  }

  /**
   * Stop following: iteration ends (after the events already buffered), and the daemon is told
   * (best effort) so a later subscribe to the same combat is not refused.
   * @returns {Promise<void>}
   */
  close() {
    return this._client._leave(this);
  }

  /** Whether the subscription has ended (closed, failed, or its client closed). */
  get closed() {
    return this._ended;
  }

  // The client's side ------------------------------------------------------------------------

  /** @param {string} combat */
  _lastSeq(combat) {
    return this._last.get(combat) ?? 0;
  }

  /** An event notification for this subscription, as it arrives. @param {TurnkeeperEvent} event */
  _push(event) {
    if (this._held === null) this._deliver(event);
    else if (this._held.length >= this._size) {
      this._failBehind("more live events than it buffers arrived while catching up");
    } else this._held.push(event);
  }

  /** @param {TurnkeeperEvent} event */
  _deliver(event) {
    if (this._ended) return;
    const { combat, seq } = event;
    if (typeof combat !== "string" || typeof seq !== "number") return; // a newer daemon's business
    if (seq <= this._lastSeq(combat)) return; // delivered already
    const reader = this._readers.shift();
    if (reader) reader.resolve({ value: event, done: false });
    else if (this._queue.length >= this._size) {
      // Same choice as the Python client: end with an error rather than drop events silently or
      // grow without bound; what was buffered is still read first.
      this._failBehind(`its buffer of ${this._size} unread events was full`);
      return;
    } else this._queue.push(event);
    this._last.set(combat, seq);
  }

  /** Keep live events aside while a gap before them is filled from `history`. */
  _hold() {
    this._held = [];
  }

  _release() {
    const held = this._held ?? [];
    this._held = null;
    for (const event of held) this._deliver(event);
  }

  /** @param {string} why */
  _failBehind(why) {
    const what = this.combat ?? "every combat";
    this._end(
      new TurnkeeperError(
        LOCAL_CODES.TOO_FAR_BEHIND,
        `the subscription to ${what} fell behind: ${why}`,
        "",
        { seqs: Object.fromEntries(this._last) },
      ),
    );
  }

  /** @param {TurnkeeperError | null} error */
  _end(error) {
    if (this._ended) return;
    this._ended = true;
    this._error = error;
    // One that failed is forgotten by its client at once (and unfollowed at the daemon): a
    // `for await` loop that throws does not call `return()`.
    if (error) void this._client._leave(this);
    // Readers wait only when the queue is empty, so they can be told at once.
    for (const reader of this._readers.splice(0)) {
      if (error) reader.reject(error);
      else reader.resolve(done());
    }
  }
}

/** @returns {IteratorReturnResult<undefined>} */
function done() {
  return { value: undefined, done: true };
}
