// The table view: sign in with a token, pick a combat, then follow it live over the daemon's
// WebSocket with the JavaScript client. The view comes from get_combat and is read again after
// each command's events (the daemon folds and filters it, R16); the log is the events' own
// narration (their `summary`) in the session's language (hello's narrate and locale).

import { Client, LOCAL_CODES } from "/client/index.js";
import { controls } from "./controls.js";
import { clock, field, h, rebuildKeepingInput, select } from "./dom.js";
import { LOCALES, locale, t, useLocale } from "./i18n.js";
import { Scene, conditions, holds, order, reactionWindow, reservations, rules, summary } from "./render.js";
import { MAX_ID, createCombatForm } from "./setup.js";

/** Events of the past the log shows when a combat is opened: a few rounds, one history page. */
const LOG_BACKLOG = 200;
/** Lines the log keeps; older ones drop off the top, so a long combat never grows the page. */
const MAX_LOG_LINES = 500;
/** One command's events arrive together: the view is read again once for all of them. */
const REFRESH_DELAY_MS = 40;
/** How often countdowns are redrawn. */
const TICK_MS = 250;
/** Where this tab keeps its token (sessionStorage: the tab's own, gone when it closes). */
const TOKEN_KEY = "turnkeeper.token";
/** How long the page's client keeps trying to reconnect: for ever. A page left open at the table
 * should come back by itself whenever the daemon does, however long it was away; a client that
 * still ends up closed (its token refused) leaves the Reconnect button. */
const RECONNECT_TIMEOUT_MS = Infinity;
/** The codes the JavaScript client gives failures it raises itself (errors.js): their messages
 * are the client's English, so the page says them in its own words. */
const OWN_CODES = new Set([...Object.values(LOCAL_CODES), "already_subscribed", "message_too_large"]);
/** Failures after which a command may or may not have been applied: the same command sent again
 * with the request_id it first had is applied at most once (the daemon answers a repeat from
 * its memory), so a retried Undo undoes one command, not two. */
const INTERRUPTED = new Set([LOCAL_CODES.CALL_TIMEOUT, LOCAL_CODES.CONNECTION_LOST]);

const root = document.getElementById("app");

const app = {
  client: null,
  session: null,
  combats: [],
  combat: null,
  view: null,
  seq: 0,
  subscription: null,
  log: [],
  lastLogged: 0,
  refreshing: false,
  again: false,
  refreshTimer: null,
  controlsKey: null,
  busy: false,
  opening: false,
  // The command last interrupted (INTERRUPTED): its method and parameters as a key, its request_id.
  interrupted: null,
  // The daemon's clock minus the page's, in seconds, learnt from live events' times: the turn
  // timer and window deadlines are the daemon's epoch seconds (protocol.md, Time).
  offset: null,
  fragment: new URLSearchParams(location.hash.slice(1)),
  parts: {},
};

// Sign-in --------------------------------------------------------------------------------------

function header(...right) {
  return h("header", { class: "bar" },
    h("div", { class: "brand" }, h("img", { src: "/favicon.svg", alt: "", class: "logo" }),
      h("span", null, "Turnkeeper"), h("span", { class: "brand-sub" }, t("Table view"))),
    h("div", { class: "bar-right" }, right));
}

function errorBox() {
  app.parts.error = h("div", { class: "error-slot" });
  return app.parts.error;
}

function showSignIn(token) {
  app.parts = {};
  const tokenInput = h("input", {
    type: "password", name: "token", required: true, autocomplete: "off", spellcheck: "false",
    value: token || "", "data-testid": "token",
  });
  const language = select({ name: "locale", "data-testid": "locale" }, LOCALES, locale());
  language.addEventListener("change", async () => {
    await useLocale(language.value);
    showSignIn(tokenInput.value);
  });
  const submit = async (event) => {
    event.preventDefault();
    const button = event.target.querySelector('[data-testid="sign-in"]');
    button.disabled = true;
    await signIn(tokenInput.value.trim(), language.value);
    button.disabled = false;
  };
  document.title = t("Turnkeeper table view");
  root.replaceChildren(header(),
    h("main", { class: "center" },
      h("form", { class: "card", "data-testid": "signin", onsubmit: submit },
        h("h1", null, t("Join the table")),
        h("p", { class: "muted" }, t("Sign in with the token your narrator gave you.")),
        errorBox(),
        field(t("Token"), tokenInput),
        field(t("Language"), language),
        h("div", { class: "row end" },
          h("button", { type: "submit", class: "button primary", "data-testid": "sign-in" }, t("Sign in"))))));
  if (!token) tokenInput.focus();
}

