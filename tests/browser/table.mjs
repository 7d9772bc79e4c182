// Drives the daemon's table view in Debian's Chromium, headless, for tests/test_table_view.py:
//
//   node --experimental-websocket table.mjs <scenario> <settings.json>
//
// The settings name the page (`base`), the WebSocket (`ws`), the browser, the JavaScript client
// (for the commands another tool at the table sends), the screenshot folder and whether to take
// the steps' screenshots (`screenshots`: they take time), a profile folder and the scenario's
// tokens and combat. The scenario checks what the page shows as it goes;
// on success it prints one JSON line of what it saw (the test asserts on it too), on failure it
// saves failed.png, says why on stderr and exits 1.

import { mkdirSync, mkdtempSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

/** Chromium as a test needs it: no sandbox (containers), no GPU, and nothing that phones home. */
const CHROMIUM_ARGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];
/** Milliseconds a step waits for the page to show what it expects. */
const WAIT_MS = 15000;
/** The page's own copy of the wire format's codec, for the test standing between page and daemon. */
const MSGPACK = new URL("../../daemon/src/turnkeeper/web/vendor/msgpack/index.mjs", import.meta.url);

const [scenarioName, settingsFile] = process.argv.slice(2);
const settings = JSON.parse(await readFile(settingsFile, "utf8"));
const screenshots = [];
const problems = [];
/** Set while the daemon is down on purpose: the browser's failed connections are expected. */
let outage = false;
const NETWORK_ERROR = /net::ERR_|WebSocket connection to/;

function check(condition, message) {
  if (!condition) throw new Error(message);
}

function same(actual, expected, what) {
  const a = JSON.stringify(actual);
  const e = JSON.stringify(expected);
  check(a === e, `${what}: expected ${e}, got ${a}`);
}

/** One page of the table view, with the few moves the scenarios make. */
class TablePage {
  /** A new page at the table view; `prepare(page)` runs before it loads (to route it). */
  static async open(context, label, fragment, prepare) {
    const page = await context.newPage();
    if (prepare) await prepare(page);
    // Anything the page logs as an error (a script error, a refused load, a CSP violation)
    // fails the scenario.
    page.on("pageerror", (error) => problems.push(`${label}: ${error.message}`));
    page.on("console", (message) => {
      if (message.type() !== "error" || (outage && NETWORK_ERROR.test(message.text()))) return;
      problems.push(`${label} console: ${message.text()}`);
    });
    const hash = fragment ? "#" + new URLSearchParams(fragment).toString() : "";
    await page.goto(settings.base + "/" + hash);
    return new TablePage(page, label);
  }

  constructor(page, label) {
    this.page = page;
    this.label = label;
  }

  locator(testid) {
    return this.page.locator(`[data-testid="${testid}"]`);
  }

  async text(testid) {
    return (await this.locator(testid).first().innerText()).trim();
  }

  async click(testid) {
    await this.locator(testid).click({ timeout: WAIT_MS });
  }

  async fill(testid, value) {
    await this.locator(testid).fill(value, { timeout: WAIT_MS });
  }

  /** Opens the folded section holding a form, as a person taps its title; open stays open. */
  async unfold(testid) {
    const details = this.page.locator(`details[data-fold="${testid}"]`);
    if (!(await details.evaluate((d) => d.open))) await this.click("open-" + testid);
  }

  async choose(testid, value) {
    await this.locator(testid).selectOption(value, { timeout: WAIT_MS });
  }

  /** Waits until fn(arg), run in the page, is true; fails naming what was awaited. */
  async until(what, fn, arg) {
    try {
      await this.page.waitForFunction(fn, arg, { timeout: WAIT_MS });
    } catch (error) {
      throw new Error(`${this.label} page: waited in vain for ${what}`);
    }
  }

  /** A screenshot of the step, when the settings ask for them. */
  async shot(step) {
    if (!settings.screenshots) return;
    const file = join(settings.artifacts, `${String(screenshots.length + 1).padStart(2, "0")}-${this.label}-${step}.png`);
    await this.page.screenshot({ path: file, fullPage: true });
    screenshots.push(file);
  }

  /** Whose turn the page shows, or null. */
  async turn() {
    return this.page.evaluate(() => document.querySelector('[data-testid="turn"]')?.dataset.combatant ?? null);
  }

  async untilTurn(combatant) {
    await this.until(`${combatant}'s turn`, (id) =>
      document.querySelector('[data-testid="turn"]')?.dataset.combatant === id, combatant);
  }

  async untilShown(testid) {
    await this.until(`[data-testid="${testid}"]`, (id) => document.querySelector(`[data-testid="${id}"]`) !== null, testid);
  }

  async untilGone(testid) {
    await this.until(`no [data-testid="${testid}"]`, (id) => document.querySelector(`[data-testid="${id}"]`) === null, testid);
  }

  async untilText(testid, text) {
    await this.until(`"${text}" in [data-testid="${testid}"]`, ([id, wanted]) =>
      [...document.querySelectorAll(`[data-testid="${id}"]`)].some((e) => e.innerText.includes(wanted)), [testid, text]);
  }

  /** What the page shows of the combat, by ids: the tests compare pages with these. */
  async observe() {
    return this.page.evaluate(() => {
      const ids = (prefix, key) => [...document.querySelectorAll(`[data-testid^="${prefix}"]`)]
        .map((e) => (key ? e.dataset[key] : e.dataset.testid.slice(prefix.length)));
      const rows = [...document.querySelectorAll('[data-testid^="combatant-"]')];
      const id = (row) => row.dataset.testid.slice("combatant-".length);
      return {
        combatants: rows.map(id),
        fantastic: rows.filter((row) => row.querySelector('[data-testid="fantastic"]')).map(id),
        totals: Object.fromEntries(rows.map((row) => [id(row),
          (row.querySelector('[data-testid="total"]')?.innerText ?? "").replace("=", "").trim()])),
        reservations: ids("reservation-", "combatant"),
        offered: ids("offered-"),
        answers: ids("answer-"),
        narrator_controls: ["start-combat", "undo", "close-window"]
          .filter((testid) => document.querySelector(`[data-testid="${testid}"]`)),
        log: [...document.querySelectorAll('[data-testid="log-lines"] li')].map((li) => li.innerText),
      };
    });
  }

  async seconds(testid) {
    const [m, s] = (await this.text(testid)).split(":").map(Number);
    return m * 60 + s;
  }

  /** The error the page shows: its code and its text. */
  async error() {
    await this.untilShown("error");
    return { code: await this.locator("error").getAttribute("data-code"), text: await this.text("error-message") };
  }

  /** Remembers the element of a test id, to see later that the page drew it anew. */
  async mark(testid) {
    await this.page.evaluate((id) => {
      window.marked = document.querySelector(`[data-testid="${id}"]`);
    }, testid);
  }

  async untilRedrawn(testid) {
    await this.until(`[data-testid="${testid}"] drawn anew`, (id) => {
      const now = document.querySelector(`[data-testid="${id}"]`);
      return now !== null && now !== window.marked;
    }, testid);
  }
}

/**
 * Stands between a page and the daemon: the page's WebSockets go through the test, which passes
 * every message on unless told otherwise. `gate.close = true` closes the next connection at once
 * (the daemon out of reach); `gate.refuse.set(method, error)` answers that method's next request
 * with the error instead of the daemon; `gate.withhold.add(method)` passes that method's next
 * request on but never its answer. `gate.requestIds` lists every [method, request_id] sent.
 */
