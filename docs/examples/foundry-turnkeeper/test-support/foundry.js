// A stand-in for the parts of Foundry VTT (v13) the example module touches, in memory: Hooks,
// game (settings, users, combats, messages, i18n), ui.notifications, ChatMessage, and Combat and
// Combatant documents whose methods fire the hooks Foundry's do, in the same order. Several
// browsers share it: a hook Foundry fires in every browser (updateCombat, createChatMessage...)
// runs once per user, with `game.user` set to that user, as the module's code would see it; a
// hook that fires only in the browser that acted (preUpdate..., combatStart, combatTurn...) runs
// once. Kept out of test/, where Node's test runner would take it for a test file.

import { readFile } from "node:fs/promises";

/**
 * Install the globals Foundry gives a module, before the module is imported.
 * @param {{module: string, users: {id: string, name: string, isGM: boolean}[], lang: string,
 *   translations: string, generation?: number}} options `translations`: the module's lang/
 *   folder; `generation`: Foundry's major version, 12 or 13 (chat cards render differently)
 */
export async function installFoundry({ module, users, lang, translations, generation = 13 }) {
  const problems = [];
  const notices = [];
  const texts = flatten(JSON.parse(await readFile(`${translations}/${lang}.json`, "utf8")));

  const listeners = new Map();
  const Hooks = {
    on(name, fn) {
      listeners.set(name, [...(listeners.get(name) ?? []), { fn, once: false }]);
    },
    once(name, fn) {
      listeners.set(name, [...(listeners.get(name) ?? []), { fn, once: true }]);
    },
    /** Every listener in turn; one returning false stops the rest and cancels the workflow. */
    call(name, ...args) {
      for (const listener of [...(listeners.get(name) ?? [])]) {
        if (listener.once) listeners.set(name, listeners.get(name).filter((l) => l !== listener));
        if (run(name, listener.fn, args) === false) return false;
      }
      return true;
    },
    callAll(name, ...args) {
      for (const listener of [...(listeners.get(name) ?? [])]) {
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

  /** A hook every browser fires, each with its own user. */
  function everywhere(name, ...args) {
    const acting = game.user;
    try {
      for (const user of game.users) {
        game.user = user;
        Hooks.callAll(name, ...args);
      }
    } finally {
      game.user = acting;
    }
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
      if (!this.canUpdate(game.user)) {
        throw new Error(`${game.user.name} lacks permission to update ${name} ${this.id}`);
      }
      merge(this, structuredClone(changes));
      everywhere(`update${name}`, this, changes, options, game.user.id);
      return this;
    }
    canUpdate(user) {
      return user.isGM;
    }
  }

  class Combatant extends Document {
    static documentName = "Combatant";
    constructor(data, parent) {
      super({ initiative: null, defeated: false, hidden: false, owners: [], ...data }, parent);
    }
    /** The non-GM users who own it. */
    get players() {
      return this.owners.map((id) => game.users.get(id)).filter((user) => !user.isGM);
    }
    canUpdate(user) {
      return user.isGM || this.owners.includes(user.id);
    }
    async delete(options = {}) {
      if (Hooks.call("preDeleteCombatant", this, options, game.user.id) === false) return undefined;
      this.parent.combatants.delete(this.id);
      everywhere("deleteCombatant", this, options, game.user.id);
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
    }
    /** Highest initiative first, then by name (Foundry's order of turns). */
    get turns() {
      const initiative = (c) => (typeof c.initiative === "number" ? c.initiative : -Infinity);
      return this.combatants.contents.sort(
        (a, b) => initiative(b) - initiative(a) || a.name.localeCompare(b.name),
      );
    }
    get combatant() {
      return this.turn === null ? undefined : this.turns[this.turn];
    }
    get started() {
      return this.round > 0;
    }
    async createEmbeddedDocuments(type, data) {
      return data.map((each) => {
        const combatant = new Combatant(each, this);
        this.combatants.set(combatant.id, combatant);
        everywhere("createCombatant", combatant, {}, game.user.id);
        return combatant;
      });
    }
    async updateEmbeddedDocuments(type, updates, options = {}) {
      const done = [];
      for (const { _id, ...changes } of updates) {
        const updated = await this.combatants.get(_id).update(changes, { ...options });
        if (updated) done.push(updated);
      }
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
      const options = { advanceTime: 0, direction: 1 };
      Hooks.callAll("combatTurn", this, data, options);
      return this.update(data, options);
    }
    async nextRound() {
      const data = { round: this.round + 1, turn: 0 };
      const options = { advanceTime: 0, direction: 1 };
      Hooks.callAll("combatRound", this, data, options);
      return this.update(data, options);
    }
    async previousTurn() {
      if (this.turn === 0 && this.round === 0) return this;
      if (this.turn === 0 || this.turn === null) return this.previousRound();
      const data = { round: this.round, turn: this.turn - 1 };
      const options = { advanceTime: 0, direction: -1 };
      Hooks.callAll("combatTurn", this, data, options);
      return this.update(data, options);
    }
    async previousRound() {
      const round = Math.max(this.round - 1, 0);
      const data = { round, turn: round === 0 ? null : this.turns.length - 1 };
      const options = { advanceTime: 0, direction: -1 };
      Hooks.callAll("combatRound", this, data, options);
      return this.update(data, options);
    }
    /** Foundry rolls each combatant's formula, writes the totals, keeps the current combatant's
     * turn, then posts a roll card flagged `core.initiativeRoll`. */
    async rollInitiative(ids) {
      const current = this.combatant?.id;
      const rolls = ids.map((id) => ({ _id: id, initiative: 1 + Math.floor(Math.random() * 20) }));
      await this.updateEmbeddedDocuments("Combatant", rolls);
      if (current) await this.update({ turn: this.turns.findIndex((c) => c.id === current) });
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

  const settings = new Map();
  const game = {
    release: { generation },
    modules: new Map([[module, { id: module, active: true }]]),
    users: new Collection(users.map((user) => [user.id, { ...user }])),
    combats: new Collection(),
    combat: null,
    messages: new Collection(),
    settings: {
      register(namespace, key, config) {
        settings.set(`${namespace}.${key}`, { config, value: config.default });
      },
      get(namespace, key) {
        const setting = settings.get(`${namespace}.${key}`);
        if (!setting) throw new Error(`${namespace}.${key} is not a registered setting`);
        return setting.value;
      },
      async set(namespace, key, value) {
        game.settings.get(namespace, key);
        settings.get(`${namespace}.${key}`).value = value;
      },
    },
    i18n: {
      lang,
      localize: (key) => texts[key] ?? key,
      format: (key, data) =>
        (texts[key] ?? key).replace(/\{(\w+)\}/g, (whole, name) => String(data[name] ?? whole)),
    },
  };
  game.user = game.users.find((user) => user.isGM);
  Object.defineProperty(game.users, "activeGM", { get: () => game.users.find((u) => u.isGM) });

  Object.assign(globalThis, {
    Hooks,
    game,
    ui: { notifications: notify(notices) },
    ChatMessage,
    Combat,
    foundry: { utils: { randomID } },
  });

  return {
    problems,
    notices,
    /** Run `fn` in the browser of the user `userId`. */
    asClient(userId, fn) {
      const acting = game.user;
      game.user = game.users.get(userId);
      try {
        return fn();
      } finally {
        game.user = acting;
      }
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
        // v13 hands the hook the message's element; v12 a jQuery object around it.
        const jquery = Object.assign([root], { jquery: "3" });
        if (generation >= 13) Hooks.callAll("renderChatMessageHTML", message, root, {});
        else Hooks.callAll("renderChatMessage", message, jquery, {});
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
