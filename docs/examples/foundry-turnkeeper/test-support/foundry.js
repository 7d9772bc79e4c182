// A stand-in for the parts of Foundry VTT (v13, whose API v14 keeps for what the module uses) the
// module touches, in memory: Hooks, game (settings, users, actors, combats, messages, socket,
// i18n), ui.notifications, CONFIG.specialStatusEffects, ChatMessage, and Actor, ActiveEffect,
// Combat, CombatantGroup and Combatant documents whose methods fire the hooks Foundry's do, in the
// same order. Several browsers share it, each with its own copy of the module (`load`): its own
// state, hooks, socket listeners and client settings. `game.user` is the user of the browser whose
// code runs, kept across that code's awaits (an AsyncLocalStorage). A hook Foundry fires in every
// browser (updateCombat, createChatMessage...) runs in each connected user's browser; a hook that
// fires only in the browser that acted (preUpdate..., combatStart, combatTurn...) runs in that one.
// Users join and leave (`join`, `leave`): `game.users.activeGM` is the connected GM with the lowest
// id, and the others' browsers hear `userConnected`. What the module relies on is modelled as
// Foundry's v13 code does it: turns sorted by initiative then id; a write of combatants keeps the
// current combatant's turn (Combatant#_preUpdateOperation sets `combatTurn` to its new index unless
// given), a deletion keeps the turn's index (so the turn may land on someone else) unless
// `combatTurn` says otherwise, and both run turn events (here the `combatTurnChange` hook) unless
// `turnEvents: false`; the module socket relays a message, with its sender's user id, to every
// other browser, and only with `"socket": true` in module.json; a player may update only what they
// own. Kept out of test/, where Node's test runner would take it for a test file.

import { AsyncLocalStorage } from "node:async_hooks";
import { readFile } from "node:fs/promises";

const DEFEATED = "dead";

/**
 * Install the globals Foundry gives a module, before the module is imported.
 * @param {{folder: string, users: {id: string, name: string, isGM: boolean}[], lang: string}}
 *   options `folder`: the module's folder (its module.json and lang/)
 */
