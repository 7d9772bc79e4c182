// The protocol's methods by wire name, GENERATED from the method table
// (turnkeeper_sdk/methods.py) by `python -m turnkeeper_sdk.aio._generate`: do not edit.
// The client makes one camelCase function of each; its tests check this list against a
// live daemon's hello.

/** Session methods: the client says hello itself on every connection. */
export const SESSION_METHODS = Object.freeze([
  "hello",
]);

/** Queries and subscriptions: they read, and take no `request_id`. */
export const QUERY_METHODS = Object.freeze([
  "list_combats",
  "get_combat",
  "history",
  "subscribe",
  "unsubscribe",
  "subscribe_all",
  "unsubscribe_all",
  "list_plugins",
]);

/** Tables and their tokens: the operator's, and a hosting bridge's; no `request_id`. */
export const TABLE_METHODS = Object.freeze([
  "create_table",
  "list_tables",
  "add_token",
  "list_tokens",
  "revoke_token",
]);

/** Engine commands: each carries a `request_id` (filled in when absent). */
export const COMMAND_METHODS = Object.freeze([
  "create_combat",
  "add_combatant",
  "remove_combatant",
  "defeat_combatant",
  "revive_combatant",
  "reveal_combatant",
  "mark_surprised",
  "roll_initiative",
  "order_ties",
  "reorder_group",
  "start_combat",
  "end_turn",
  "declare_action",
  "hold",
  "take_held_turn",
  "reserve",
  "refocus",
  "announce_trigger",
  "claim_reaction",
  "pass_reaction",
  "close_window",
  "finish_reaction",
  "apply_condition",
  "remove_condition",
  "surprise",
  "record_outcome",
  "disable_plugin",
  "enable_plugin",
  "set_turn_timer",
  "tick",
  "undo",
  "end_combat",
]);

/** Every method, by wire name. */
export const METHODS = Object.freeze([
  ...SESSION_METHODS,
  ...QUERY_METHODS,
  ...TABLE_METHODS,
  ...COMMAND_METHODS,
]);

/**
 * A wire name as the client's function name: `end_turn` → `endTurn`.
 * @param {string} name
 * @returns {string}
 */
export function camelCase(name) {
  return name.replace(/_([a-z])/g, (_, letter) => letter.toUpperCase());
}
