// Types of the Turnkeeper JavaScript client. The protocol itself is protocol.md: the names here
// are its names (snake_case fields, as they travel), and every result may carry keys a newer
// daemon adds.

// Plain values ----------------------------------------------------------------------------------

export type OptionValue = string | number | boolean | null;
export type Phase = "none" | "setup" | "initiative" | "bonus_round" | "rounds" | "ended";
export type Role = "narrator" | "player" | "observer" | "bridge";
export type Boundary = "start" | "end";
export type TurnKind = "normal" | "held" | "floor";

// Command types ---------------------------------------------------------------------------------

/** Names a turn (R5); `number` tells a held turn from the one held. */
export interface TurnRef {
  round: number;
  combatant: string;
  number?: number;
}

export interface ActionSpec {
  kind: string;
  type?: string | null;
  description?: string;
  targets?: string[];
  tags?: string[];
  zone?: string | null;
}

export interface Predicate {
  events?: string[];
  actors?: string[];
  kinds?: string[];
  targets?: string[];
  tags?: string[];
  zones?: string[];
}

export interface Trigger {
  text: string;
  predicate?: Predicate | null;
}

export interface TriggerFacts {
  event: string;
  actor?: string | null;
  kind?: string | null;
  targets?: string[];
  tags?: string[];
  zone?: string | null;
  text?: string;
}

// State types -----------------------------------------------------------------------------------

export interface Actor {
  role: "narrator" | "player" | "observer";
  user: string | null;
  via: string | null;
}

export interface Reroll {
  reason: "edge" | "trouble";
  die: number;
  old: number;
  new: number;
  kept: number;
}

export interface Check {
  dice: string;
  rolled: number[];
  faces: number[];
  modifier: number;
  total: number;
  fantastic: boolean;
  ultimate: boolean;
  edges: number;
  troubles: number;
  rerolls: Reroll[];
  supplied_by: string | null;
}

export interface RollOff {
  sides: number;
  passes: [string, number][][];
}

export interface Combatant {
  id: string;
  name: string;
  controller: string | null;
  player_character: boolean;
  init_mod: number;
  dexterity: number;
  group: string | null;
  tags: string[];
  hidden: boolean;
  status: "active" | "defeated" | "removed";
  surprised: boolean;
  check: Check | null;
  place: number | null;
  reaction: boolean;
}

export interface Turn {
  round: number;
  combatant: string;
  kind: TurnKind;
  started_at: number;
  used: string[];
  deadline: number | null;
  warn_at: number | null;
  warned: boolean;
  refocus: boolean;
  number: number;
}

export interface Hold {
  combatant: string;
  seq: number;
  round: number;
  number: number | null;
  plan: "before" | "after" | "at" | null;
  target: string | null;
}

export interface Reservation {
  id: string;
  combatant: string;
  round: number;
  mode: "reserve" | "ready";
  reserved_type: string;
  action: Required<ActionSpec>;
  trigger: Trigger;
}

export interface Clock {
  anchor: string;
  boundary: Boundary;
  remaining: number;
  skip: boolean;
}

export interface Condition {
  id: string;
  type: string;
  target: string;
  source: string | null;
  clocks: Clock[];
  surprisers: string[];
  note: string;
}

export interface Claim {
  combatant: string;
  reservation: string | null;
  action: Required<ActionSpec>;
  reserved_round: number | null;
  faces: number[] | null;
  supplied_by: string | null;
}

export interface Window {
  id: string;
  facts: Required<TriggerFacts>;
  opened_at: number;
  deadline: number;
  offered: string[];
  action: Required<ActionSpec> | null;
  claims: Claim[];
  passes: string[];
  status: "open" | "resolving";
  sequence: string[];
  index: number;
}

