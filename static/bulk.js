// @ts-check
// The table's selection and bulk actions: cancel or re-run the selected tasks, or every
// task matching the filter. The hub counts them first (a dry run), a dialog asks, then the
// hub acts and says how many it did and refused.

import { $, $$, announce } from "./dom.js";
import { count, selectionText } from "./format.js";
import { api, failed } from "./session.js";
import { state } from "./state.js";
import { loadPage, taskTable } from "./tasks-panel.js";

/** @type {Record<"cancel" | "rerun", [string, string]>} the action's verb, and its past */
const BULK_VERBS = { cancel: ["Cancel", "cancelled"], rerun: ["Re-run", "re-run"] };

/**
 * The selection changed: the count, the buttons acting on it, the page's checkbox.
 * @param {string[]} ids
 * @param {number} shown the rows on the page
 */
export function onSelection(ids, shown) {
  const selected = ids.length;
  $("#selection-count").textContent = selectionText(selected);
  for (const button of $$("#bulk-bar [data-scope=ids]", HTMLButtonElement)) {
    button.disabled = selected === 0;
  }
  const all = $("#select-page", HTMLInputElement);
  all.checked = selected > 0 && selected >= shown;
  all.indeterminate = selected > 0 && selected < shown;
}

/**
 * Count what a bulk action would act on (dry run), ask in a dialog, then do it.
 * @param {"cancel" | "rerun"} action
 * @param {"ids" | "filter"} scope the selected tasks, or all matching the filter
 * @param {HTMLElement} opener gets the focus back
 */
async function bulkAction(action, scope, opener) {
  const room = state.session.room;
  if (!room) return;
  const ids = scope === "ids" ? [...taskTable.selected] : null;
  const target = ids ? { ids } : { filter: state.table.filter };
  const [verb, done] = BULK_VERBS[action];
  let dry;
  try {
    dry = await api().bulk(room, action, { ...target, dryRun: true });
  } catch (error) {
    failed(error, `Could not count the tasks to ${verb.toLowerCase()}`);
    return;
  }
  const dialog = $("#bulk-dialog", HTMLDialogElement);
  const what = ids ? "selected" : "matching the filter";
  $("#bulk-dialog-title").textContent = `${verb} tasks`;
  const refusedText = dry.refused ? ` ${dry.refused} of them would be refused.` : "";
  $("#bulk-dialog-text").textContent = `${verb} ${count(dry.matched, "task")} ${what}?${refusedText}`;
  $("#bulk-dialog-text").dataset.matched = String(dry.matched);
  const confirm = $("#bulk-confirm", HTMLButtonElement);
  confirm.textContent = `${verb} ${dry.matched}`;
  confirm.disabled = dry.matched === 0;
  dialog.returnValue = "";
  dialog.showModal();
  $(dry.matched ? "#bulk-confirm" : "#bulk-dismiss").focus();
  const answer = await new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue), { once: true });
  });
  opener.focus();
  if (answer !== "confirm") return;
  try {
    const result = await api().bulk(room, action, target);
    const message = `${result.succeeded} of ${result.matched} ${done}; ${result.refused} refused.`;
    const out = $("#bulk-result");
    out.textContent = message;
    out.dataset.succeeded = String(result.succeeded);
    out.dataset.refused = String(result.refused);
    announce(message);
    taskTable.clearSelection();
    loadPage();
  } catch (error) {
    failed(error, `Could not ${verb.toLowerCase()} the tasks`);
  }
}

/** Listen to the bulk bar's buttons (data-bulk: the action, data-scope: ids or filter). */
export function wireBulkActions() {
  for (const button of $$("#bulk-bar [data-bulk]", HTMLButtonElement)) {
    const action = button.dataset.bulk === "rerun" ? "rerun" : "cancel";
    const scope = button.dataset.scope === "ids" ? "ids" : "filter";
    button.addEventListener("click", () => bulkAction(action, scope, button));
  }
}