function connect(token, wanted) {
  const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws";
  return Client.connect(url, {
    token, locale: wanted, narrate: true, name: "table-view", kind: "page", reconnect: true,
    reconnectTimeout: RECONNECT_TIMEOUT_MS,
  });
}

async function signIn(token, wanted) {
  clearError();
  // Signing in again: the session before is over, its combat no longer followed.
  await dropClient();
  let client;
  try {
    client = await connect(token, wanted);
  } catch (error) {
    sessionStorage.removeItem(TOKEN_KEY);
    showError(error);
    return;
  }
  await adopt(client, token);
  await showCombats(app.fragment.get("combat"));
}

/** Closes the page's client, if any, and forgets its session. */
async function dropClient() {
  await closeCombat();
  const client = app.client;
  app.client = null;
  app.session = null;
  client?.close();
}

/** Makes a newly signed-in client the page's, closing the one before it (a sign-in that
 * finished meanwhile, or the client that gave up). */
async function adopt(client, token) {
  await dropClient();
  app.client = client;
  sessionStorage.setItem(TOKEN_KEY, token);
  app.session = client.session;
  // Only the page's current client speaks for the connection: a closed one has nothing to say.
  client.onStatus((status) => {
    if (app.client === client) showStatus(status);
  });
  // The daemon negotiated the session's language; the page speaks the same one.
  if (app.session.locale && app.session.locale !== locale()) await useLocale(app.session.locale);
}

/** The Reconnect button: signs in again with the tab's token and goes back to the combat shown.
 * A token the daemon now refuses is forgotten, back to the sign-in form; a daemon still away
 * leaves the page as it is, to try again. */
async function reconnect(button) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) {
    await signOut();
    return;
  }
  const combat = app.combat;
  clearError();
  button.disabled = true;
  let client;
  try {
    client = await connect(token, locale());
  } catch (error) {
    button.disabled = false;
    if (!OWN_CODES.has(error.code)) {
      await signOut();
    }
    showError(error);
    return;
  }
  await adopt(client, token);
  await showCombats(combat);
}

function roleText(session) {
  if (session.role === "narrator") return t("Narrator");
  if (session.role === "player") return t("Player {user}", { user: session.user });
  if (session.role === "observer") return t("Observer");
  return t("Bridge");
}

/** A combat's id as people read it: without the `TABLE/` its session's own table puts before
 * every id (the whole id stays the picker's value and the link's). */
function combatName(combat) {
  const table = app.session?.table;
  const prefix = table && table !== "default" ? table + "/" : null;
  return prefix && combat.startsWith(prefix) ? combat.slice(prefix.length) : combat;
}

/** The session's table, for the header: none for the default table or the operator's. */
function tableBadge(session) {
  if (!session.table || session.table === "default") return null;
  return h("span", { class: "who", "data-testid": "table" }, t("Table {id}", { id: session.table }));
}

function combatText(row) {
  const name = combatName(row.combat);
  if (row.quarantined) return name + " · " + t("unreadable");
  let where;
  if (row.phase === "ended") where = t("over");
  else if (row.round === 0) where = t("bonus round");
  else if (row.round !== null && row.round !== undefined) where = t("round {n}", { n: row.round });
  else where = t("not started");
  return name + " · " + row.ruleset + " · " + where;
}

/** Lists the combats, then opens the one wanted (the link's) if there is one, else shows the
 * picker. */
