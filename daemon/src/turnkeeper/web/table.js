// The table view: sign in with a token, pick a combat, then follow it live over the daemon's
// WebSocket with the JavaScript client. The view comes from get_combat and is read again after
// each command's events (the daemon folds and filters it, R16); the log is the events' own
// narration (their `summary`) in the session's language (hello's narrate and locale).

import { Client } from "/client/index.js";
import { controls } from "./controls.js";
import { clock, field, h, select } from "./dom.js";
import { LOCALES, locale, t, useLocale } from "./i18n.js";
import { Scene, conditions, holds, order, reactionWindow, reservations, summary } from "./render.js";

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

async function signIn(token, wanted) {
  clearError();
  const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws";
  let client;
  try {
    client = await Client.connect(url, {
      token, locale: wanted, narrate: true, name: "table-view", kind: "page", reconnect: true,
    });
  } catch (error) {
    sessionStorage.removeItem(TOKEN_KEY);
    showError(error);
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  app.client = client;
  app.session = client.session;
  client.onStatus((status) => showStatus(status));
  // The daemon negotiated the session's language; the page speaks the same one.
  if (app.session.locale && app.session.locale !== locale()) await useLocale(app.session.locale);
  await showCombats(app.fragment.get("combat"));
}

function roleText(session) {
  if (session.role === "narrator") return t("Narrator");
  if (session.role === "player") return t("Player {user}", { user: session.user });
  if (session.role === "observer") return t("Observer");
  return t("Bridge");
}

function combatText(row) {
  if (row.quarantined) return row.combat + " · " + t("unreadable");
  let where;
  if (row.phase === "ended") where = t("over");
  else if (row.round === 0) where = t("bonus round");
  else if (row.round !== null && row.round !== undefined) where = t("round {n}", { n: row.round });
  else where = t("not started");
  return row.combat + " · " + row.ruleset + " · " + where;
}

async function showCombats(wanted) {
  await closeCombat();
  app.parts = {};
  try {
    app.combats = await app.client.listCombats();
  } catch (error) {
    app.combats = [];
    showError(error);
  }
  const usable = app.combats.filter((row) => !row.quarantined);
  if (wanted && usable.some((row) => row.combat === wanted)) {
    await openCombat(wanted);
    return;
  }
  const choice = select({ name: "combat", "data-testid": "combat" },
    app.combats.map((row) => [row.combat, combatText(row)]), usable.length ? usable[0].combat : null);
  const submit = (event) => {
    event.preventDefault();
    if (choice.value) openCombat(choice.value);
  };
  document.title = t("Turnkeeper table view");
  root.replaceChildren(header(sessionBadge(), signOutButton()),
    h("main", { class: "center" },
      h("form", { class: "card", "data-testid": "pick", onsubmit: submit },
        h("h1", null, t("Choose a combat")),
        errorBox(),
        wanted ? h("p", { class: "notice" }, t("There is no combat {id} here.", { id: wanted })) : null,
        app.combats.length ? field(t("Combat"), choice) : h("p", { class: "empty" }, t("No combats yet.")),
        h("div", { class: "row end" },
          h("button", { type: "button", class: "button", onclick: () => showCombats(null) }, t("Refresh")),
          h("button", { type: "submit", class: "button primary", "data-testid": "open", disabled: !usable.length },
            t("Show combat"))))));
}

function sessionBadge() {
  app.parts.status = h("span", { class: "status", role: "status", "data-testid": "status" });
  showStatus("open");
  return [app.parts.status, h("span", { class: "who", "data-testid": "role" }, roleText(app.session))];
}

function signOutButton() {
  const out = async () => {
    await closeCombat();
    app.client.close();
    app.client = null;
    app.session = null;
    sessionStorage.removeItem(TOKEN_KEY);
    showSignIn("");
  };
  return h("button", { type: "button", class: "button small", "data-testid": "sign-out", onclick: out }, t("Sign out"));
}

function showStatus(status) {
  // TRANSLATORS: "Live" is the connection's state: the page follows the combat as it happens.
  const words = { open: t("Live"), reconnecting: t("Reconnecting…"), closed: t("Disconnected") };
  const element = app.parts.status;
  if (!element) return;
  element.textContent = words[status] || status;
  element.dataset.state = status;
  if (status === "open" && app.combat) scheduleRefresh();
}

// The combat -----------------------------------------------------------------------------------

async function openCombat(combat) {
  clearError();
  let got;
  try {
    got = await app.client.getCombat({ combat });
  } catch (error) {
    showError(error);
    return;
  }
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
  try {
    app.subscription = await app.client.subscribe({ combat, after: got.seq });
  } catch (error) {
    showError(error);
    return;
  }
  follow(app.subscription);
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
          app.parts.window, app.parts.controls, app.parts.holds, app.parts.reservations, app.parts.conditions))));
}

/** What the controls depend on: while it is unchanged they are left alone, so a form being
 * filled in is not wiped by an unrelated event. */
function controlsKey(view) {
  const w = view.window;
  return JSON.stringify([
    locale(), view.phase, view.turn && [view.turn.number, view.turn.combatant], view.holds,
    view.reservations.map((r) => r.id),
    w && [w.id, w.status, w.offered, w.claims.map((c) => c.combatant), w.passes, w.index],
    view.combatants.map((c) => [c.id, c.status]), view.order,
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
  const key = controlsKey(app.view);
  if (key !== app.controlsKey) {
    app.controlsKey = key;
    app.parts.controls.replaceChildren(controls(scene, run));
  }
  app.parts.controls.disabled = app.busy;
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

/** Sends a command for the open combat; a refusal shows the daemon's message. */
async function run(method, params) {
  clearError();
  app.busy = true;
  app.parts.controls.disabled = true;
  document.body.dataset.busy = "1";
  try {
    await app.client[method]({ combat: app.combat, ...params });
  } catch (error) {
    showError(error);
  } finally {
    app.busy = false;
    if (app.parts.controls) app.parts.controls.disabled = false;
    delete document.body.dataset.busy;
    scheduleRefresh();
  }
}

function showError(error) {
  const slot = app.parts.error;
  if (!slot) return;
  const message = error && error.message ? error.message : String(error);
  const box = h("div", { class: "error", role: "alert", "data-testid": "error", "data-code": (error && error.code) || "" },
    h("span", { "data-testid": "error-message" }, message),
    h("button", { type: "button", class: "button small", onclick: clearError }, t("Dismiss")));
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
