// @ts-check
// The open room's task table (tasks.js) and its page: read from the hub with the table's
// filter, sort and offset (an older answer is dropped), read again when events change what
// it should hold (at most once per PAGE_REFRESH_MS), and each row's Cancel and Re-run.

import { ApiError } from "./api.js";
import { onSelection } from "./bulk.js";
import { openDetail } from "./detail-panel.js";
import { $, replaceOptions } from "./dom.js";
import { count, messageOf, pageRange, shortId } from "./format.js";
import { announceTask } from "./live-events.js";
import { api, failed, signedOutBy, submitterName, viewerMayCancel } from "./session.js";
import { matchesFilter, noteStatus, PAGE, state } from "./state.js";
import { eventFromTask } from "./statuses.js";
import { TaskTable } from "./tasks.js";
import { throttle } from "./throttle.js";

/** @import { Row } from "./tasks.js" */
/** @import { Task } from "./types.js" */

// An event changed what the shown page should hold: read it again at most this often.
const PAGE_REFRESH_MS = 1000;

export const taskTable = new TaskTable($("#tasks"), {
  open: (task, row) => openDetail(task.id, row.root, task),
  cancel: cancelTask,
  rerun: rerunTask,
  mayCancel: viewerMayCancel,
  submitterName,
  selection: onSelection,
  changed: announceTask,
  added: (tasks) => {
    state.table.total += tasks.length;
    updateTaskCount();
  },
  outOfPage: () => pageRefresh.schedule(),
}, (task) => matchesFilter(state.table.filter, task, state.session.me?.id));

/** Events changed what the page should hold: read it again, at most once per
 * PAGE_REFRESH_MS however many come (a read for another reason counts). */
export const pageRefresh = throttle(() => loadPage(), { interval: PAGE_REFRESH_MS });

/** Read the shown page again (filter, sort and page from `state.table`); only the answer
 * to the latest request is used. */
export async function loadPage() {
  const room = state.session.room;
  if (!room) return;
  const { table } = state;
  const { generation } = state.room;
  table.request += 1;
  const request = table.request;
  pageRefresh.ran();
  taskTable.newOnTop = table.offset === 0 && table.sort === "-created_at";
  const since = taskTable.mark(); // events from now on may be newer than the answer
  $("#task-table").setAttribute("aria-busy", "true");
  try {
    const page = await api().taskSummaries(room, table.filter, {
      sort: table.sort, limit: PAGE, offset: table.offset,
    });
    if (generation !== state.room.generation || request !== table.request) return;
    for (const task of page.items) {
      if (task.submitter && task.submitted_by) state.userNames.set(task.submitted_by, task.submitter);
      if (task.status) noteStatus(state.lastStatus, task.id, task.status);
    }
    drawSubmitters();
    taskTable.limit = PAGE;
    const late = taskTable.setPage(page.items, since);
    table.total = page.total + late;
    updateTaskCount();
    // A task heard of after the request may be in its total too (committed before the read,
    // yet below its page): read again once the events let up, when none is late.
    if (late) pageRefresh.schedule();
  } catch (error) {
    if (request === table.request) failed(error, "Could not load the tasks");
  } finally {
    if (request === table.request) $("#task-table").setAttribute("aria-busy", "false");
  }
}

/** The submitter filter offers everyone whose tasks the page has seen. */
function drawSubmitters() {
  const select = $("#filter-submitter", HTMLSelectElement);
  const me = state.session.me?.id;
  const others = [...state.userNames].filter(([id]) => id !== me)
    .sort((a, b) => a[1].localeCompare(b[1]));
  const wanted = ["", "me", ...others.map(([id]) => id)];
  const have = [...select.options].map((option) => option.value);
  if (wanted.length === have.length && wanted.every((value, i) => value === have[i])) return;
  replaceOptions(select, [new Option("Anyone", ""), new Option("Mine", "me"),
    ...others.map(([id, name]) => new Option(name, id))]);
}

/** The count of matching tasks, where the page is among them, and the pager's buttons. */
export function updateTaskCount() {
  const shown = taskTable.size;
  const { total, offset } = state.table;
  $("#tasks-count").textContent = count(total, "task");
  $("#tasks-count").dataset.total = String(total);
  $("#page-info").textContent = pageRange(offset, shown, total);
  $("#page-prev", HTMLButtonElement).disabled = offset === 0;
  $("#page-next", HTMLButtonElement).disabled = offset + shown >= total;
  $("#tasks-empty").hidden = shown > 0;
}

/**
 * A row's Cancel: the hub's answer updates the row; its 403 withdraws the button.
 * @param {Task} task
 * @param {Row} row
 */
async function cancelTask(task, row) {
  row.showMessage("");
  try {
    const updated = await api().cancel(task.id);
    taskTable.push(eventFromTask(updated));
  } catch (error) {
    if (error instanceof ApiError && error.status === 403) row.forbidCancel(error.message);
    else if (!signedOutBy(error)) row.showMessage(`Could not cancel: ${messageOf(error)}`);
  }
}

/**
 * A row's Re-run: says which task it made (the list shows it once read again).
 * @param {Task} task
 * @param {Row} row
 */
async function rerunTask(task, row) {
  row.showMessage("");
  try {
    const created = await api().rerun(task.id);
    row.showMessage(`Re-run as ${shortId(created.id)}.`);
    pageRefresh.schedule();
  } catch (error) {
    if (!signedOutBy(error)) row.showMessage(`Could not re-run: ${messageOf(error)}`);
  }
}