async function showCombats(wanted) {
  await closeCombat();
  app.parts = {};
  const client = app.client;
  let combats;
  try {
    combats = await client.listCombats();
  } catch (error) {
    if (app.client !== client) return; // signed in again meanwhile
    app.combats = [];
    showPicker({ error });
    return;
  }
  if (app.client !== client) return;
  app.combats = combats;
  if (wanted && app.combats.some((row) => row.combat === wanted && !row.quarantined)) {
    await openCombat(wanted);
    return;
  }
  showPicker({ missing: wanted });
}

/** The picker of the combats listed last; `missing` is a combat asked for that is not there,
 * `chosen` the one to preselect, `error` what went wrong (opening one, say). */
function showPicker({ missing = null, chosen = null, error = null } = {}) {
  app.parts = {};
  const usable = app.combats.filter((row) => !row.quarantined);
  const preselected = usable.some((row) => row.combat === chosen) ? chosen : usable[0]?.combat ?? null;
  const choice = select({ name: "combat", "data-testid": "combat" },
    app.combats.map((row) => [row.combat, combatText(row)]), preselected);
  const open = h("button", { type: "submit", class: "button primary", "data-testid": "open", disabled: !usable.length },
    t("Show combat"));
  const submit = async (event) => {
    event.preventDefault();
    if (!choice.value || open.disabled) return;
    // Opening takes a few calls: a second click meanwhile would open the combat twice.
    open.disabled = true;
    await openCombat(choice.value);
    open.disabled = false;
  };
  document.title = t("Turnkeeper table view");
  root.replaceChildren(header(sessionBadge(), signOutButton()),
    h("main", { class: "center" },
      h("form", { class: "card", "data-testid": "pick", onsubmit: submit },
        h("h1", null, t("Choose a combat")),
        errorBox(),
        missing ? h("p", { class: "notice" }, t("There is no combat {id} here.", { id: missing })) : null,
        app.combats.length ? field(t("Combat"), choice) : h("p", { class: "empty" }, t("No combats yet.")),
        h("div", { class: "row end" },
          h("button", { type: "button", class: "button", onclick: () => showCombats(null) }, t("Refresh")),
          open)),
      app.session.role === "narrator" ? createCombatForm(createCombat, refuse) : null));
  if (error) showError(error);
}

/** Opens a new combat (create_combat) and shows it; a refusal stays on the picker, the form
 * keeping what was typed. */
async function createCombat(params) {
  clearError();
  const client = app.client;
  // A table's combats are named `TABLE/NAME` (protocol.md, Tables): people type the name, as
  // the picker shows it.
  const table = app.session?.table;
  const prefix = table && table !== "default" ? table + "/" : "";
  const combat = prefix && !params.combat_id.startsWith(prefix) ? prefix + params.combat_id : params.combat_id;
  if (combat.length > MAX_ID) {
    return refuse(t("A combat's name here is at most {n} characters.", { n: MAX_ID - prefix.length }));
  }
  try {
    await client.createCombat({ ...params, combat_id: combat });
  } catch (error) {
    if (app.client === client) showError(error);
    return;
  }
  if (app.client !== client) return;
  await showCombats(combat);
}

function sessionBadge() {
  app.parts.status = h("span", { class: "status", role: "status", "data-testid": "status" });
  const again = h("button", {
    type: "button", class: "button small primary", "data-testid": "reconnect", hidden: true,
    onclick: () => reconnect(again),
  }, t("Reconnect"));
  app.parts.reconnect = again;
  showStatus(app.client.status);
  return [app.parts.status, again, h("span", { class: "who", "data-testid": "role" }, roleText(app.session)),
    tableBadge(app.session)];
}

async function signOut() {
  await dropClient();
  sessionStorage.removeItem(TOKEN_KEY);
  showSignIn("");
}

function signOutButton() {
  return h("button", { type: "button", class: "button small", "data-testid": "sign-out", onclick: signOut }, t("Sign out"));
}

