// A few lines instead of a framework: elements are built with h() and text always goes in as
// text (names and trigger texts come from people, so nothing is ever parsed as HTML).

const PROPERTIES = new Set(["value", "checked", "disabled", "hidden", "selected", "required"]);

/**
 * An element: h("button", {class: "primary", onclick: go, "data-testid": "end-turn"}, "End turn").
 * Attributes named on* are listeners; value, checked, disabled, hidden, selected and required
 * are set as properties; null, undefined and false leave an attribute out. Children may be
 * strings, numbers, nodes, arrays of them, or null (skipped).
 */
export function h(tag, attributes, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (PROPERTIES.has(name)) element[name] = value;
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(element, child);
    else element.append(child instanceof Node ? child : String(child));
  }
}

/** A labelled form field: the label wraps its text and the control, so no ids are needed. */
export function field(label, control, hint) {
  return h("label", { class: "field" }, h("span", { class: "field-label" }, label), control,
    hint ? h("span", { class: "field-hint" }, hint) : null);
}

/** A select of [value, text] pairs with one chosen. */
export function select(attributes, options, chosen) {
  return h("select", attributes, options.map(([value, text]) =>
    h("option", { value, selected: value === chosen }, text)));
}

/** Seconds as m:ss (or h:mm:ss), never negative. */
export function clock(seconds) {
  const s = Math.max(0, Math.ceil(seconds));
  const hours = Math.floor(s / 3600);
  const minutes = Math.floor((s % 3600) / 60);
  const rest = String(s % 60).padStart(2, "0");
  return hours ? hours + ":" + String(minutes).padStart(2, "0") + ":" + rest : minutes + ":" + rest;
}
