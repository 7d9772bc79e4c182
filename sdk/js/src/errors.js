// The one error class the client rejects with: the protocol's errors are data (a stable code, a
// message for people, the offending field), and the client's own failures take the same shape so
// a caller branches on `code` alone.

/**
 * Codes the client gives its own failures (the daemon's codes are listed in protocol.md).
 * `too_far_behind`, `already_subscribed` and `message_too_large` are the daemon's codes too:
 * the client answers them itself when it knows the daemon would.
 */
export const LOCAL_CODES = Object.freeze({
  /** The connection dropped and was not brought back (reconnecting off, failed or timed out). */
  CONNECTION_LOST: "connection_lost",
  /** `client.close()` was called while the call or subscription was still going. */
  CLIENT_CLOSED: "client_closed",
  /** No answer within the call timeout, on a connection that is still open. */
  CALL_TIMEOUT: "call_timeout",
  /** More calls waiting for their answers than the client keeps (`MAX_PENDING`). */
  TOO_MANY_REQUESTS: "too_many_requests",
  /** A subscription's buffer was full, or it was too far behind to resume after a reconnect. */
  TOO_FAR_BEHIND: "too_far_behind",
});

/** A refusal from the daemon, or a failure of the client itself (see `LOCAL_CODES`). */
export class TurnkeeperError extends Error {
  /**
   * @param {string} code stable code: the daemon's, or one of `LOCAL_CODES`
   * @param {string} message for people; the daemon's is in the session's locale
   * @param {string} [field] the offending parameter's path, `""` for the request as a whole
   * @param {{requestId?: string, seqs?: Record<string, number>, fatal?: boolean}} [extra]
   */
  constructor(code, message, field = "", extra = {}) {
    super(message);
    this.name = "TurnkeeperError";
    this.code = code;
    this.field = field;
    /** A command interrupted by `connection_lost`/`call_timeout`/`client_closed`: it may or may
     * not have been applied; sending it again with this `request_id` is safe. */
    this.requestId = extra.requestId;
    /** `too_far_behind` of a subscription: the last seq delivered per combat. */
    this.seqs = extra.seqs;
    /** An error notification after which the daemon closes the connection. */
    this.fatal = extra.fatal ?? false;
  }
}
