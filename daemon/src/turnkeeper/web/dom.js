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

/** A button that is no form's submit. */
export function button(text, testid, onclick, kind) {
  return h("button", { type: "button", class: "button " + (kind || ""), "data-testid": testid, onclick }, text);
}

/** A titled group of controls; `scope` names what it is about (see rebuildKeepingInput). */
export function group(title, testid, scope, ...body) {
  return h("div", { class: "control-group", "data-testid": testid, "data-scope": scope, role: "group", "aria-label": title },
    h("h3", null, title), body);
}

/**
 * Puts a form back as it was drawn once the command it sent (`sent`, run()'s promise of
 * whether it was accepted) is: the next one starts afresh. The form is looked up when the
 * answer comes, since the page may have drawn it anew meanwhile (see rebuildKeepingInput); a
 * refused command leaves it as typed, to be corrected.
 */
export async function clearWhenDone(sent, testid) {
  if (!(await sent)) return;
  const form = document.querySelector(`[data-testid="${testid}"]`);
  if (!form) return;
  for (const element of form.querySelectorAll("input, select, textarea")) {
    if (!drawnWith.has(element)) continue;
    const drawn = drawnWith.get(element);
    if (element.type === "checkbox") element.checked = drawn === "true";
    else element.value = drawn;
    element.dispatchEvent(new Event("change"));
  }
}

/** A select of [value, text] pairs with one chosen. */
export function select(attributes, options, chosen) {
  return h("select", attributes, options.map(([value, text]) =>
    h("option", { value, selected: value === chosen }, text)));
}

/** What each field held when it was drawn: a field whose value differs was typed into. */
const drawnWith = new WeakMap();

/**
 * Replaces what `container` holds with `build()`, keeping what the person typed: each field they
 * changed gets its value back in the new drawing if a field of the same data-testid is there in
 * an element of the same data-scope (the form is still about the same thing), and the field they
 * were typing in keeps the focus and the caret.
 */
export function rebuildKeepingInput(container, build) {
  const fields = (root) => [...root.querySelectorAll("input, select, textarea")]
    .map((element) => [keyOf(element), element])
    .filter(([key]) => key !== null);
  // A field not drawn with the rest was added by what the person chose (a reroll's face once
  // an edge is given): what it holds is theirs too.
  const typed = new Map(fields(container).filter(([, e]) => !drawnWith.has(e) || drawnWith.get(e) !== valueOf(e))
    .map(([key, e]) => [key, valueOf(e)]));
  // Folded sections the person opened stay open.
  const opened = new Set([...container.querySelectorAll("details[data-fold]")].filter((d) => d.open).map((d) => d.dataset.fold));
  const focused = container.contains(document.activeElement) ? document.activeElement : null;
  const focusKey = focused ? keyOf(focused) : null;
  const caret = focused ? selection(focused) : null;
  container.replaceChildren(build());
  for (const details of container.querySelectorAll("details[data-fold]")) {
    if (opened.has(details.dataset.fold)) details.open = true;
  }
  // A field put back may draw others (a select showing a stated action, the edges asking for
  // their reroll faces): those are filled in on the next pass.
  const seen = new Set();
  let fresh;
  while ((fresh = fields(container).filter(([, element]) => !seen.has(element))).length) {
    for (const [key, element] of fresh) {
      seen.add(element);
      drawnWith.set(element, valueOf(element));
      const value = typed.get(key);
      const select = element.tagName === "SELECT";
      // A choice no longer offered (a combatant gone) is not put back.
      if (value !== undefined && (!select || [...element.options].some((option) => option.value === value))) {
        if (element.type === "checkbox") element.checked = value === "true";
        else element.value = value;
        element.dispatchEvent(new Event("change"));
      }
      if (key === focusKey) {
        element.focus();
        if (caret) {
          try {
            element.setSelectionRange(...caret);
          } catch {
            // Number inputs have no caret to set.
          }
        }
      }
    }
  }
}

/** What a field holds: a checkbox's state, else its value. */
function valueOf(element) {
  return element.type === "checkbox" ? String(element.checked) : element.value;
}

/**
 * A section that folds away: `element`'s own title becomes the summary that opens it. The page
 * keeps it open across redrawings once opened (rebuildKeepingInput); `open` is how it starts.
 */
export function fold(element, open) {
  const title = element.querySelector(":scope > h3");
  const testid = element.dataset.testid;
  title?.remove();
  return h("details", { class: "fold", "data-fold": testid, open },
    h("summary", { "data-testid": "open-" + testid }, title ? title.textContent : testid), element);
}

function keyOf(element) {
  const scope = element.closest("[data-scope]");
  if (!scope || !element.dataset.testid) return null;
  return scope.dataset.scope + " " + element.dataset.testid;
}

function selection(element) {
  try {
    return element.selectionStart === null ? null : [element.selectionStart, element.selectionEnd];
  } catch {
    return null;
  }
}

/** Seconds as m:ss (or h:mm:ss), never negative. */
export function clock(seconds) {
  const s = Math.max(0, Math.ceil(seconds));
  const hours = Math.floor(s / 3600);
  const minutes = Math.floor((s % 3600) / 60);
  const rest = String(s % 60).padStart(2, "0");
  return hours ? hours + ":" + String(minutes).padStart(2, "0") + ":" + rest : minutes + ":" + rest;
}