async function interpose(page) {
  const { decode, encode } = await import(MSGPACK);
  const gate = { close: false, refuse: new Map(), withhold: new Set(), requestIds: [] };
  await page.routeWebSocket(/\/ws$/, (ws) => {
    if (gate.close) {
      gate.close = false;
      ws.close();
      return;
    }
    const daemon = ws.connectToServer();
    const unanswered = new Set();
    daemon.onMessage((message) => {
      const [kind, msgid] = decode(message);
      if (kind === 1 && unanswered.delete(msgid)) return;
      ws.send(message);
    });
    ws.onMessage((message) => {
      const [kind, msgid, method, args] = decode(message);
      if (kind === 0 && typeof args?.[0]?.request_id === "string") gate.requestIds.push([method, args[0].request_id]);
      if (kind === 0 && gate.withhold.delete(method)) unanswered.add(msgid);
      const error = kind === 0 ? gate.refuse.get(method) : undefined;
      if (error === undefined) {
        daemon.send(message);
        return;
      }
      gate.refuse.delete(method);
      ws.send(Buffer.from(encode([1, msgid, { field: "", ...error }, null])));
    });
  });
  return gate;
}

/** The JavaScript client, as another narrator tool at the table: the page must follow it live. */
async function otherTool(token, locale = "en") {
  const { Client } = await import(settings.client);
  return Client.connect(settings.ws, { token, locale, name: "table-view-test", kind: "tool", reconnect: false });
}

let stdinLines = null;

/** Lets the test act in between (restart the daemon): says so on stdout, waits for its line. */
async function pause(name) {
  stdinLines ??= createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  console.log(JSON.stringify({ pause: name }));
  await stdinLines.next();
}

async function refusalOf(promise) {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error("the command was accepted");
}

/** The phone the console must fit: no sideways scrolling at 360 px, controls big enough for a
 * finger (44 CSS px, the common guideline). */
const PHONE = { width: 360, height: 740 };
const DESKTOP = { width: 1280, height: 800 };
const TOUCH_PX = 44;

/**
 * Checks the page at the phone's size: the document no wider than the viewport, and every
 * visible control tall enough to touch. With `shoot`, screenshots it at desktop and phone sizes
 * too (one step of a scenario is enough to look at). Returns the widths seen at 360 px.
 */
async function bothSizes(table, step, shoot = false) {
  await table.page.setViewportSize(DESKTOP);
  if (shoot) await table.shot(step + "-desktop");
  await table.page.setViewportSize(PHONE);
  const seen = await table.page.evaluate((px) => {
    const small = [...document.querySelectorAll("button, select, input:not([type=checkbox]), .check-field, summary")]
      .filter((e) => e.getClientRects().length && getComputedStyle(e).visibility !== "hidden")
      .filter((e) => e.getBoundingClientRect().height < px)
      .map((e) => e.dataset.testid || e.textContent.trim().slice(0, 20));
    // What sticks out (elements, and text past its element's edge), for the message when the
    // page is too wide.
    const past = (rect) => rect.right > window.innerWidth + 0.5;
    const texts = [];
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
      const range = document.createRange();
      range.selectNodeContents(walker.currentNode);
      if (past(range.getBoundingClientRect())) texts.push(walker.currentNode.parentElement);
    }
    const wide = [...[...document.querySelectorAll("body *")].filter((e) => e.getClientRects().length
      && past(e.getBoundingClientRect())).slice(-3), ...texts.slice(0, 3)]
      .map((e) => `${e.tagName.toLowerCase()}.${e.className}[${e.dataset.testid ?? ""}] ${Math.round(e.getBoundingClientRect().right)} px`);
    return { document: document.documentElement.scrollWidth, viewport: window.innerWidth, small, wide };
  }, TOUCH_PX);
  if (shoot) await table.shot(step + "-phone");
  await table.page.setViewportSize(DESKTOP);
  check(seen.document <= seen.viewport,
    `${step}: the page is ${seen.document} px wide at ${seen.viewport} px: ${seen.wide.join(", ")}`);
  same(seen.small, [], `${step}: controls under ${TOUCH_PX} px at 360 px`);
  return { step, document: seen.document, viewport: seen.viewport };
}

/** People's words at their longest, so the 360 px checks see whether they wrap: a name with no
 * space in it, a group's long name, a condition's long note. */
const LONG_NAME = "Mysteriousshadowyinfiltratoroftheguild";
const LONG_GROUP = "henchmenofthenorthernwarehousedistrict";
const LONG_NOTE = ("Webbed to the wall above the vault door by a thick sheet of webbing, "
  + "unable to move an arm or a leg until it dissolves").padEnd(120, ".");

/** The totals each row shows, by id, in the order shown. */
async function totals(table) {
  return (await table.observe()).totals;
}

// Scenarios ---------------------------------------------------------------------------------