/** A combat as one actor may see it. */
export interface View {
  combat_id: string;
  ruleset: string;
  phase: Phase;
  round: number | null;
  turn: Turn | null;
  combatants: Combatant[];
  order: string[];
  holds: Hold[];
  reservations: Reservation[];
  conditions: Condition[];
  window: Window | null;
  disabled_plugins: string[];
  /** The combat's rule options as they are now (set_turn_timer changes turn_time_limit),
   * every one with its value, as `[name, value]` pairs. */
  options: [string, string | number | boolean | null][];
  /** Combatants whose turn has come this round (started, or forgone). */
  reached: string[];
  /** marvel: who takes the bonus round. */
  bonus: string[];
}

// Events ----------------------------------------------------------------------------------------

/** An event as a command result or `history` carries it: `{seq, event, ...its fields}`.
 * With `narrate: true` in the options, `summary` tells it in the session's locale (null for
 * bookkeeping events). Fields by event name are in protocol.md. */
export interface RecordedEvent {
  seq: number;
  event: string;
  summary?: string | null;
  [field: string]: unknown;
}

/** An event as a subscription delivers it: a recorded event with its combat. */
export interface TurnkeeperEvent extends RecordedEvent {
  combat: string;
}

// Results ---------------------------------------------------------------------------------------

export interface Session {
  role: Role;
  user: string | null;
  /** The session's table: `"default"`, a table's id, or null for the operator (every table). */
  table: string | null;
  /** A hosting bridge: it makes tables and manages their tokens. */
  host: boolean;
  connection: string;
  /** The negotiated locale (`"en"`, `"pt-BR"`). */
  locale: string;
}

/** A table, as `createTable` and `listTables` answer (`created` is null for the default one). */
export interface TableRow {
  table: string;
  name: string;
  created: number | null;
}

export interface AddTokenParams {
  table: string;
  role: Role;
  user?: string;
  narrator?: boolean;
}

/** A token, as `addToken` and `listTokens` answer: never its secret, but `addToken`'s once. */
export interface TokenRow {
  id: string;
  table: string;
  role: Role;
  user: string | null;
  narrator: boolean;
  host: boolean;
  created: number;
}

export interface MethodInfo {
  name: string;
  kind: "session" | "query" | "table" | "command";
  since: number;
  summary: string;
}

export interface HelloResult {
  protocol: number;
  compatible: number;
  server: { name: string; version: string; [key: string]: unknown };
  session: Session;
  methods: MethodInfo[];
  events: { name: string; since: number }[];
  limits: {
    max_message_bytes: number;
    max_request_values: number;
    outbox_messages: number;
    max_history_page: number;
    max_combat_page: number;
  };
  [key: string]: unknown;
}

export type CombatRow =
  | { combat: string; ruleset: string; phase: Phase; round: number | null; seq: number }
  | { combat: string; quarantined: string };

export interface CombatSnapshot {
  combat: string;
  seq: number;
  view: View;
}

export interface HistoryPage {
  combat: string;
  seq: number;
  until: number;
  events: RecordedEvent[];
}

export interface CommandResult {
  combat: string;
  seq: number;
  events: RecordedEvent[];
}

export interface PluginInfo {
  name: string;
  version: string;
  hooks: string[];
  provides: string[];
  unknown_hooks: string[];
  /** The counters: the operator's only (a session of a table gets none). */
  calls?: number;
  errors?: number;
  timeouts?: number;
  blocked?: number;
  refused?: number;
  disabled?: number;
}

export interface PluginList {
  loaded: PluginInfo[];
  failed: { name: string; error: string }[];
  skipped: { name: string; reason: string }[];
}

// Params ----------------------------------------------------------------------------------------

/** What every command carries besides its own fields. */
export interface Envelope {
  /** The idempotency key; filled in (a UUID) when absent, and reused when the command is sent
   * again after a reconnect. */
  request_id?: string;
  /** Bridges: the user the command is for. */
  as?: string;
}

export interface CombatEnvelope extends Envelope {
  combat: string;
}