function showStatus(status) {
  // TRANSLATORS: "Live" is the connection's state: the page follows the combat as it happens.
  const words = { open: t("Live"), reconnecting: t("Reconnecting…"), closed: t("Disconnected") };
  const element = app.parts.status;
  if (!element) return;
  element.textContent = words[status] || status;
  element.dataset.state = status;
  // The client gave up (its token refused on reconnecting): only signing in again helps.
  app.parts.reconnect.hidden = status !== "closed";
  if (app.parts.controls) app.parts.controls.disabled = !mayCommand();
  if (status === "open" && app.combat) scheduleRefresh();
}

/** Whether the controls may be used: connected, and no command of theirs still going. While
 * reconnecting a command would wait for the daemon, and the turn it names may be over by then. */
function mayCommand() {
  return !app.busy && app.client !== null && app.client.status === "open";
}

// The combat -----------------------------------------------------------------------------------

/** Shows a combat and follows it; if that fails, the picker says why. */
async function openCombat(combat) {
  if (app.opening) return;
  app.opening = true;
  const client = app.client;
  try {
    await openAndFollow(combat);
  } catch (error) {
    if (app.client !== client) return; // signed in again, or out, meanwhile
    await closeCombat();
    showPicker({ chosen: combat, error });
  } finally {
    app.opening = false;
  }
}

async function openAndFollow(combat) {
  clearError();
  const got = await app.client.getCombat({ combat });
  app.combat = combat;
  app.view = got.view;
  app.seq = got.seq;
  app.log = [];
  app.lastLogged = 0;
  app.controlsKey = null;
  rememberInFragment(combat);
  layout();
  draw();
  // Screen readers announce what the log gains live, not the past it starts with.
  app.parts.log.setAttribute("aria-busy", "true");
  await readBacklog(combat, got.seq);
  app.parts.log.removeAttribute("aria-busy");
  const subscription = await app.client.subscribe({ combat, after: got.seq });
  if (app.combat !== combat) {
    // Left for another combat, or signed out, while this one was being opened.
    await subscription.close().catch(() => {});
    return;
  }
  app.subscription = subscription;
  follow(subscription);
}

async function closeCombat() {
  const subscription = app.subscription;
  app.subscription = null;
  app.combat = null;
  clearTimeout(app.refreshTimer);
  if (subscription) await subscription.close().catch(() => {});
}

/** The fragment names the combat and language, so a reload comes back here; a token the
 * fragment did not carry is never written into it. */
function rememberInFragment(combat) {
  app.fragment.set("combat", combat);
  app.fragment.set("locale", locale());
  history.replaceState(null, "", "#" + app.fragment.toString());
}

async function readBacklog(combat, seq) {
  let after = Math.max(0, seq - LOG_BACKLOG);
  try {
    while (after < seq) {
      const page = await app.client.history({ combat, after, limit: LOG_BACKLOG });
      page.events.forEach(logEvent);
      if (page.until <= after) break;
      after = page.until;
    }
  } catch (error) {
    showError(error);
  }
}

async function follow(subscription) {
  try {
    for await (const event of subscription) {
      learnClock(event);
      logEvent(event);
      scheduleRefresh();
    }
  } catch (error) {
    if (app.subscription !== subscription) return; // closed on purpose
    app.subscription = null;
    await subscription.close().catch(() => {});
    if (error.code === "too_far_behind") {
      // Too far behind to catch up: start over from the combat as it is now.
      openCombat(app.combat);
    } else showError(error);
  }
}

function learnClock(event) {
  const at = event.event === "window_opened" ? event.window.opened_at : event.at;
  if (typeof at !== "number") return;
  // Delivery only delays an event, so the largest difference seen is the closest to the truth.
  const seen = at - Date.now() / 1000;
  app.offset = app.offset === null ? seen : Math.max(app.offset, seen);
}

function scheduleRefresh() {
  clearTimeout(app.refreshTimer);
  app.refreshTimer = setTimeout(refresh, REFRESH_DELAY_MS);
}

async function refresh() {
  if (app.refreshing) {
    app.again = true;
    return;
  }
  app.refreshing = true;
  try {
    do {
      app.again = false;
      const combat = app.combat;
      if (!combat) break;
      const got = await app.client.getCombat({ combat });
      if (combat === app.combat && got.seq >= app.seq) {
        app.view = got.view;
        app.seq = got.seq;
        draw();
      }
    } while (app.again);
  } catch (error) {
    showError(error);
  } finally {
    app.refreshing = false;
  }
}

