// The turn timer mid-combat (set_turn_timer, R13): the narrator sets the length of the turns that
// start from now on, or turns the timer off. The running turn keeps its deadline (nobody's turn
// ends by surprise), unless the timer is turned off: then its countdown stops too.

import { button, field, fold, h } from "./dom.js";
import { t } from "./i18n.js";
import { form } from "./setup.js";

/** Whole seconds a turn may last (protocol.md, set_turn_timer). */
const MIN_SECONDS = 1;
const MAX_SECONDS = 86400;

/** The length the next turns get, in seconds, or null: no timer (View.options). */
export function turnTimeLimit(view) {
  const option = (view.options || []).find(([name]) => name === "turn_time_limit");
  return option ? option[1] : null;
}

/** The narrator's turn timer control, folded away like the other now-and-then controls; null
 * for players, observers and a combat that is over. */
export function turnTimerControl(scene, run, refuse) {
  if (scene.session.role !== "narrator" || scene.view.phase === "ended") return null;
  const now = turnTimeLimit(scene.view);
  const seconds = h("input", {
    type: "number", step: 1, min: MIN_SECONDS, max: MAX_SECONDS, inputmode: "numeric", class: "narrow",
    name: "seconds", value: now ?? "", "data-testid": "turn-timer-seconds",
  });
  const submit = (event) => {
    event.preventDefault();
    const typed = seconds.value.trim();
    const n = Number(typed);
    if (seconds.validity.badInput || typed === "" || !Number.isInteger(n) || n < MIN_SECONDS || n > MAX_SECONDS) {
      return refuse(t("A turn timer is a whole number of seconds from 1 to 86400."));
    }
    return run("setTurnTimer", { seconds: n });
  };
  const off = now === null ? null
    : button(t("Turn the timer off"), "turn-timer-off", () => run("setTurnTimer", { seconds: null }), "danger");
  const control = form(t("Turn timer"), "turn-timer-form", "turn-timer", submit,
    h("p", { class: "muted", "data-testid": "turn-timer-now" },
      now === null ? t("Turns are not timed.") : t("Each turn lasts {seconds} s.", { seconds: now })),
    field(t("Seconds a turn"), seconds, t("From the next turn on: the current turn keeps its time.")),
    h("div", { class: "row" },
      h("button", { type: "submit", class: "button primary", "data-testid": "set-turn-timer" }, t("Set the timer")),
      off));
  // The page says what it will not send in its own words (refuse), not the browser's tooltip.
  control.noValidate = true;
  return fold(control, false);
}