export interface CreateCombatParams extends Envelope {
  combat_id: string;
  ruleset: string;
  options?: [string, OptionValue][];
}
export interface AddCombatantParams extends CombatEnvelope {
  id: string;
  display_name: string;
  controller?: string | null;
  player_character?: boolean;
  init_mod?: number;
  dexterity?: number;
  group?: string | null;
  tags?: string[];
  hidden?: boolean;
  faces?: number[] | null;
}
export interface CombatantParams extends CombatEnvelope {
  combatant: string;
}
export interface RollInitiativeParams extends CombatantParams {
  faces?: number[] | null;
  edges?: number;
  troubles?: number;
}
export interface OrderTiesParams extends CombatEnvelope {
  combatants: string[];
}
export interface ReorderGroupParams extends CombatEnvelope {
  group: string;
  combatants: string[];
}
export interface TurnParams extends CombatEnvelope {
  turn: TurnRef;
}
export interface DeclareActionParams extends TurnParams {
  action: ActionSpec;
}
export interface HoldParams extends TurnParams {
  number?: number | null;
  /** The plan said with the hold (R9): just before or just after `other`. Both or neither. */
  when?: "before" | "after" | null;
  other?: string | null;
}
export interface TakeHeldTurnParams extends CombatantParams {
  when: "before" | "after";
  other: string;
}
export interface ReserveParams extends TurnParams {
  reserved_type: string;
  action: ActionSpec;
  trigger: Trigger;
}
export interface AnnounceTriggerParams extends CombatEnvelope {
  facts: TriggerFacts;
  offer?: string[];
}
export interface WindowParams extends CombatEnvelope {
  window: string;
}
export interface WindowCombatantParams extends WindowParams {
  combatant: string;
}
export interface ClaimReactionParams extends WindowCombatantParams {
  reservation?: string | null;
  action?: ActionSpec | null;
  faces?: number[] | null;
}
export interface ApplyConditionParams extends CombatEnvelope {
  target: string;
  type: string;
  rounds?: number;
  boundary?: Boundary;
  anchor?: string | null;
  source?: string | null;
  note?: string;
}
export interface RemoveConditionParams extends CombatEnvelope {
  condition: string;
}
export interface SurpriseParams extends CombatEnvelope {
  target: string;
  by: string[];
}
export interface RecordOutcomeParams extends CombatEnvelope {
  kind: string;
  text: string;
  combatant?: string | null;
  values?: [string, OptionValue][];
  /** What `text` was made of: `template` filled in with `args` must be `text`. With them the
   * daemon tells the outcome in each session's locale. */
  template?: string;
  args?: [string, OptionValue][];
}
export interface DisablePluginParams extends CombatEnvelope {
  plugin: string;
  reason?: string;
}
export interface EnablePluginParams extends CombatEnvelope {
  plugin: string;
}
export interface SetTurnTimerParams extends CombatEnvelope {
  /** Whole seconds, 1 to 86400, for the turns that start from now on; null: no timer (which
   * also stops the running turn's). */
  seconds: number | null;
}

// The client ------------------------------------------------------------------------------------

/** A WebSocket constructor: the browser's, Node's (`--experimental-websocket`), or `ws`. */
export type WebSocketConstructor = new (url: string) => WebSocket;

export interface ClientOptions {
  /** A token's secret (every WebSocket client needs one). */
  token?: string;
  /** BCP 47, e.g. `"pt-BR"`: error messages (and `summary` with `narrate`) come in it. */
  locale?: string;
  /** Every event carries `summary`: the event told as one line in the session's locale. */
  narrate?: boolean;
  /** Who the client is, told at hello (default `"turnkeeper-js"`). */
  name?: string;
  /** What kind of client, told at hello (default `"tool"`; e.g. `"bridge"`). */
  kind?: string;
  /** Reconnect after a drop (default true); false: a drop closes the client. */
  reconnect?: boolean;
  /** Milliseconds to keep trying to reconnect (default `RECONNECT_TIMEOUT_MS`, 30 s);
   * `Infinity` keeps trying for as long as the client is open (a page left on a table). */
  reconnectTimeout?: number;
  /** Milliseconds a request waits for its answer (default `CALL_TIMEOUT_MS`, 30 s). */
  callTimeout?: number;
  /** Unread events a subscription holds before it fails `too_far_behind` (default 1024). */
  eventBuffer?: number;
  /** The WebSocket constructor to use instead of `globalThis.WebSocket`. */
  WebSocket?: WebSocketConstructor;
}