export async function installFoundry({ folder, users, lang }) {
  const problems = [];
  const notices = [];
  const manifest = JSON.parse(await readFile(`${folder}/module.json`, "utf8"));
  const module = manifest.id;
  const texts = flatten(JSON.parse(await readFile(`${folder}/lang/${lang}.json`, "utf8")));

  /** Whose browser the running code is in; outside any, the first GM's (the test's own). */
  const browser = new AsyncLocalStorage();
  /** The browser a copy of the module is being loaded into: its hooks are that browser's. */
  let loading = null;
  const owner = () => loading ?? game.user.id;

  const listeners = new Map();
  /** This browser's listeners of `name`. */
  const heard = (name) => (listeners.get(name) ?? []).filter((l) => l.owner === game.user.id);
  const Hooks = {
    on(name, fn) {
      listeners.set(name, [...(listeners.get(name) ?? []), { fn, once: false, owner: owner() }]);
    },
    once(name, fn) {
      listeners.set(name, [...(listeners.get(name) ?? []), { fn, once: true, owner: owner() }]);
    },
    /** Every listener in turn; one returning false stops the rest and cancels the workflow. */
    call(name, ...args) {
      for (const listener of heard(name)) {
        if (listener.once) listeners.set(name, listeners.get(name).filter((l) => l !== listener));
        if (run(name, listener.fn, args) === false) return false;
      }
      return true;
    },
    callAll(name, ...args) {
      for (const listener of heard(name)) {
        if (listener.once) listeners.set(name, listeners.get(name).filter((l) => l !== listener));
        run(name, listener.fn, args);
      }
      return true;
    },
  };
  // Foundry logs a listener's error and goes on; here it is kept for the test to fail on.
  function run(name, fn, args) {
    try {
      return fn(...args);
    } catch (error) {
      problems.push(`hook ${name}: ${error.stack}`);
      return undefined;
    }
  }

  /** A hook every connected browser fires, each with its own user. */
  function everywhere(name, ...args) {
    for (const user of game.users) {
      if (user.active) inBrowser(user, () => Hooks.callAll(name, ...args));
    }
  }

  function inBrowser(user, fn) {
    return browser.run(user, fn);
  }

  class Collection extends Map {
    [Symbol.iterator]() {
      return this.values();
    }
    get contents() {
      return [...this.values()];
    }
    find(fn) {
      return this.contents.find(fn);
    }
    filter(fn) {
      return this.contents.filter(fn);
    }
    some(fn) {
      return this.contents.some(fn);
    }
  }

  class Document {
    constructor(data, parent = null) {
      Object.assign(this, structuredClone({ flags: {}, ...data }));
      this._id ??= randomID();
      this.parent = parent;
    }
    get id() {
      return this._id;
    }
    /** The stored data: what a field holds before Foundry resolves it (an id, not a document). */
    get _source() {
      return this;
    }
    getFlag(scope, key) {
      return this.flags[scope]?.[key];
    }
    setFlag(scope, key, value) {
      return this.update({ flags: { [scope]: { [key]: value } } });
    }
    /** Foundry's update: the acting browser's preUpdate hook may cancel it (resolving to
     * undefined); the server refuses a user without permission; then every browser hears it. */
    async update(changes, options = {}) {
      const name = this.constructor.documentName;
      if (Hooks.call(`preUpdate${name}`, this, changes, options, game.user.id) === false) {
        return undefined;
      }
      this.permitted(game.user);
      const before = this.parent?.state?.();
      merge(this, structuredClone(changes));
      everywhere(`update${name}`, this, changes, options, game.user.id);
      if (before) this.parent.updatedCombatants(before, options);
      return this;
    }
    permitted(user) {
      if (!this.canUpdate(user)) {
        throw new Error(`${user.name} lacks permission to change ${this.constructor.documentName}`);
      }
    }
    canUpdate(user) {
      return user.isGM;
    }
  }

  class ActiveEffect extends Document {
    static documentName = "ActiveEffect";
    constructor(data, parent) {
      super(data, parent);
      this.statuses = new Set(data.statuses);
    }
  }

  class Actor extends Document {
    static documentName = "Actor";
    static async create(data) {
      const actor = new Actor(data);
      game.actors.set(actor.id, actor);
      return actor;
    }
    constructor(data) {
      super({ owners: [], ...data });
      this.effects = new Collection();
    }
    canUpdate(user) {
      return user.isGM || this.owners.includes(user.id);
    }
    get statuses() {
      return new Set(this.effects.contents.flatMap((effect) => [...effect.statuses]));
    }
    /** v13's Actor#toggleStatusEffect: creates or deletes the status's effect, through the
     * preCreate/preDelete hooks that may cancel it. */
    async toggleStatusEffect(statusId, { active, overlay = false } = {}) {
      const existing = this.effects.find((effect) => effect.statuses.has(statusId));
      active ??= !existing;
      if (active && !existing) {
        const effect = new ActiveEffect({ name: statusId, statuses: [statusId], overlay }, this);
        if (Hooks.call("preCreateActiveEffect", effect, {}, {}, game.user.id) === false) return;
        this.permitted(game.user);
        this.effects.set(effect.id, effect);
        everywhere("createActiveEffect", effect, {}, game.user.id);
        return effect;
      }
      if (!active && existing) {
        if (Hooks.call("preDeleteActiveEffect", existing, {}, game.user.id) === false) return;
        this.permitted(game.user);
        this.effects.delete(existing.id);
        everywhere("deleteActiveEffect", existing, {}, game.user.id);
        return false;
      }
      return active;
    }
  }

  class CombatantGroup extends Document {
    static documentName = "CombatantGroup";
  }

  class Combatant extends Document {
    static documentName = "Combatant";
    constructor(data, parent) {
      const blank = { initiative: null, defeated: false, hidden: false, owners: [], group: null };
      super({ ...blank, ...data }, parent);
    }
    /** The non-GM users who own it. */
    get players() {
      return this.owners.map((id) => game.users.get(id)).filter((user) => !user.isGM);
    }
    get actor() {
      return game.actors.get(this.actorId) ?? null;
    }
    /** v13: the field holds the group's id; the property gives the document. */
    get group() {
      return this.parent.groups.get(this._group) ?? null;
    }
    set group(id) {
      this._group = id;
    }
    get _source() {
      return { ...this, group: this._group };
    }
    get isDefeated() {
      return this.defeated || Boolean(this.actor?.statuses.has(DEFEATED));
    }
    canUpdate(user) {
      return user.isGM || this.owners.includes(user.id);
    }
    async delete(options = {}) {
      if (Hooks.call("preDeleteCombatant", this, options, game.user.id) === false) return undefined;
      this.permitted(game.user);
      const before = this.parent.state();
      this.parent.combatants.delete(this.id);
      everywhere("deleteCombatant", this, options, game.user.id);
      this.parent.modified(before, options);
      return this;
    }
  }

  /** Foundry's Combat, its turn methods shortened to what they do with hooks and updates. */
  class Combat extends Document {
    static documentName = "Combat";
    static async create(data = {}) {
      const combat = new Combat({ round: 0, turn: null, ...data });
      game.combats.set(combat.id, combat);
      game.combat = combat;
      everywhere("createCombat", combat, {}, game.user.id);
      return combat;
    }
    constructor(data) {
      super(data);
      this.combatants = new Collection();
      this.groups = new Collection();
    }
    /** Combat#_sortCombatants: highest initiative first, none last, equal ones by id. */
    get turns() {
      const initiative = (c) => (Number.isFinite(c.initiative) ? c.initiative : -Infinity);
      return this.combatants.contents.sort(
        (a, b) => initiative(b) - initiative(a) || (a.id > b.id ? 1 : -1),
      );
    }
    get combatant() {
      return this.turn === null ? undefined : this.turns[this.turn];
    }
    get started() {
      return this.round > 0;
    }
    /** What Foundry's turn events compare: the round, the turn and who has it. */
    state() {
      return { round: this.round, turn: this.turn, combatant: this.combatant?.id ?? null };
    }
    /** After combatants are written: v13's Combat#onModifyCombatants and setupTurns. The turn's
     * index is kept (or set to `combatTurn`), so re-sorted turns may put someone else on it; an
     * index past the end wraps to the next round; a change runs the turn events unless
     * `turnEvents: false`. After a write of the Combat itself, the same events. */
    modified(before, { combatTurn, turnEvents } = {}) {
      if (typeof combatTurn === "number") this.turn = combatTurn;
      if (this.turn !== null && this.turn >= this.combatants.size) {
        this.turn = 0;
        this.round += 1;
      }
      const after = this.state();
      const changed = Object.keys(after).some((key) => after[key] !== before[key]);
      if (changed && turnEvents !== false && this.started) {
        everywhere("combatTurnChange", this, before, after);
      }
    }
    /** After a write of combatants: v12's and v13's Combatant._preUpdateOperation gives the
     * operation, unless it has one, the `combatTurn` the current combatant has in the new order,
     * so the turn stays with it (foundryvtt#11531, #12990); then as any change of combatants. */
    updatedCombatants(before, options) {
      const turn = this.turns.findIndex((c) => c.id === before.combatant);
      const keeping = turn >= 0 && options.combatTurn === undefined;
      this.modified(before, keeping ? { ...options, combatTurn: turn } : options);
    }
    async update(changes, options = {}) {
      const before = this.state();
      const updated = await super.update(changes, options);
      if (updated) this.modified(before, options);
      return updated;
    }
    async createEmbeddedDocuments(type, data) {
      const Kind = { Combatant, CombatantGroup }[type];
      const collection = type === "Combatant" ? this.combatants : this.groups;
      return data.map((each) => {
        const document = new Kind(each, this);
        collection.set(document.id, document);
        everywhere(`create${type}`, document, {}, game.user.id);
        return document;
      });
    }
    /** One operation: each change goes through its preUpdate hook, then the turns are set up
     * once, as Foundry does for a batch. */
    async updateEmbeddedDocuments(type, updates, options = {}) {
      const before = this.state();
      const done = [];
      for (const { _id, ...changes } of updates) {
        const combatant = this.combatants.get(_id);
        if (Hooks.call("preUpdateCombatant", combatant, changes, options, game.user.id) === false) {
          continue;
        }
        combatant.permitted(game.user);
        merge(combatant, structuredClone(changes));
        everywhere("updateCombatant", combatant, changes, options, game.user.id);
        done.push(combatant);
      }
      if (done.length) this.updatedCombatants(before, options);
      return done;
    }
    async startCombat() {
      const data = { round: 1, turn: 0 };
      Hooks.callAll("combatStart", this, data);
      return this.update(data);
    }
    async nextTurn() {
      if (this.turn === null || this.turn >= this.turns.length - 1) return this.nextRound();
      const data = { round: this.round, turn: this.turn + 1 };
      const options = { direction: 1, worldTime: { delta: 0 } };
      Hooks.callAll("combatTurn", this, data, options);
      return this.update(data, options);
    }
    async nextRound() {
      const data = { round: this.round + 1, turn: 0 };
      const options = { direction: 1, worldTime: { delta: 0 } };
      Hooks.callAll("combatRound", this, data, options);
      return this.update(data, options);
    }
    async previousTurn() {
      if (this.turn === 0 && this.round === 0) return this;
      if (this.turn === 0 || this.turn === null) return this.previousRound();
      const data = { round: this.round, turn: this.turn - 1 };
      const options = { direction: -1, worldTime: { delta: 0 } };
      Hooks.callAll("combatTurn", this, data, options);
      return this.update(data, options);
    }
    async previousRound() {
      const round = Math.max(this.round - 1, 0);
      const data = { round, turn: round === 0 ? null : this.turns.length - 1 };
      const options = { direction: -1, worldTime: { delta: 0 } };
      Hooks.callAll("combatRound", this, data, options);
      return this.update(data, options);
    }
    /** Foundry rolls each combatant's formula, writes the totals without turn events, then posts a
     * roll card flagged `core.initiativeRoll`. */
    async rollInitiative(ids) {
      const rolls = ids.map((id) => ({ _id: id, initiative: 1 + Math.floor(Math.random() * 20) }));
      await this.updateEmbeddedDocuments("Combatant", rolls, { turnEvents: false });
      await ChatMessage.create(
        rolls.map(({ _id, initiative }) => ({
          content: String(initiative),
          flavor: `${this.combatants.get(_id).name} rolls for Initiative!`,
          flags: { core: { initiativeRoll: true } },
        })),
      );
      return this;
    }
  }

  class ChatMessage extends Document {
    static documentName = "ChatMessage";
    static async create(data) {
      if (Array.isArray(data)) {
        const created = [];
        for (const each of data) created.push(await ChatMessage.create(each));
        return created.filter(Boolean);
      }
      const message = new ChatMessage({ whisper: [], author: game.user.id, ...data });
      if (Hooks.call("preCreateChatMessage", message, data, {}, game.user.id) === false) {
        return undefined;
      }
      game.messages.set(message.id, message);
      everywhere("createChatMessage", message, {}, game.user.id);
      return message;
    }
  }

  /** What went over the module's socket, for the test to check what travelled there. */
  const sent = [];
  const socketListeners = [];
  const socket = {
    on(event, fn) {
      socketListeners.push({ event, fn, owner: owner() });
    },
    /** Foundry relays a package's socket event, as it was sent, to every other connected
     * browser, later, with the id of the user who sent it as the listener's second argument
     * (the server knows whose connection it came on); a package gets one only with
     * `"socket": true` in its manifest. */
    emit(event, message) {
      if (manifest.socket !== true || event !== `module.${module}`) {
        throw new Error(`${event}: no socket for ${module} (module.json needs "socket": true)`);
      }
      const sender = game.user;
      sent.push({ from: sender.id, message: structuredClone(message) });
      setTimeout(() => {
        for (const user of game.users) {
          if (user === sender || !user.active) continue;
          inBrowser(user, () => {
            const mine = (l) => l.event === event && l.owner === user.id;
            for (const listener of socketListeners.filter(mine)) {
              run(`socket ${event}`, listener.fn, [structuredClone(message), sender.id]);
            }
          });
        }
      }, 0);
    },
  };

  /** World settings are shared; a client setting is each browser's own. */
  const settings = new Map();
  const key = (namespace, name) => {
    const world = `${namespace}.${name}`;
    const scope = settings.get(world)?.config.scope ?? "world";
    return scope === "client" ? `${game.user.id}:${world}` : world;
  };
  /** Each browser's Game#modules: the module's entry, to which it adds its `api`. */
  const modules = new Map();
  const game = {
    modules: {
      get(id) {
        if (id !== module) return undefined;
        if (!modules.has(game.user.id)) modules.set(game.user.id, { id, active: true });
        return modules.get(game.user.id);
      },
    },
    users: new Collection(users.map((user) => [user.id, { active: true, ...user }])),
    actors: new Collection(),
    combats: new Collection(),
    socket,
    combat: null,
    messages: new Collection(),
    settings: {
      register(namespace, name, config) {
        const world = `${namespace}.${name}`;
        if (!settings.has(world)) settings.set(world, { config, value: config.default });
      },
      get(namespace, name) {
        const world = settings.get(`${namespace}.${name}`);
        if (!world) throw new Error(`${namespace}.${name} is not a registered setting`);
        return (settings.get(key(namespace, name)) ?? world).value;
      },
      async set(namespace, name, value) {
        const { config } = settings.get(`${namespace}.${name}`);
        settings.set(key(namespace, name), { config, value });
      },
    },
    i18n: {
      lang,
      localize: (key) => texts[key] ?? key,
      format: (key, data) =>
        (texts[key] ?? key).replace(/\{(\w+)\}/g, (whole, name) => String(data[name] ?? whole)),
    },
  };
  const home = game.users.find((user) => user.isGM);
  Object.defineProperty(game, "user", { get: () => browser.getStore() ?? home });
  // v13's Users#activeGM: one connected GM, the same in every browser (here the lowest id).
  const byId = (a, b) => (a.id > b.id ? 1 : -1);
  Object.defineProperty(game.users, "activeGM", {
    get: () => game.users.filter((u) => u.isGM && u.active).sort(byId)[0] ?? null,
  });

  Object.assign(globalThis, {
    Hooks,
    game,
    ui: { notifications: notify(notices) },
    ChatMessage,
    Actor,
    Combat,
    CONFIG: { specialStatusEffects: { DEFEATED } },
    foundry: { utils: { randomID } },
  });

  /** How many copies of the module have been loaded, to load each from a URL of its own. */
  let copies = 0;
  return {
    problems,
    notices,
    sent,
    /** Run `fn` in the browser of the user `userId`, awaits included. */
    asClient(userId, fn) {
      return inBrowser(game.users.get(userId), fn);
    },
    /** Load a copy of the module (`url`: its script) into `userId`'s browser, as Foundry does at
     * each page load: a URL of its own makes it a module instance of its own. */
    async load(userId, url) {
      loading = userId;
      try {
        await import(`${url}?browser=${userId}&copy=${++copies}`);
      } finally {
        loading = null;
      }
    },
    /** `userId` connects: the others' browsers hear `userConnected`; then load their page with
     * `load` (and run its `init` and `ready`). */
    join(userId) {
      const user = game.users.get(userId);
      user.active = true;
      for (const other of game.users) {
        if (other !== user && other.active) {
          inBrowser(other, () => Hooks.callAll("userConnected", user, true));
        }
      }
    },
    /** `userId`'s browser closes: its code stops (its hooks and socket listeners go with it),
     * and the others' browsers hear `userConnected`. */
    leave(userId) {
      const user = game.users.get(userId);
      user.active = false;
      for (const [name, all] of listeners) {
        listeners.set(name, all.filter((l) => l.owner !== userId));
      }
      socketListeners.splice(0, Infinity, ...socketListeners.filter((l) => l.owner !== userId));
      modules.delete(userId);
      for (const other of game.users) {
        if (other.active) inBrowser(other, () => Hooks.callAll("userConnected", user, false));
      }
    },
    /** A click on a status in the Token HUD, as v13's TokenHUD#_onToggleEffect: the actor's
     * toggleStatusEffect, with the overlay for a right-click. */
    hudToggle(actor, statusId, { overlay = false } = {}) {
      return actor.toggleStatusEffect(statusId, { overlay });
    },
    /** The tracker's skull in the GM's browser, as v13's CombatTracker#_onToggleDefeatedStatus:
     * mark the combatant, then toggle its actor's defeated status effect with the overlay. */
    async toggleDefeated(combatant) {
      const defeated = !combatant.isDefeated;
      await combatant.update({ defeated });
      await combatant.actor?.toggleStatusEffect(DEFEATED, { overlay: true, active: defeated });
    },
    /** In `userId`'s browser: render a chat card as Foundry does, then click its button whose
     * `data-answer` is `answer` (and `data-reservation`, if given, is `reservation`). */
    click(userId, message, answer, reservation) {
      return this.asClient(userId, () => {
        const tags = message.content.matchAll(/<button\b[^>]*>/g);
        const buttons = [...tags].map(([tag]) => element(tag));
        const root = {
          querySelectorAll(selector) {
            if (selector !== "button[data-answer]") throw new Error(`no stand-in for ${selector}`);
            return buttons.filter((b) => b.dataset.answer !== undefined);
          },
        };
        Hooks.callAll("renderChatMessageHTML", message, root, {});
        const clicked = buttons.find(
          (b) =>
            b.dataset.answer === answer && (!reservation || b.dataset.reservation === reservation),
        );
        if (!clicked) throw new Error(`no ${answer} button in ${message.content}`);
        for (const listener of clicked.listeners) listener({ preventDefault() {} });
      });
    },
  };
}