function layout() {
  app.parts = {};
  const log = h("ol", { class: "log", "aria-live": "polite", "aria-relevant": "additions", "data-testid": "log-lines" });
  app.parts.log = log;
  app.parts.summary = h("div");
  app.parts.order = h("div");
  app.parts.controls = h("fieldset", { class: "bare" });
  app.parts.window = h("div");
  app.parts.holds = h("div");
  app.parts.reservations = h("div");
  app.parts.conditions = h("div");
  app.parts.rules = h("div");
  const change = () => showCombats(null);
  document.title = "Turnkeeper · " + app.combat;
  root.replaceChildren(
    header(sessionBadge(),
      h("button", { type: "button", class: "button small", "data-testid": "change-combat", onclick: change }, t("Change combat")),
      signOutButton()),
    h("main", { class: "table", "data-testid": "table" },
      errorBox(),
      app.parts.summary,
      h("div", { class: "columns" },
        h("div", { class: "main-column" },
          app.parts.order,
          h("section", { class: "panel", "data-testid": "log", "aria-label": t("Narration") },
            h("h2", null, t("Narration")), log)),
        h("div", { class: "side-column" },
          app.parts.window, app.parts.controls, app.parts.holds, app.parts.reservations, app.parts.conditions,
          app.parts.rules))));
}

/** What the controls depend on: while it is unchanged they are left alone. When it changes
 * they are drawn again, and what was typed into a form still about the same turn, hold or
 * window is put back (rebuildKeepingInput). */
function controlsKey(view) {
  const w = view.window;
  const turn = view.turn;
  return JSON.stringify([
    locale(), view.phase,
    turn && [turn.number, turn.combatant, turn.kind, turn.used, turn.refocus],
    view.holds,
    view.reservations.map((r) => r.id),
    w && [w.id, w.status, w.offered, w.claims.map((c) => c.combatant), w.passes, w.sequence, w.index],
    view.combatants.map((c) => [c.id, c.status, c.controller, c.hidden, c.surprised, c.group, c.check && c.check.total,
      c.reaction]),
    view.order, view.conditions.map((c) => c.id),
    // The moments a held turn may name, and what the rule options let the forms offer.
    view.reached, view.options,
  ]);
}

function draw() {
  const scene = new Scene(app.view, app.session);
  app.parts.summary.replaceChildren(summary(scene));
  app.parts.order.replaceChildren(order(scene));
  app.parts.window.replaceChildren(reactionWindow(scene) ?? "");
  app.parts.holds.replaceChildren(holds(scene));
  app.parts.reservations.replaceChildren(reservations(scene));
  app.parts.conditions.replaceChildren(conditions(scene));
  app.parts.rules.replaceChildren(rules(scene) ?? "");
  const key = controlsKey(app.view);
  if (key !== app.controlsKey) {
    app.controlsKey = key;
    rebuildKeepingInput(app.parts.controls, () => controls(scene, run, refuse));
  }
  app.parts.controls.disabled = !mayCommand();
  document.body.dataset.seq = String(app.seq);
  tick();
}

function logEvent(event) {
  if (event.seq <= app.lastLogged) return;
  app.lastLogged = event.seq;
  // `summary` is the event told in the session's language (hello's narrate); nil for bookkeeping.
  const told = event.summary;
  if (typeof told !== "string" || !told.trim()) return;
  // The narration indents what happens within a turn; the page keeps the depth as a margin.
  const depth = Math.min(3, Math.floor((told.length - told.trimStart().length) / 2));
  const line = h("li", { class: "depth-" + depth, "data-seq": event.seq, "data-event": event.event }, told.trim());
  app.log.push(line);
  app.parts.log.append(line);
  while (app.log.length > MAX_LOG_LINES) app.log.shift().remove();
  app.parts.log.scrollTop = app.parts.log.scrollHeight;
}

/** Sends a command for the open combat; a refusal shows the daemon's message. Resolves to
 * whether the command was accepted. */