export type Status = "open" | "reconnecting" | "closed";

/** A refusal from the daemon (`code`, `message`, `field` as protocol.md says) or a failure of
 * the client itself (`LOCAL_CODES`). */
export class TurnkeeperError extends Error {
  constructor(
    code: string,
    message: string,
    field?: string,
    extra?: { requestId?: string; seqs?: Record<string, number>; fatal?: boolean },
  );
  readonly name: "TurnkeeperError";
  readonly code: string;
  readonly field: string;
  /** A command interrupted by `connection_lost`, `call_timeout` or `client_closed`: it may or
   * may not have been applied; sending it again with this `request_id` is safe. */
  readonly requestId: string | undefined;
  /** `too_far_behind` from a subscription: the last seq delivered per combat. */
  readonly seqs: Record<string, number> | undefined;
  /** An error notification after which the daemon closes the connection. */
  readonly fatal: boolean;
}

export const LOCAL_CODES: Readonly<{
  CONNECTION_LOST: "connection_lost";
  CLIENT_CLOSED: "client_closed";
  CALL_TIMEOUT: "call_timeout";
  TOO_MANY_REQUESTS: "too_many_requests";
  TOO_FAR_BEHIND: "too_far_behind";
}>;

/** The events of one combat (`subscribe`) or of every combat (`subscribeAll`), in seq order
 * per combat, each once. Iterate with `for await`; leaving the loop early closes it. Iteration
 * ends after `close()`/`unsubscribe`; it throws `too_far_behind` (buffer full, or too far behind
 * to resume after a reconnect), `connection_lost` or `client_closed` once the events buffered
 * before the failure have been read. */
export class Subscription implements AsyncIterableIterator<TurnkeeperEvent> {
  /** The combat followed, or null for every combat. */
  readonly combat: string | null;
  /** The daemon's answer: `{combat, seq}` for `subscribe`, `{seqs, until, more}` for
   * `subscribeAll`, whose `seqs` the client completes from `listCombats` page by page. */
  readonly result:
    | { combat: string; seq: number }
    | { seqs: Record<string, number>; until?: string | null; more?: boolean };
  /** Whether it has ended. */
  readonly closed: boolean;
  [Symbol.asyncIterator](): AsyncIterableIterator<TurnkeeperEvent>;
  next(): Promise<IteratorResult<TurnkeeperEvent, undefined>>;
  return(): Promise<IteratorResult<TurnkeeperEvent, undefined>>;
  /** Stop following; the daemon is told (best effort). */
  close(): Promise<void>;
}

export class Client {
  /** Connect, say hello, and keep the session up until `close()`. Rejects with the daemon's
   * refusal of hello (`unauthenticated`, ...) or `connection_lost`. */
  static connect(url: string, options?: ClientOptions): Promise<Client>;
  private constructor(url: string, options: ClientOptions);

  readonly url: string;
  readonly callTimeout: number;
  readonly reconnectTimeout: number;
  readonly eventBuffer: number;
  /** The whole result of the current connection's hello. */
  readonly helloResult: HelloResult;
  /** The current session, from its hello. */
  readonly session: Session;
  readonly status: Status;

  /** Listen to status changes; returns a function removing the listener. */
  onStatus(listener: (status: Status, error?: TurnkeeperError) => void): () => void;
  /** Listen to the daemon's error notifications (`fatal`: the connection closes next). */
  onError(listener: (error: TurnkeeperError) => void): () => void;
  /** Close: waiting calls and subscriptions end with `client_closed`. */
  close(): void;
  /** Any query or command by its wire name; commands get a `request_id` when absent. */
  call(method: string, params?: Record<string, unknown>): Promise<any>;

