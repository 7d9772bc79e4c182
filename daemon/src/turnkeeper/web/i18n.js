// The page's words: t("English text") looks the text up in the catalogue the daemon serves at
// /i18n/<locale>.json ({"locale": ..., "messages": {"English text": "translation"}}).
// Babel extracts every t("...") of web/*.js into the gettext catalogue, so each t() call takes a
// plain string literal; values go in the second argument: t("Round {n}", {n: 3}).

/** The languages the page offers, each named in its own language (so never translated). */
export const LOCALES = [
  ["en", "English"],
  ["pt-BR", "Português (Brasil)"],
];

let messages = {};
let current = "en";

/** The supported locale closest to a BCP 47 tag, as the daemon negotiates it (pt-PT → pt-BR). */
function negotiate(tag) {
  const language = String(tag || "").replace("_", "-").split("-")[0].toLowerCase();
  return language === "pt" ? "pt-BR" : "en";
}

/** The page's locale now. */
export function locale() {
  return current;
}

/** Loads the catalogue of a locale and makes it the page's. English's holds the labels of the
 * rule words (term()); without it the page still speaks English, rule words as their codes. */
export async function useLocale(tag) {
  const wanted = negotiate(tag);
  let loaded;
  try {
    const response = await fetch("/i18n/" + encodeURIComponent(wanted) + ".json");
    if (!response.ok) throw new Error("/i18n/" + wanted + ".json: HTTP " + response.status);
    loaded = (await response.json()).messages || {};
  } catch (error) {
    if (wanted !== "en") throw error;
    loaded = {};
  }
  messages = loaded;
  current = wanted;
  document.documentElement.lang = wanted;
}

/** The text in the page's language, with {name} placeholders filled from args. */
export function t(text, args) {
  const template = messages[text] || text;
  if (!args) return template;
  return template.replace(/\{(\w+)\}/g, (whole, key) => (key in args ? String(args[key]) : whole));
}

/** A rule word (an action's kind or type, as the engine names it) in the page's language: the
 * daemon's own label of it (i18n.py's TERMS, gettext context `kind`), or the word as it is when
 * it is none of the rulesets' (a kind a narrator typed in). */
export function term(kind, word) {
  return messages[kind + "\x04" + word] ?? word;
}