const scenarios = {
  // The narrator's console, from creating the combat to ending it, with a player beside it, for
  // settings.ruleset (marvel or dnd3e): everything through the pages alone.
  async console(context) {
    const marvel = settings.ruleset === "marvel";
    const steps = [];
    const sizes = [];
    const narrator = await TablePage.open(context, "narrator", { token: settings.narrator });
    narrator.page.on("dialog", (dialog) => dialog.accept());
    await narrator.page.setViewportSize(DESKTOP);
    await narrator.untilShown("create");
    await narrator.fill("new-combat-id", settings.combat);
    await narrator.choose("new-ruleset", settings.ruleset);
    await narrator.fill("new-turn-limit", "600");
    sizes.push(await bothSizes(narrator, "create"));
    await narrator.click("create-combat");
    await narrator.untilShown("add-form");
    steps.push(`created: ${await narrator.text("round")}`);

    // The form starts blank after each one added (checked below): only what differs is filled.
    const add = async (id, name, fields = {}) => {
      await narrator.unfold("add-form");
      await narrator.fill("add-id", id);
      await narrator.fill("add-name", name);
      if (fields.mod) await narrator.fill("add-mod", String(fields.mod));
      if (fields.controller) await narrator.fill("add-controller", fields.controller);
      if (fields.group) await narrator.fill("add-group", fields.group);
      if (fields.tags) await narrator.fill("add-tags", fields.tags);
      if (fields.pc) await narrator.locator("add-pc").check();
      if (fields.hidden) await narrator.locator("add-hidden").check();
      await narrator.click("add");
      await narrator.untilShown("combatant-" + id);
      // Added: the form starts blank for the next one.
      await narrator.until("a blank add form", () => document.querySelector('[data-testid="add-id"]').value === "");
    };
    // More tags than the daemon takes (decide.MAX_ITEMS): the page says so, sending nothing.
    await narrator.unfold("add-form");
    await narrator.fill("add-id", "crowd");
    await narrator.fill("add-name", "Crowd");
    await narrator.fill("add-tags", Array.from({ length: 33 }, (_, i) => "tag" + i).join(", "));
    await narrator.click("add");
    same(await narrator.error(), { code: "", text: "At most 32 tags, each at most 128 characters." }, "33 tags");
    await add("hero", "Hero", { mod: 2, controller: "peter", pc: true, tags: "brave, quick" });
    await add("boss", "Boss", { mod: 1 });
    await add("goon1", "Goon A", { group: LONG_GROUP });
    await add("goon2", "Goon B", { group: LONG_GROUP });
    await add("spy", LONG_NAME, { hidden: true });
    await add("extra", "Extra");
    steps.push(`added: ${(await narrator.observe()).combatants.join(", ")}`);

    // The player rolls its own check at the table and enters the faces.
    const player = await TablePage.open(context, "player", { token: settings.player, combat: settings.combat });
    await player.page.setViewportSize(DESKTOP);
    await player.untilShown("roll-form");
    const offered = await player.locator("roll-who").locator("option").evaluateAll((o) => o.map((x) => x.value));
    steps.push(`player may roll for: ${offered.join(", ")}; sees ${(await player.observe()).combatants.join(", ")}`);
    const prepare = async (table, who, faces, extra = {}) => {
      await table.choose("roll-who", who);
      await table.choose("roll-how", "physical");
      if (marvel) {
        await table.fill("roll-edges", String(extra.edges ?? 0));
        await table.locator("roll-edges").dispatchEvent("change");
      }
      for (const [i, face] of faces.entries()) await table.choose("face-" + (i + 1), String(face));
      for (const [i, face] of (extra.rerolls ?? []).entries()) await table.choose("reroll-" + (i + 1), String(face));
    };
    const rolled = async (table, who) => {
      await table.click("roll");
      await narrator.until(`${who}'s check`, (id) =>
        document.querySelector(`[data-testid="combatant-${id}"] [data-testid="total"]`) !== null, who);
    };
    const enter = async (table, who, faces, extra) => {
      await prepare(table, who, faces, extra);
      await rolled(table, who);
    };
    // The narrator enters the boss's dice (marvel: an edge, and the face of its reroll) while
    // the player rolls: the narrator's form is drawn anew with everything still there.
    await prepare(narrator, "boss", marvel ? [4, 4, 3] : [12], { edges: 1, rerolls: marvel ? [6] : [] });
    await narrator.mark("roll-form");
    // d616: the third die is the Marvel die; 1 is its M, a Fantastic check (R7).
    await enter(player, "hero", marvel ? [5, 6, 1] : [15]);
    sizes.push(await bothSizes(player, "player-rolled"));
    await narrator.untilRedrawn("roll-form");
    await rolled(narrator, "boss");
    // A die left unchosen is not guessed: the page asks for it.
    await narrator.choose("roll-who", "goon1");
    await narrator.choose("roll-how", "physical");
    await narrator.click("roll");
    steps.push(`no faces: ${(await narrator.error()).text}`);
    if (marvel) {
      // Goon B is Surprised: the group's check, rolled for Goon A, has one more trouble (R3, R8),
      // so the dice entered ask for a reroll's face too (a 6 is never lower: the check stays 9).
      await narrator.unfold("manage");
      await narrator.choose("manage-who", "goon2");
      await narrator.click("mark-surprised");
      await narrator.untilText("combatant-goon2", "Surprised");
    }
    await enter(narrator, "goon1", marvel ? [2, 3, 4] : [8], { rerolls: marvel ? [6] : [] });
    if (marvel) {
      // Surprised before its check: one more trouble, so the dice entered ask for a reroll's
      // face too (a 6 is never lower: the check stays 9, R8).
      await narrator.unfold("manage");
      await narrator.choose("manage-who", "spy");
      await narrator.click("mark-surprised");
      await narrator.untilText("combatant-spy", "Surprised");
    }
    await enter(narrator, "spy", marvel ? [2, 3, 4] : [3], { rerolls: marvel ? [6] : [] });
    if (marvel) steps.push(`surprised spy: ${await narrator.locator("combatant-spy").locator(".badge-trouble").innerText()}`);
    if (marvel) {
      // The spy ties with the goons at 9, and a twin of the boss with the boss at 15: the
      // narrator says who goes first in each tie rather than a roll-off (R4).
      await add("twin", "Twin", { mod: 1 });
      await enter(narrator, "twin", [4, 4, 3], { edges: 1, rerolls: [6] });
      await narrator.untilShown("ties-2");
      same(await narrator.locator("ties-1-1").locator("option").evaluateAll((o) => o.map((x) => x.value)),
        ["#boss", "#twin"], "the tie at 15");
      await narrator.choose("ties-2-1", "#spy");
      await narrator.choose("ties-2-2", "group:" + LONG_GROUP);
      await narrator.click("ties-2-set");
      await narrator.untilText("log-lines", "Ties ordered: " + LONG_NAME);
      await narrator.choose("ties-1-1", "#twin");
      await narrator.choose("ties-1-2", "#boss");
      await narrator.click("ties-1-set");
      await narrator.untilText("log-lines", "Ties ordered: Twin");
      await narrator.unfold("manage");
      await narrator.choose("manage-who", "twin");
      await narrator.click("remove");
      await narrator.untilGone("combatant-twin");
    }
    // Turnkeeper rolls for the extra, who then leaves before the combat starts.
    await narrator.choose("roll-who", "extra");
    await narrator.choose("roll-how", "digital");
    await narrator.click("roll");
    await narrator.until("the extra's check", () =>
      document.querySelector('[data-testid="combatant-extra"] [data-testid="total"]') !== null);
    const extra = (await totals(narrator)).extra;
    await narrator.unfold("manage");
    await narrator.choose("manage-who", "extra");
    await narrator.click("remove");
    await narrator.untilGone("combatant-extra");
    steps.push(`extra rolled by Turnkeeper (${/^-?\d+$/.test(extra) ? "a number" : extra}), then removed`);

    // The group acts in the order the narrator sets (R4).
    await narrator.unfold("group-" + LONG_GROUP);
    await narrator.choose(`group-${LONG_GROUP}-1`, "goon2");
    await narrator.choose(`group-${LONG_GROUP}-2`, "goon1");
    await narrator.click(`group-${LONG_GROUP}-set`);
    await narrator.until("Goon B before Goon A", () => {
      const rows = [...document.querySelectorAll('[data-testid^="combatant-"]')].map((r) => r.dataset.testid);
      return rows.indexOf("combatant-goon2") >= 0 && rows.indexOf("combatant-goon2") < rows.indexOf("combatant-goon1");
    });
    await narrator.unfold("condition-form");
    await narrator.choose("condition-target", "boss");
    await narrator.fill("condition-note", LONG_NOTE);
    await narrator.fill("condition-rounds", "2");
    // Counted on the hidden spy's turns: the player sees the condition but not its clock, so
    // no rounds left are shown rather than none.
    await narrator.choose("condition-anchor", "spy");
    await narrator.click("apply-condition");
    await narrator.untilText("combatant-boss", "Webbed");
    await player.untilText("combatant-boss", "Webbed");
    same(await narrator.locator("combatant-boss").locator('[data-testid="row-condition"]').innerText(),
      `Condition ${LONG_NOTE} Rounds left: 2`, "the narrator's condition");
    same(await player.locator("combatant-boss").locator('[data-testid="row-condition"]').innerText(),
      `Condition ${LONG_NOTE}`, "the player's condition, its clock hidden");
    steps.push(`totals: ${JSON.stringify(await totals(narrator))}`);
    sizes.push(await bothSizes(narrator, "setup", true));

    await narrator.click("start-combat");
    await narrator.untilShown("turn-name");
    steps.push(`started: ${await narrator.text("round")}, ${await narrator.text("turn-name")}'s turn`);

    if (marvel) {
      // The bonus round: the Fantastic hero acts; the player declares, then reserves with the
      // form's defaults (the movement left: a move, never an attack it cannot carry).
      await player.untilTurn("hero");
      await player.choose("declare-kind", "attack");
      await player.choose("declare-target", "boss");
      await player.click("declare");
      await player.untilText("turn", "Spent");
      const kinds = await player.locator("reserve-kind").locator("option").evaluateAll((o) => o.map((x) => x.value));
      await player.fill("reserve-trigger", "When the boss moves");
      await player.click("reserve");
      await narrator.untilShown("row-reservation");
      steps.push(`bonus round: attack, then reserve with the defaults (${kinds.join(", ")}): ${await narrator.locator("combatant-hero").locator('[data-testid="row-reservation"]').innerText()}`);
      await player.click("end-turn");
      await narrator.untilText("round", "Round 1");
    }

    // The player holds (delays) its turn to act just after the boss (R9).
    await player.untilTurn("hero");
    await player.choose("hold-when", "after");
    await player.choose("hold-other", "boss");
    await player.click("hold");
    await narrator.untilTurn("boss");
    await narrator.untilShown("row-hold");
    steps.push(`held: ${await narrator.locator("combatant-hero").locator('[data-testid="row-hold"]').innerText()}`);
    sizes.push(await bothSizes(narrator, "held"));

    // The boss attacks; the narrator opens a window for the hero and Goon A.
    await narrator.choose("declare-kind", "attack");
    await narrator.choose("declare-target", "hero");
    await narrator.click("declare");
    await narrator.untilText("turn", "Spent");
    await narrator.unfold("announce-form");
    await narrator.fill("announce-text", "The boss swings at the hero");
    await narrator.locator("offer-hero").check();
    await narrator.locator("offer-goon1").check();
    await narrator.click("announce");
    await player.untilShown("answer-hero");
    sizes.push(await bothSizes(player, "window"));
    if (marvel) {
      // The player's own dice, should the claims need a fresh check (R12).
      for (const [i, face] of [3, 5, 2].entries()) await player.choose(`claim-face-hero-${i + 1}`, String(face));
      await player.click("claim-hero");
      await narrator.untilText("offered-hero", "Claims");
      await narrator.click("pass-goon1");
      await player.untilShown("finish-hero");
      await player.click("finish-hero");
      steps.push("window: the player claims, the narrator passes for Goon A, the player finishes");
    } else {
      // dnd3e: only readied actions react (R11); the player passes.
      await player.click("pass-hero");
      await narrator.untilText("offered-hero", "Passes");
      await narrator.click("pass-goon1");
      steps.push("window: the player passes, the narrator passes for Goon A");
    }
    await narrator.untilGone("window-status");
    await narrator.click("end-turn");
    await player.untilTurn("hero");
    steps.push(`after the boss: ${await player.text("turn-name")}, ${await player.text("turn-kind")}`);

    if (!marvel) {
      // The delayed turn readies an action with the form's defaults (R11).
      await player.fill("reserve-trigger", "When the boss moves");
      await player.click("reserve");
      await narrator.untilShown("row-reservation");
      steps.push(`ready with the defaults: ${await narrator.locator("combatant-hero").locator('[data-testid="row-reservation"]').innerText()}`);
    }
    await player.click("end-turn");
    if (marvel) {
      await narrator.untilTurn("spy");
      await narrator.click("end-turn");
    }
    await narrator.untilTurn("goon2");
    steps.push(`order: ${(await narrator.observe()).combatants.join(", ")}`);

    // The roster mid-combat: defeat, revive, reveal, a reinforcement, the condition removed.
    await narrator.unfold("manage");
    await narrator.choose("manage-who", "goon1");
    await narrator.click("defeat");
    await narrator.untilText("combatant-goon1", "Defeated");
    await narrator.choose("manage-who", "goon1");
    await narrator.click("revive");
    await narrator.until("Goon A back", () => !document.querySelector('[data-testid="combatant-goon1"]').innerText.includes("Defeated"));
    await player.until("no spy for the player", () => document.querySelector('[data-testid="combatant-spy"]') === null);
    await narrator.choose("manage-who", "spy");
    await narrator.click("reveal");
    await player.untilShown("combatant-spy");
    await add("medic", "Medic", { mod: 1 });
    await player.untilShown("combatant-medic");
    if (marvel) {
      // Surprised mid-combat until the start of the surpriser's next turn (R8).
      await narrator.choose("manage-who", "goon1");
      await narrator.choose("surprise-by", "boss");
      await narrator.click("surprise");
      await narrator.untilText("combatant-goon1", "Surprised");
    }
    const medic = (await totals(narrator)).medic;
    await narrator.unfold("condition-form");
    await narrator.click(await narrator.page.locator('[data-testid^="remove-condition-"]').first().getAttribute("data-testid"));
    await narrator.until("the condition gone", () => !document.querySelector('[data-testid="combatant-boss"]').innerText.includes("Webbed"));
    steps.push(`roster: defeat, revive, reveal, a reinforcement rolled ${/^-?\d+$/.test(medic) ? "and slotted" : medic}, condition removed`);
    sizes.push(await bothSizes(player, "player-mid-combat"));

    await narrator.click("end-combat");
    await narrator.untilText("round", "Combat over");
    await player.untilText("round", "Combat over");
    check(await narrator.locator("end-turn").count() === 0, "no turn controls once over");
    steps.push(`ended: ${await player.text("round")}`);
    sizes.push(await bothSizes(narrator, "ended"));
    return { steps, sizes };
  },
  // A table's narrator: the picker offers its table's combats only, named without the table's
  // prefix, the header names the table, and the combat opens.
  async tables(context) {
    let gate;
    const picker = await TablePage.open(context, "picker", { token: settings.token }, async (page) => {
      gate = await interpose(page);
    });
    await picker.untilShown("open");
    const options = await picker.locator("combat").locator("option").allInnerTexts();
    const values = await picker.locator("combat").locator("option").evaluateAll(
      (nodes) => nodes.map((node) => node.value));
    await picker.shot("picker");
    await picker.choose("combat", settings.combat);
    await picker.click("open");
    await picker.untilTurn("spidey");
    await picker.shot("opened");
    // A combat created here is the table's: its name is given without the table's prefix.
    await picker.click("change-combat");
    await picker.untilShown("create");
    // The table's prefix and the name together are the combat's id: at most 128 characters.
    await picker.fill("new-combat-id", "r".repeat(128));
    await picker.click("create-combat");
    const tooLong = await picker.error();
    same(tooLong.code, "", "no create_combat for a name too long with the table's prefix");
    await picker.fill("new-combat-id", "raid");
    // A double click creates the combat once: the second create_combat would be refused.
    await picker.locator("create-combat").dblclick();
    await picker.untilShown("add-form");
    same(await picker.locator("error").count(), 0, "errors after a double click on Create combat");
    same(gate.requestIds.filter(([method]) => method === "create_combat").length, 1, "create_combat requests");
    // Nobody in it yet: start_combat would be refused (no_combatants), so it is not offered.
    same(await picker.locator("start-combat").count(), 0, "Start combat offered with nobody to start");
    await picker.shot("created");
    const created = await picker.page.evaluate(() => new URLSearchParams(location.hash.slice(1)).get("combat"));
    return { options, values, table: await picker.text("table"), created };
  },
  // More combats than one page of list_combats: the picker lists every one, and a combat whose
  // id sorts after the first page opens, from the picker and from a link.
  async crowded(context) {
    const picker = await TablePage.open(context, "picker", { token: settings.token });
    await picker.untilShown("open");
    const listed = await picker.locator("combat").locator("option").count();
    await picker.choose("combat", settings.combat);
    await picker.shot("picker");
    await picker.click("open");
    await picker.untilTurn("spidey");
    await picker.shot("opened");
    const linked = await TablePage.open(context, "linked", { token: settings.token, combat: settings.combat });
    await linked.untilTurn("spidey");
    await linked.shot("linked");
    return { listed, opened: await picker.text("turn-name"), linked: await linked.text("turn-name") };
  },

  async narrator(context) {
    const table = await TablePage.open(context, "narrator", { token: settings.token, combat: settings.combat });
    await table.untilTurn("spidey");
    await table.untilText("log-lines", "Bonus round");
    const seen = await table.observe();
    const before = await table.seconds("timer-countdown");
    await table.page.waitForTimeout(1300);
    const first = {
      round: await table.text("round"),
      turn: await table.turn(),
      order: seen.combatants,
      fantastic: seen.fantastic,
      totals: seen.totals,
      timer: [before, await table.seconds("timer-countdown")],
      condition: await table.text("left"),
    };
    check(await table.locator("hidden").count() === 1, "the narrator sees Mystique marked hidden");
    await table.shot("bonus-round");
    const tool = await otherTool(settings.token);

    const steps = [];
    await table.click("end-turn");
    await table.untilTurn("docock");
    steps.push(`end turn: ${await table.text("turn-name")}'s turn`);
    await table.shot("end-turn");

    // The form offers only kinds the type spent can carry; a kind typed in with the wrong type
    // is the daemon's to refuse.
    await table.choose("reserve-kind", "");
    await table.fill("reserve-custom", "attack");
    await table.choose("reserve-action-type", "movement");
    await table.fill("reserve-trigger", "When Spider-Man lands on the vault");
    await table.click("reserve");
    await table.untilShown("error");
    steps.push(`reserve refused: ${await table.locator("error").getAttribute("data-code")}`);
    await table.shot("reserve-refused");

    // Another tool changes what the controls depend on while the form is being filled in: they
    // are drawn anew, with what was typed still there and the focus where it was.
    await table.choose("reserve-kind", "attack");
    await table.fill("reserve-description", "grabs him with a tentacle");
    await table.mark("reserve-form");
    await tool.defeatCombatant({ combat: settings.combat, combatant: "mystique" });
    await table.untilRedrawn("reserve-form");
    const kept = await table.page.evaluate(() => ({
      values: ["reserve-kind", "reserve-description", "reserve-trigger"]
        .map((id) => document.querySelector(`[data-testid="${id}"]`).value),
      focus: document.activeElement?.dataset.testid,
    }));
    same(kept.values, ["attack", "grabs him with a tentacle", "When Spider-Man lands on the vault"], "typing kept");
    same(kept.focus, "reserve-description", "the focus kept");
    steps.push("Mystique defeated meanwhile: the form keeps what was typed");
    await table.shot("typing-kept");

    await table.click("reserve");
    await table.untilShown("trigger");
    await table.untilGone("error");
    steps.push(`reserve: ${await table.text("trigger")}`);
    await table.shot("reserve");
    // R9, R10: acted, so no hold; the standard action is spent, movement is left to reserve.
    check(await table.locator("hold").count() === 0, "no hold once the turn has acted");
    const left = await table.locator("reserve-type").locator("option").evaluateAll((options) => options.map((o) => o.value));
    steps.push(`after reserving: hold ${await table.locator("hold").count()}, reservable ${left.join(", ")}`);

    await table.click("end-turn");
    await table.untilText("round", "Round 1");
    steps.push(`end turn: ${await table.text("round")}`);

    same(await table.locator("hold-number").getAttribute("step"), "1", "the hold number's step");
    await table.fill("hold-number", "12.5");
    await table.click("hold");
    const fraction = await table.error();
    same(await table.turn(), "spidey", "no hold sent for 12.5");
    steps.push(`hold at 12.5: ${fraction.text}`);
    await table.shot("hold-fraction");
    // Below the lowest number the daemon takes (invalid_value): refused by the page.
    await table.fill("hold-number", "-1000001");
    await table.click("hold");
    await table.untilText("error-message", "no lower");
    same(await table.turn(), "spidey", "no hold sent for -1000001");
    steps.push(`hold at -1000001: ${await table.text("error-message")}`);
    await table.fill("hold-number", "");
    await table.click("hold");
    await table.untilShown("hold-spidey");
    await table.untilTurn("sabretooth");
    const holding = await table.locator("combatant-spidey").locator('[data-testid="holding"]').innerText();
    steps.push(`hold: Spider-Man ${holding.toLowerCase()}`);
    await table.shot("hold");

    await table.choose("held-when", "after");
    await table.choose("held-other", "sabretooth");
    await table.click("take-held-spidey");
    await table.untilText("plan", "Sabretooth");
    steps.push(`take held turn: ${await table.text("plan")}`);
    await table.click("end-turn");
    await table.untilTurn("spidey");
    steps.push(`held turn: ${await table.text("turn-name")}, ${await table.text("turn-kind")}`);
    await table.shot("held-turn");

    await table.click("end-turn");
    await table.untilTurn("wolverine");
    await tool.announceTrigger({
      combat: settings.combat,
      facts: { event: "vault_door", text: "The vault door blows open" },
      offer: ["docock", "wolverine"],
    });
    await table.untilShown("window-countdown");
    const offered = await table.page.locator('[data-testid^="offered-"] strong').allInnerTexts();
    steps.push(`window: ${offered.join(", ")}`);
    check(await table.locator("end-turn").count() === 0, "turn controls wait while the window is open");
    await table.shot("window");

    await table.click("claim-docock");
    await table.untilText("offered-docock", "Claims");
    steps.push(`claim: ${await table.locator("offered-docock").locator("strong").innerText()}`);
    await table.click("pass-wolverine");
    await table.untilText("window-status", "Resolving");
    steps.push(`pass: ${await table.locator("offered-wolverine").locator("strong").innerText()}`);
    await table.shot("resolving");

    await table.click("finish-docock");
    await table.untilGone("window-status");
    steps.push("finish reaction");
    await table.shot("finished");

    await table.click("undo");
    await table.untilShown("finish-docock");
    await table.untilText("window-status", "Resolving");
    steps.push(`undo: ${await table.locator("offered-docock").locator("strong").innerText()} reacting again`);
    await table.shot("undo");
    tool.close();
    return { first, steps };
  },

  async r16(context) {
    const narrator = await TablePage.open(context, "narrator", { token: settings.narrator, combat: settings.combat });
    const player = await TablePage.open(context, "player", { token: settings.player, combat: settings.combat });
    for (const table of [narrator, player]) {
      await table.untilShown("window-status");
      await table.untilShown("answer-wolverine");
    }
    const seen = { narrator: await narrator.observe(), player: await player.observe() };
    check((await player.text("role")).includes("logan"), "the player's page names its user");
    await narrator.shot("start");
    await player.shot("start");

    const steps = [];
    await player.click("pass-wolverine");
    await narrator.untilText("offered-wolverine", "Passes");
    steps.push("player passes: narrator page shows Wolverine passes");

    // Mystique, hidden, claimed: she reacts alone, and the player sees someone unseen reacting.
    await narrator.click("pass-docock");
    await player.untilText("window-status", "Resolving");
    await player.untilShown("unseen-reactor");
    check(await player.page.locator(".badge-reacting").count() === 0, "nobody shown reacting to the player");
    check(await player.page.locator('[data-testid^="finish-"]').count() === 0, "no finish button for the player");
    steps.push("narrator passes for Doctor Octopus: the player page shows someone unseen reacting");
    await player.shot("unseen-reacting");
    await narrator.shot("mystique-reacting");

    await narrator.click("finish-mystique");
    await player.untilGone("window-status");
    steps.push("narrator finishes Mystique's reaction: window closed on the player page");
    await player.shot("window-closed");

    await player.click("end-turn");
    await narrator.untilTurn("docock");
    steps.push(`player ends Wolverine's turn: narrator page shows ${await narrator.text("turn-name")}'s turn`);
    await narrator.shot("doc-ock-turn");

    await player.untilTurn("docock");
    check(await player.locator("end-turn").count() === 0, "no end turn for another's combatant");
    check(await player.locator("reserve-form").count() === 0, "no reserve form for another's combatant");
    check((await player.text("controls")).includes("Nothing for you to do right now."), "the player is told");
    steps.push("player page: nothing to do, no turn controls");
    await player.shot("not-my-turn");

    await narrator.click("end-turn");
    await narrator.untilTurn("mystique");
    await player.until("a turn the player cannot see", () => {
      const turn = document.querySelector('[data-testid="turn"]');
      return turn !== null && turn.dataset.combatant === undefined;
    });
    steps.push("Mystique's turn: the player page sees no turn");
    await narrator.shot("mystique-turn");
    await player.shot("mystique-turn");
    return { ...seen, steps };
  },

  async reconnect(context) {
    const table = await TablePage.open(context, "reconnect", { token: settings.token, combat: settings.combat });
    await table.untilTurn("spidey");
    const steps = [];
    outage = true;
    await pause("kill");
    await table.until("the page reconnecting", () =>
      document.querySelector('[data-testid="status"]')?.dataset.state === "reconnecting");
    steps.push(`daemon killed: ${await table.text("status")}`);
    await table.shot("reconnecting");
    await pause("start");
    await table.until("the page live again", () =>
      document.querySelector('[data-testid="status"]')?.dataset.state === "open");
    await table.untilTurn("docock");
    steps.push(`daemon back: ${await table.text("status")}, ${await table.text("turn-name")}'s turn`);
    await table.shot("back");
    await table.click("end-turn");
    await table.untilText("round", "Round 1");
    steps.push(`end turn: ${await table.text("round")}`);
    await table.shot("going-on");

    // The token is refused when the page reconnects: its client gives up, the page offers to
    // sign in again with the tab's token, and that brings the combat back.
    await pause("revoke");
    await table.until("the page disconnected", () =>
      document.querySelector('[data-testid="status"]')?.dataset.state === "closed");
    await table.untilShown("reconnect");
    check(await table.locator("reconnect").isVisible(), "the Reconnect button shows");
    check(await table.page.locator("fieldset.bare").evaluate((f) => f.disabled), "no commands on a closed client");
    steps.push(`token refused on reconnecting: ${await table.text("status")}, ${await table.text("reconnect")}`);
    await table.shot("disconnected");
    await pause("restore");
    await table.click("reconnect");
    await table.until("the page live again", () =>
      document.querySelector('[data-testid="status"]')?.dataset.state === "open");
    await table.untilTurn("sabretooth");
    check(!(await table.locator("reconnect").isVisible()), "no Reconnect button once live");
    steps.push(`reconnect: ${await table.text("status")}, ${await table.text("turn-name")}'s turn`);
    await table.click("end-turn");
    await table.untilTurn("wolverine");
    steps.push(`end turn: ${await table.text("turn-name")}'s turn`);
    await table.shot("reconnected");
    return { steps };
  },

  async "pt-BR"(context) {
    let gate;
    const table = await TablePage.open(context, "pt-BR", null, async (page) => {
      gate = await interpose(page);
      // The page's own clock, to run past the client's call timeout at once.
      await page.clock.install();
    });
    await table.untilShown("sign-in");
    check((await table.text("sign-in")) === "Sign in", "the browser's English comes first");
    await table.choose("locale", "pt-BR");
    await table.until("the form in Portuguese", () =>
      document.querySelector('[data-testid="sign-in"]')?.innerText.trim() !== "Sign in");
    const signInButton = await table.text("sign-in");
    await table.shot("sign-in");
    await table.fill("token", settings.token);
    // The daemon out of reach: the client's own failure, told in Portuguese too.
    gate.close = true;
    await table.click("sign-in");
    const unreachable = await table.error();
    const unreachableDetail = await table.locator("error-message").getAttribute("title");
    await table.shot("unreachable");
    await table.click("sign-in");
    await table.untilShown("open");
    await table.choose("combat", settings.combat);
    await table.shot("choose-combat");
    // A double click opens the combat once: the second would be refused as already_subscribed.
    await table.locator("open").dblclick();
    await table.untilTurn("spidey");
    await table.until("the narrated log", () => document.querySelectorAll('[data-testid="log-lines"] li').length > 3);
    same(await table.locator("error").count(), 0, "errors after a double click on Show combat");

    // The kinds of action in the daemon's Portuguese words.
    const attack = await table.locator("reserve-kind").locator('option[value="attack"]').innerText();
    await table.choose("reserve-kind", "");
    await table.fill("reserve-custom", "attack");
    await table.choose("reserve-action-type", "movement");
    await table.fill("reserve-trigger", "Quando o Homem-Aranha pousar no cofre");
    await table.click("reserve");
    await table.untilShown("error");
    const error = { code: await table.locator("error").getAttribute("data-code"), text: await table.text("error-message") };
    await table.shot("combat");

    const tool = await otherTool(settings.token, "en");
    const view = (await tool.getCombat({ combat: settings.combat })).view;
    const refused = await refusalOf(tool.reserve({
      combat: settings.combat,
      turn: { round: view.turn.round, combatant: view.turn.combatant, number: view.turn.number },
      reserved_type: "standard",
      action: { kind: "attack", type: "movement" },
      trigger: { text: "x" },
    }));
    tool.close();
    const shown = {
      sign_in_button: signInButton,
      round: await table.text("round"),
      fantastic: await table.text("fantastic"),
      log: (await table.observe()).log,
      html_lang: await table.page.evaluate(() => document.documentElement.lang),
      attack,
      error,
      error_en: refused.message,
      unreachable: { ...unreachable, detail: unreachableDetail },
    };

    // Another combat, then signing out: the form comes back empty, still in Portuguese.
    await table.click("change-combat");
    await table.untilShown("open");
    await table.click("open");
    await table.untilTurn("spidey");

    // End turn's answer never comes (call_timeout): the daemon did end the turn. Retried, the
    // command carries the request_id it was first sent with, and the daemon, which knows it,
    // answers as before instead of refusing the turn as over.
    gate.withhold.add("end_turn");
    await table.click("end-turn");
    await table.untilTurn("docock");
    const { CALL_TIMEOUT_MS } = await import(settings.client);
    await table.page.clock.fastForward(CALL_TIMEOUT_MS + 1000);
    shown.interrupted = (await table.error()).code;
    await table.shot("call-timeout");
    await table.click("retry");
    await table.until("the retry answered", () => document.body.dataset.busy === undefined);
    same(await table.locator("error").count(), 0, "errors after the retry");
    shown.retried = gate.requestIds.filter(([method]) => method === "end_turn").map(([, id]) => id);
    await table.click("sign-out");
    await table.untilShown("sign-in");
    same(await table.locator("token").inputValue(), "", "the token is forgotten on signing out");
    shown.signed_out = await table.text("sign-in");
    await table.shot("signed-out");
    await table.page.reload();
    await table.untilShown("sign-in");
    same(await table.locator("token").inputValue(), "", "a reload after signing out stays out");
    return shown;
  },

  // What the forms offer follows the rules: held turns offer only the moments still to come
  // (moment_passed), the combat's rule options show and shape the forms, and a window offered
  // to more combatants than the daemon takes in one (32) says so and lets no more be ticked.
  async rules(context) {
    const values = (table, testid) => table.locator(testid).locator("option").evaluateAll((o) => o.map((x) => x.value));
    const crowd = await TablePage.open(context, "crowd", { token: settings.token, combat: settings.crowd });
    await crowd.untilTurn("c00");
    const flat = async (table, testid) => (await table.text(testid)).replace(/\s+/g, " ");
    const seen = { rules: { [settings.crowd]: await flat(crowd, "rules") } };

    // c00 holds; c01 acts and is done; c02 acts: c01's moments have passed, c02's "before" too.
    await crowd.click("hold");
    await crowd.untilShown("held-c00");
    await crowd.untilTurn("c01");
    await crowd.click("end-turn");
    await crowd.untilTurn("c02");
    const moments = {};
    for (const when of ["before", "after"]) {
      await crowd.choose("held-when", when);
      moments[when] = (await values(crowd, "held-other")).slice(0, 3);
    }
    seen.moments = moments;
    await crowd.choose("held-when", "before");
    await crowd.choose("held-other", "c03");
    await crowd.click("take-held-c00");
    await crowd.untilText("plan", "c03");
    await crowd.shot("held-moments");

    // More combatants than one window takes: the form says so; 32 ticked, the 33rd waits.
    await crowd.unfold("announce-form");
    seen.offerLimit = await crowd.text("offer-limit");
    for (let i = 0; i < 32; i++) await crowd.locator("offer-c" + String(i).padStart(2, "0")).check();
    seen.lastOffer = await crowd.locator("offer-c32").isDisabled();
    seen.sizes = [await bothSizes(crowd, "offer-limit", true)];
    await crowd.locator("offer-c31").uncheck();
    check(!(await crowd.locator("offer-c32").isDisabled()), "one unticked, the 33rd may be ticked");
    await crowd.locator("offer-c31").check();
    await crowd.fill("announce-text", "The floor gives way");
    await crowd.click("announce");
    await crowd.untilShown("window-status");
    seen.offered = (await crowd.observe()).offered.length;
    // c05 claims, the window is closed, its reaction resolves: its reaction is spent.
    await crowd.click("claim-c05");
    await crowd.untilText("offered-c05", "Claims");
    await crowd.click("close-window");
    await crowd.untilShown("finish-c05");
    await crowd.click("finish-c05");
    await crowd.untilGone("window-status");
    // The daemon offers no window to c05 until its reaction comes back: nor does the form.
    await crowd.unfold("announce-form");
    await crowd.untilShown("reaction-spent");
    seen.spent = await crowd.text("reaction-spent");
    check(await crowd.locator("offer-c05").count() === 0, "no offer to c05, its reaction spent");
    await crowd.shot("reaction-spent");

    // dnd3e under 3.5 readied actions and 3.0 delays.
    const keep = await TablePage.open(context, "keep", { token: settings.token, combat: settings.keep });
    await keep.untilTurn("ana");
    seen.rules[settings.keep] = await flat(keep, "rules");
    same(await keep.locator("hold-number").getAttribute("min"), "-12", "Ana's delay floor");
    await keep.fill("hold-number", "-13");
    await keep.click("hold");
    const floor = await keep.error();
    same(await keep.turn(), "ana", "no delay sent below the floor");
    seen.floor = floor;
    await keep.fill("hold-number", "");
    seen.readyKinds = await values(keep, "reserve-kind");
    await keep.choose("reserve-kind", "speak");
    await keep.fill("reserve-trigger", "When the orc draws");
    await keep.click("reserve");
    await keep.untilShown("row-reservation");
    seen.readied = await keep.locator("combatant-ana").locator('[data-testid="row-reservation"]').innerText();
    await keep.click("end-turn");
    await keep.untilTurn("orc");
    await keep.click("end-turn");
    await keep.untilTurn("bat");
    // The last of the round: every turn has come, and a delay never outlasts the round.
    seen.lastDelay = { plan: await keep.locator("hold-when").count(), delay: await keep.locator("hold").count() };
    await keep.shot("last-delay");
    seen.sizes.push(await bothSizes(keep, "dnd3e-rules"));

    // Round 2: Ana delays, the Orc acts, then the Bat, the last; a window is opened for the Orc
    // and the Bat is defeated while it is open: its turn is over, the Orc's has been, and a dnd3e
    // delay never outlasts the round. Ana has no moment left: the page says so, offers none.
    await keep.click("end-turn");
    await keep.untilText("round", "Round 2");
    await keep.untilTurn("ana");
    await keep.click("hold");
    await keep.untilShown("held-ana");
    await keep.untilTurn("orc");
    await keep.click("end-turn");
    await keep.untilTurn("bat");
    await keep.unfold("announce-form");
    await keep.locator("offer-orc").check();
    await keep.locator("offer-bat").check();
    await keep.fill("announce-text", "The bat screeches");
    await keep.click("announce");
    await keep.untilShown("answer-bat");
    await keep.unfold("manage");
    await keep.choose("manage-who", "bat");
    await keep.click("defeat");
    await keep.untilText("combatant-bat", "Defeated");
    // The defeated Bat answers nothing: no pass offered for it, only the Orc's.
    await keep.untilGone("answer-bat");
    seen.answersAfterDefeat = (await keep.observe()).answers;
    await keep.untilShown("no-moment-ana");
    seen.noMoment = {
      text: await keep.text("no-moment-ana"),
      offered: await keep.locator("held-ana").locator("select, button").count(),
    };
    await pause("no-moment");
    seen.sizes.push(await bothSizes(keep, "no-moment", true));
    // The window closed, the count reaches Ana's delay floor: her turn, whose action may
    // target the defeated Bat (the daemon takes any combatant not removed as a target).
    await keep.click("pass-orc");
    await keep.untilGone("window-status");
    await keep.untilTurn("ana");
    seen.targets = await values(keep, "declare-target");
    await keep.choose("declare-kind", "attack");
    await keep.choose("declare-target", "bat");
    await keep.click("declare");
    await keep.untilText("turn", "Spent");

    // marvel, before the order is fixed: a defeated combatant still rolls (its player's dice),
    // and a condition counted on "its own turns" counts the target's even with a cause named.
    const duel = await TablePage.open(context, "duel", { token: settings.token, combat: settings.duel });
    await duel.untilShown("roll-form");
    seen.duelRollers = await values(duel, "roll-who");
    await duel.choose("roll-who", "cy");
    await duel.choose("roll-how", "physical");
    for (const i of [1, 2, 3]) await duel.choose("face-" + i, "4");
    await duel.click("roll");
    await duel.until("Cy's total", () =>
      document.querySelector('[data-testid="combatant-cy"] [data-testid="total"]')?.innerText.includes("14"));
    // Cy's 14 ties Ava's exactly: the table may order the tie, Cy in it.
    await duel.untilShown("ties-1");
    seen.duelTie = await values(duel, "ties-1-1");
    await duel.unfold("condition-form");
    await duel.choose("condition-target", "bo");
    await duel.fill("condition-note", "Dazzled");
    await duel.choose("condition-source", "ava");
    await duel.click("apply-condition");
    await duel.untilText("combatant-bo", "Dazzled");
    // The table starts and both combatants spend their reactions in one window.
    await pause("spend");
    await duel.untilTurn("ava");
    await duel.unfold("announce-form");
    await duel.untilText("reaction-spent", "Bo");
    seen.duel = {
      spent: await duel.text("reaction-spent"),
      boxes: await duel.locator("announce-form").locator("input[type=checkbox]").count(),
    };
    await duel.fill("announce-text", "The lights go out");
    await duel.click("announce");
    await duel.untilShown("window-status");
    seen.duel.window = { status: await duel.text("window-status"), offered: await duel.locator("window").locator(".empty").innerText() };
    seen.duel.answers = (await duel.observe()).answers;
    seen.duel.close = await duel.locator("close-window").count();
    seen.sizes.push(await bothSizes(duel, "window-for-nobody", true));
    return seen;
  },

  async dnd3e(context) {
    // The linked combat cannot be read: the picker says why instead of a blank page; then it
    // cannot be followed: the picker again, saying why; the third time it opens.
    let gate;
    const table = await TablePage.open(context, "dnd3e", { token: settings.token, combat: settings.combat }, async (page) => {
      gate = await interpose(page);
      gate.refuse.set("get_combat", { code: "internal_error", message: "the combat could not be read" });
    });
    await table.untilShown("pick");
    const opening = [await table.error()];
    same(await table.locator("combat").inputValue(), settings.combat, "the picker offers the linked combat");
    await table.shot("open-refused");
    gate.refuse.set("subscribe", { code: "internal_error", message: "the combat could not be followed" });
    await table.click("open");
    await table.untilText("error-message", "followed");
    await table.untilShown("pick");
    opening.push(await table.error());
    await table.shot("follow-refused");
    await table.click("open");
    await table.untilShown("start-combat");
    same(table.page.url().includes("token="), false, "a linked token leaves the address bar");
    await table.page.reload();
    await table.untilShown("start-combat");
    const seen = await table.observe();
    const steps = [`not started: ${await table.text("round")}`];
    await table.shot("not-started");
    await table.click("start-combat");
    await table.untilTurn("ana");
    steps.push(`start combat: ${await table.text("round")}, ${await table.text("turn-name")}'s turn`);
    await table.shot("started");
    same(await table.text("hold"), "Delay the turn", "dnd3e delays");
    await table.click("hold");
    await table.untilShown("hold-ana");
    await table.untilTurn("orc");
    const title = await table.locator("holds").locator("h2").innerText();
    steps.push(`delay: ${await table.text("turn-name")}'s turn, Ana ${title.toLowerCase()}`);
    await table.shot("delay");
    await table.fill("reserve-trigger", "When Ana steps out of the shadows");
    await table.click("reserve");
    await table.untilShown("trigger");
    steps.push(`ready: ${await table.text("trigger")}`);
    // R9, R11: readying spent the standard action, the only one dnd3e readies, and is acting.
    await table.untilGone("reserve-form");
    check(await table.locator("hold").count() === 0, "no delay once the turn has acted");
    steps.push(`after readying: no delay, no ready form, ${await table.text("end-turn")}`);
    await table.shot("ready");

    await table.choose("held-when", "after");
    await table.choose("held-other", "orc");
    await table.click("take-held-ana");
    await table.untilText("plan", "Orc");
    await table.click("end-turn");
    await table.untilTurn("ana");
    steps.push(`Ana's delayed turn: ${await table.text("turn-kind")}`);
    await table.shot("delayed-turn");

    // Round 2: the Orc delays and reaches its floor once Ana has acted (R9).
    await table.click("end-turn");
    await table.untilText("round", "Round 2");
    await table.untilTurn("orc");
    await table.click("hold");
    await table.untilTurn("ana");
    await table.click("end-turn");
    await table.until("the Orc at its delay floor", () =>
      document.querySelector('[data-testid="turn"][data-combatant="orc"] [data-testid="turn-kind"]') !== null);
    await table.untilShown("reserve-form");
    check(await table.locator("hold").count() === 0, "no delay at the delay floor");
    steps.push(`Orc's turn ${await table.text("turn-kind")}: no delay, a ready form`);
    await table.shot("delay-floor");

    // Refocus (R14) spends the whole turn: nothing left to ready.
    await table.click("refocus");
    await table.untilGone("reserve-form");
    steps.push(`refocused: no ready form, ${await table.text("end-turn")}`);
    await table.shot("refocused");
    return { totals: seen.totals, fantastic: seen.fantastic, opening, steps };
  },

  // The narrator changes the turn timer mid-combat from the console (set_turn_timer, R13): a
  // shorter one leaves the running turn's countdown alone and times the next turn, which the
  // daemon's clock ends by itself; turned off, the running turn's countdown goes.
  async timer(context) {
    const steps = [];
    const table = await TablePage.open(context, "narrator", { token: settings.token, combat: settings.combat });
    await table.untilTurn("ann");
    await table.untilShown("timer-countdown");
    await table.unfold("turn-timer-form");
    steps.push(`now: ${await table.text("turn-timer-now")}`);
    same(await table.locator("turn-timer-seconds").inputValue(), "600", "the length shown to change");

    await table.fill("turn-timer-seconds", "0.5");
    await table.click("set-turn-timer");
    steps.push(`0.5 refused: ${(await table.error()).text}`);

    await table.fill("turn-timer-seconds", "2");
    await table.click("set-turn-timer");
    await table.untilText("turn-timer-now", "2 s");
    steps.push(`set: ${await table.text("turn-timer-now")}`);
    await table.untilText("log-lines", "Turn timer: 2 s a turn, from the next turn.");
    check(await table.seconds("timer-countdown") > 60, "ann's turn keeps its ten minutes");
    const sizes = await bothSizes(table, "turn-timer", true);

    await table.click("end-turn");
    await table.untilTurn("bob");
    check(await table.seconds("timer-countdown") <= 2, "bob's turn is timed at the new length");
    // Nobody clicks: the daemon's clock ends bob's turn, and ann's next turn is timed too.
    await table.untilText("round", "Round 2");
    await table.untilTurn("ann");
    steps.push(`expired: ${await table.text("turn-name")}'s turn, ${await table.text("round")}`);

    await table.click("turn-timer-off");
    await table.untilGone("timer");
    await table.untilText("turn-timer-now", "not timed");
    steps.push(`off: ${await table.text("turn-timer-now")}`);
    same(await table.locator("turn-timer-seconds").inputValue(), "", "no length once off");
    check(await table.locator("turn-timer-off").count() === 0, "nothing left to turn off");
    await table.shot("timer-off");
    return { steps, sizes };
  },
};