  // Session and queries
  hello(): Promise<HelloResult>;
  /** Combats in id order after `after`: one page with `limit`, else every one, page by page. */
  listCombats(params?: { after?: string; limit?: number }): Promise<CombatRow[]>;
  getCombat(params: { combat: string }): Promise<CombatSnapshot>;
  history(params: { combat: string; after?: number; limit?: number }): Promise<HistoryPage>;
  subscribe(params: { combat: string; after?: number }): Promise<Subscription>;
  unsubscribe(params: { combat: string }): Promise<{ combat: string }>;
  subscribeAll(): Promise<Subscription>;
  unsubscribeAll(): Promise<Record<string, never>>;
  listPlugins(): Promise<PluginList>;

  // Tables: the operator's, and a hosting bridge's for the tables it manages
  createTable(params: { name: string }): Promise<TableRow>;
  listTables(): Promise<TableRow[]>;
  addToken(params: AddTokenParams): Promise<TokenRow & { secret: string }>;
  listTokens(params: { table: string }): Promise<TokenRow[]>;
  revokeToken(params: { table: string; id: string }): Promise<{ id: string; table: string }>;

  // Commands
  createCombat(params: CreateCombatParams): Promise<CommandResult>;
  addCombatant(params: AddCombatantParams): Promise<CommandResult>;
  removeCombatant(params: CombatantParams): Promise<CommandResult>;
  defeatCombatant(params: CombatantParams): Promise<CommandResult>;
  reviveCombatant(params: CombatantParams): Promise<CommandResult>;
  revealCombatant(params: CombatantParams): Promise<CommandResult>;
  markSurprised(params: CombatantParams): Promise<CommandResult>;
  rollInitiative(params: RollInitiativeParams): Promise<CommandResult>;
  orderTies(params: OrderTiesParams): Promise<CommandResult>;
  reorderGroup(params: ReorderGroupParams): Promise<CommandResult>;
  startCombat(params: CombatEnvelope): Promise<CommandResult>;
  endTurn(params: TurnParams): Promise<CommandResult>;
  declareAction(params: DeclareActionParams): Promise<CommandResult>;
  hold(params: HoldParams): Promise<CommandResult>;
  takeHeldTurn(params: TakeHeldTurnParams): Promise<CommandResult>;
  reserve(params: ReserveParams): Promise<CommandResult>;
  refocus(params: TurnParams): Promise<CommandResult>;
  announceTrigger(params: AnnounceTriggerParams): Promise<CommandResult>;
  claimReaction(params: ClaimReactionParams): Promise<CommandResult>;
  passReaction(params: WindowCombatantParams): Promise<CommandResult>;
  closeWindow(params: WindowParams): Promise<CommandResult>;
  finishReaction(params: WindowCombatantParams): Promise<CommandResult>;
  applyCondition(params: ApplyConditionParams): Promise<CommandResult>;
  removeCondition(params: RemoveConditionParams): Promise<CommandResult>;
  surprise(params: SurpriseParams): Promise<CommandResult>;
  recordOutcome(params: RecordOutcomeParams): Promise<CommandResult>;
  disablePlugin(params: DisablePluginParams): Promise<CommandResult>;
  enablePlugin(params: EnablePluginParams): Promise<CommandResult>;
  setTurnTimer(params: SetTurnTimerParams): Promise<CommandResult>;
  tick(params: CombatEnvelope): Promise<CommandResult>;
  undo(params: CombatEnvelope): Promise<CommandResult>;
  endCombat(params: CombatEnvelope): Promise<CommandResult>;
}

export const SESSION_METHODS: readonly string[];
export const QUERY_METHODS: readonly string[];
export const TABLE_METHODS: readonly string[];
export const COMMAND_METHODS: readonly string[];
/** Every protocol method by wire name; the client has one camelCase function for each. */
export const METHODS: readonly string[];
export function camelCase(name: string): string;

export const PROTOCOL_VERSION: 1;
export const CALL_TIMEOUT_MS: number;
export const CONNECT_TIMEOUT_MS: number;
export const RECONNECT_TIMEOUT_MS: number;
export const BACKOFF_FIRST_MS: number;
export const BACKOFF_MAX_MS: number;
export const MAX_SENDS: number;
export const EVENT_BUFFER: number;
export const MAX_PENDING: number;