async function run(method, params) {
  clearError();
  const sent = { combat: app.combat, ...params };
  const key = JSON.stringify([method, sent]);
  // The interrupted command again (its Retry, or its button once more): the same request_id.
  if (app.interrupted?.key === key) sent.request_id = app.interrupted.requestId;
  app.interrupted = null;
  app.busy = true;
  app.parts.controls.disabled = true;
  document.body.dataset.busy = "1";
  try {
    await app.client[method](sent);
    return true;
  } catch (error) {
    let retry = null;
    if (INTERRUPTED.has(error.code) && error.requestId) {
      app.interrupted = { key, requestId: error.requestId };
      retry = () => run(method, params);
    }
    showError(error, retry);
    return false;
  } finally {
    app.busy = false;
    if (app.parts.controls) app.parts.controls.disabled = !mayCommand();
    delete document.body.dataset.busy;
    scheduleRefresh();
  }
}

/** Why the page will not send what a control was given (not the daemon's refusal). */
function refuse(text) {
  showError({ code: "", message: text });
}

/** An error in the page's language: the daemon's come localized by the session; the client's
 * own failures come in its English, so the page words those itself (their message stays in the
 * title, for whoever debugs). */
function errorText(error) {
  if (!error || !error.message) return String(error);
  const own = {
    connection_lost: t("The connection to Turnkeeper was lost, or could not be made."),
    client_closed: t("The connection to Turnkeeper was closed."),
    call_timeout: t("Turnkeeper did not answer in time. Try again."),
    too_many_requests: t("Too many requests are waiting for Turnkeeper's answer. Wait a moment."),
    too_far_behind: t("The page fell too far behind the combat. Show it again."),
    already_subscribed: t("This page follows that combat already."),
    message_too_large: t("That is too long to send."),
  };
  return OWN_CODES.has(error.code) ? own[error.code] : error.message;
}

/** Shows an error; `retry`, if given, sends the interrupted command again (see run). */
function showError(error, retry) {
  const slot = app.parts.error;
  if (!slot) return;
  const code = (error && error.code) || "";
  const again = () => {
    if (mayCommand()) retry();
  };
  const box = h("div", { class: "error", role: "alert", "data-testid": "error", "data-code": code },
    h("span", { "data-testid": "error-message", title: OWN_CODES.has(code) ? error.message : null }, errorText(error)),
    h("div", { class: "row" },
      retry ? h("button", { type: "button", class: "button small primary", "data-testid": "retry", onclick: again }, t("Retry")) : null,
      h("button", { type: "button", class: "button small", onclick: clearError }, t("Dismiss"))));
  slot.replaceChildren(box);
}

function clearError() {
  if (app.parts.error) app.parts.error.replaceChildren();
}

// Countdowns -----------------------------------------------------------------------------------

function tick() {
  const now = Date.now() / 1000 + (app.offset ?? 0);
  for (const element of document.querySelectorAll("[data-deadline]")) {
    const deadline = Number(element.dataset.deadline);
    const since = Number(element.dataset.since);
    // Until a live event has told the daemon's time, the page's own clock stands in for it,
    // never showing more than the whole limit.
    const left = Math.max(0, Math.min(deadline - since, deadline - now));
    element.textContent = clock(left);
    element.classList.toggle("urgent", left <= Number(element.dataset.warn || 0));
    element.classList.toggle("done", left <= 0);
  }
}

setInterval(tick, TICK_MS);

async function start() {
  try {
    await useLocale(app.fragment.get("locale") || navigator.language);
  } catch {
    await useLocale("en");
  }
  // A token that came in the link leaves the address bar and the history at once: it is kept
  // for this tab only, and signing out forgets it.
  const linked = app.fragment.get("token");
  if (linked) {
    sessionStorage.setItem(TOKEN_KEY, linked);
    app.fragment.delete("token");
    history.replaceState(null, "", "#" + app.fragment.toString());
  }
  const token = sessionStorage.getItem(TOKEN_KEY);
  showSignIn(token);
  if (token) await signIn(token, locale());
}

start();