// The console's scenario runs once per ruleset (settings.ruleset), each with its own screenshots.
for (const ruleset of ["marvel", "dnd3e"]) scenarios["console-" + ruleset] = scenarios.console;
delete scenarios.console;

// Running one -------------------------------------------------------------------------------

const scenario = scenarios[scenarioName];
if (!scenario) {
  console.error(`no scenario ${scenarioName}; known: ${Object.keys(scenarios).join(", ")}`);
  process.exit(2);
}
mkdirSync(settings.artifacts, { recursive: true });
mkdirSync(settings.profile, { recursive: true });
// A fresh profile every run: nothing cached or remembered from an earlier one.
const profile = mkdtempSync(join(settings.profile, "run-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: settings.chromium,
  headless: true,
  args: CHROMIUM_ARGS,
  locale: "en-US",
  viewport: { width: 1360, height: 900 },
});
context.setDefaultTimeout(WAIT_MS);
let failed = null;
let result = null;
try {
  result = await scenario(context);
  check(problems.length === 0, `the page reported errors:\n${problems.join("\n")}`);
} catch (error) {
  failed = error;
  for (const page of context.pages()) {
    await page.screenshot({ path: join(settings.artifacts, "failed.png"), fullPage: true }).catch(() => {});
  }
} finally {
  await context.close();
}
if (failed) {
  console.error(failed.stack || String(failed));
  if (problems.length) console.error(problems.join("\n"));
  process.exit(1);
}
console.log(JSON.stringify({ scenario: scenarioName, screenshots, ...result }));
process.exit(0); // stdin may still be open
