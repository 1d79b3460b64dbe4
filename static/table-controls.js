// @ts-check
// The task table's controls: the filter form (status, job, submitter, worker, search), the
// sortable column heads and the pager. Their state is `state.table`, kept in the URL.

import { $, $$, ensureOption } from "./dom.js";
import { writeUrl } from "./router.js";
import { ariaSort, nextSort, pageOffset, sameTable, state, tableFromParams } from "./state.js";
import { loadStats } from "./stats-panel.js";
import { loadPage, taskTable } from "./tasks-panel.js";
import { throttle } from "./throttle.js";

/** @import { Status } from "./types.js" */

const SEARCH_PAUSE_MS = 300; // the search is read once typing pauses this long

/** Read the table's state (and the overview's window) from the URL into `state` and the
 * controls; whether the table's changed. */
export function readTableState() {
  const { table, stats } = state;
  const before = { ...table };
  const read = tableFromParams(new URLSearchParams(location.search));
  table.filter = read.filter;
  table.sort = read.sort;
  table.offset = read.offset;
  if (read.window !== null && read.window !== stats.window) {
    stats.window = read.window;
    $("#window-select", HTMLSelectElement).value = stats.window;
    if (state.session.room) loadStats();
  }
  showTableState();
  return !sameTable(before, table);
}

/** The controls show `state.table`. */
function showTableState() {
  const { filter, sort } = state.table;
  for (const box of $$("#task-filters input[name=status]", HTMLInputElement)) {
    box.checked = filter.status.includes(/** @type {Status} */ (box.value));
  }
  const selects = /** @type {const} */ ([
    ["#filter-job", "job"], ["#filter-submitter", "submitted_by"], ["#filter-worker", "worker_id"],
  ]);
  for (const [selector, key] of selects) {
    const select = $(selector, HTMLSelectElement);
    ensureOption(select, filter[key]);
    select.value = filter[key];
  }
  const search = $("#filter-q", HTMLInputElement);
  if (search !== document.activeElement) search.value = filter.q;
  for (const th of $$("#task-table th[data-sort]")) {
    th.setAttribute("aria-sort", ariaSort(sort, th.dataset.sort ?? ""));
  }
}

/** The filter changed in the controls: back to the first page, into the URL, read. */
function onFilterChange() {
  state.table.filter = {
    status: $$("#task-filters input[name=status]:checked", HTMLInputElement)
      .map((box) => /** @type {Status} */ (box.value)),
    job: $("#filter-job", HTMLSelectElement).value,
    submitted_by: $("#filter-submitter", HTMLSelectElement).value,
    worker_id: $("#filter-worker", HTMLSelectElement).value,
    q: $("#filter-q", HTMLInputElement).value.trim(),
  };
  state.table.offset = 0;
  taskTable.clearSelection();
  writeUrl();
  loadPage();
}

/** @param {number} delta pages forward (negative: back) */
function goToPage(delta) {
  state.table.offset = pageOffset(state.table.offset, delta);
  taskTable.clearSelection();
  writeUrl();
  loadPage();
}

/** @param {string} key the column's sort key */
function onSort(key) {
  state.table.sort = nextSort(state.table.sort, key);
  state.table.offset = 0;
  showTableState();
  writeUrl();
  loadPage();
}

/** Listen to the controls. */
export function wireTableControls() {
  const form = $("#task-filters", HTMLFormElement);
  form.addEventListener("change", (event) => {
    if (!(event.target instanceof HTMLElement && event.target.id === "filter-q")) onFilterChange();
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    onFilterChange();
  });
  const search = throttle(onFilterChange, { delay: SEARCH_PAUSE_MS, restart: true });
  $("#filter-q").addEventListener("input", () => search.schedule());
  for (const th of $$("#task-table th[data-sort]")) {
    $("button", HTMLButtonElement, th).addEventListener("click", () => onSort(th.dataset.sort ?? ""));
  }
  $("#select-page", HTMLInputElement).addEventListener("change", (event) => {
    taskTable.selectPage(/** @type {HTMLInputElement} */ (event.currentTarget).checked);
  });
  $("#page-prev").addEventListener("click", () => goToPage(-1));
  $("#page-next").addEventListener("click", () => goToPage(1));
}