function notify(notices) {
  const level = (name) => (text) => notices.push(`${name}: ${text}`);
  return { info: level("info"), warn: level("warn"), error: level("error") };
}

/** A button as the DOM would give it: its data attributes and its click listeners. */
function element(tag) {
  const dataset = {};
  for (const [, name, value] of tag.matchAll(/data-([\w-]+)="([^"]*)"/g)) {
    const key = name.replace(/-(\w)/g, (_, letter) => letter.toUpperCase());
    dataset[key] = value.replace(/&#(\d+);/g, (_, code) => String.fromCharCode(Number(code)));
  }
  const listeners = [];
  return {
    dataset,
    listeners,
    addEventListener(type, fn) {
      if (type === "click") listeners.push(fn);
    },
  };
}

/** Foundry merges an update into a document: nested objects key by key. */
function merge(target, changes) {
  for (const [key, value] of Object.entries(changes)) {
    const plain = value !== null && typeof value === "object" && !Array.isArray(value);
    if (plain && target[key] !== null && typeof target[key] === "object") merge(target[key], value);
    else target[key] = value;
  }
}

/** A translation file's nested keys as Foundry reads them: `A.B.c`. */
function flatten(tree, prefix = "") {
  const flat = {};
  for (const [key, value] of Object.entries(tree)) {
    if (typeof value === "object") Object.assign(flat, flatten(value, `${prefix}${key}.`));
    else flat[`${prefix}${key}`] = value;
  }
  return flat;
}

function randomID(length = 16) {
  const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  return Array.from({ length }, () => chars[Math.floor(Math.random() * chars.length)]).join("");
}
