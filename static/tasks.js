// @ts-check
// The room's task table: one line per task, a page the hub chose (server-side filters,
// sort and pagination: view=summary), kept live by task_status_event. Events are queued
// and applied once per animation frame, and only the rows that changed are touched, so a
// burst of thousands of events a minute leaves the page responsive.

import { h } from "./dom.js";
import { clock, duration, jobLabel, shortId } from "./format.js";
import { RERUNNABLE, UNFINISHED, label, notOlder, taskFromEvent } from "./statuses.js";

/** @import { Task, TaskEvent } from "./types.js" */

/**
 * @typedef {object} TableHandlers
 * @property {(task: Task, row: Row) => void} open
 * @property {(task: Task, row: Row) => void} cancel
 * @property {(task: Task, row: Row) => void} rerun
 * @property {(task: Task) => boolean} [mayCancel]
 * @property {(task: Task) => string} [submitterName]
 * @property {(ids: string[], shown: number) => void} [selection]
 * @property {(task: Task, previous: Task) => void} [changed] a row shown changed
 * @property {(tasks: Task[]) => void} [added] new tasks went on top
 * @property {() => void} [outOfPage] an event changed what the page should hold: read it again
 */

/**
 * "1.2 s" from one timestamp to another, or "" when either is missing.
 * @param {string | null | undefined} from
 * @param {string | null | undefined} to
 */
function span(from, to) {
  return from && to ? duration(from, to) : "";
}

export class TaskTable {
  /**
   * @param {HTMLElement} tbody
   * @param {TableHandlers} handlers
   * @param {(task: Task) => boolean} [matches] does a task match the filter (as far as the
   *   page can tell)? Every task does, unless given.
   */
  constructor(tbody, handlers, matches = () => true) {
    this.tbody = tbody;
    this.handlers = handlers;
    this.matches = matches;
    /** @type {Map<string, Row>} task id -> Row, in page order in the DOM */
    this.rows = new Map();
    /** @type {Set<string>} */
    this.selected = new Set();
    /** @type {Map<string, TaskEvent>} task id -> its latest queued event */
    this.queue = new Map();
    this.frame = 0;
    this.newOnTop = true; // the first page, newest first: new tasks go on top
    this.limit = 50;
    this.applied = 0; // events applied so far (see `mark`)
    /** @type {Map<string, number>} task id -> `applied` when an event put it on top */
    this.addedAt = new Map();
  }

  get size() {
    return this.rows.size;
  }

  /** @param {string} id */
  has(id) {
    return this.rows.has(id);
  }

  /** @param {string} id */
  task(id) {
    return this.rows.get(id)?.task;
  }

  /** A point in the stream of events; give it to `setPage` to keep what comes after it. */
  mark() {
    return this.applied;
  }

  /** Show a fetched page, in its order; rows of tasks already shown are updated in place
   * (keeping a newer state an event brought), others built, the rest removed. New tasks
   * events put on top after `since` (a `mark()` taken before the request: the answer may
   * not know them yet) stay there while they match. Returns how many were kept so.
   * @param {Task[]} items
   * @param {number} [since]
   */
  setPage(items, since = Infinity) {
    const listed = new Set(items.map((task) => task.id));
    const late = this.newOnTop
      ? [...this.rows.values()].filter((row) => !listed.has(row.task.id)
        && (this.addedAt.get(row.task.id) ?? -1) > since && this.matches(row.task))
      : [];
    items = [...late.map((row) => row.task), ...items].slice(0, this.limit);
    const keep = new Set(items.map((task) => task.id));
    for (const [id, row] of this.rows) {
      if (keep.has(id)) continue;
      row.root.remove();
      this.rows.delete(id);
    }
    let cursor = this.tbody.firstElementChild;
    const rows = new Map();
    for (const item of items) {
      let row = this.rows.get(item.id);
      if (!row) row = new Row(item, this.handlers, this);
      else if (notOlder(item, row.task)) row.update({ ...row.task, ...item });
      else if (item.submitter && !row.task.submitter) row.update({ ...row.task, submitter: item.submitter });
      rows.set(item.id, row);
      if (row.root === cursor) cursor = cursor.nextElementSibling;
      else this.tbody.insertBefore(row.root, cursor);
    }
    this.rows = rows;
    for (const id of [...this.selected]) if (!rows.has(id)) this.selected.delete(id);
    for (const id of [...this.addedAt.keys()]) if (!rows.has(id)) this.addedAt.delete(id);
    this.#selectionChanged();
    return late.length;
  }

  /**
   * Queue a live event; applied with the others on the next animation frame.
   * @param {TaskEvent} event
   */
  push(event) {
    const known = this.queue.get(event.id);
    if (known && known.version != null && event.version != null && event.version < known.version) {
      return;
    }
    this.queue.set(event.id, event);
    if (!this.frame) this.frame = requestAnimationFrame(() => this.flush());
  }

  /** Apply the queued events: rows shown are updated, new tasks the page accepts go on
   * top (the last rows go past the page's size). */
  flush() {
    this.frame = 0;
    const events = [...this.queue.values()];
    this.queue.clear();
    let outOfPage = false;
    /** @type {Task[]} */
    const added = [];
    for (const event of events) {
      const task = taskFromEvent(event);
      const row = this.rows.get(task.id);
      this.applied += 1;
      if (row) {
        if (!notOlder(task, row.task)) continue;
        const previous = row.task;
        row.update({ ...previous, ...task });
        if (!this.matches(row.task)) outOfPage = true; // it leaves the page on the next read
        this.handlers.changed?.(row.task, previous);
      } else if (this.matches(task)) {
        if (this.newOnTop) added.push(task);
        else outOfPage = true; // it may belong somewhere on this page
      }
    }
    if (added.length) {
      // Newest first, on top; the page keeps its size.
      added.sort((a, b) => {
        const [x, y] = [a.created_at ?? "", b.created_at ?? ""];
        return x < y ? 1 : x > y ? -1 : 0;
      });
      const first = this.tbody.firstElementChild;
      /** @type {Map<string, Row>} */
      const fresh = new Map();
      for (const task of added) {
        const row = new Row(task, this.handlers, this);
        fresh.set(task.id, row);
        this.addedAt.set(task.id, this.applied);
        this.tbody.insertBefore(row.root, first);
      }
      this.rows = new Map([...fresh, ...this.rows]);
      for (const [lastId, last] of [...this.rows].slice(this.limit)) {
        last.root.remove();
        this.rows.delete(lastId);
        this.selected.delete(lastId);
      }
      this.handlers.added?.(added);
    }
    if (outOfPage) this.handlers.outOfPage?.();
  }

  /**
   * Newer snapshots of tasks (e.g. their queue places): only rows shown change.
   * @param {Task[]} items
   */
  updateShown(items) {
    for (const task of items) {
      const row = this.rows.get(task.id);
      if (row && notOlder(task, row.task)) row.update({ ...row.task, ...task });
    }
  }

  refreshActions() {
    for (const row of this.rows.values()) row.refreshActions();
  }

  /**
   * @param {string} id
   * @param {boolean} on
   */
  select(id, on) {
    if (on) this.selected.add(id);
    else this.selected.delete(id);
    this.rows.get(id)?.setSelected(on);
    this.#selectionChanged();
  }

  /** @param {boolean} on */
  selectPage(on) {
    for (const [id, row] of this.rows) {
      if (on) this.selected.add(id);
      else this.selected.delete(id);
      row.setSelected(on);
    }
    this.#selectionChanged();
  }

  clearSelection() {
    this.selectPage(false);
    this.selected.clear();
    this.#selectionChanged();
  }

  #selectionChanged() {
    this.handlers.selection?.([...this.selected], this.rows.size);
  }
}

/** One task's table row; built once, then updated in place (only what changed). */
export class Row {
  /**
   * @param {Task} task
   * @param {TableHandlers} handlers
   * @param {TaskTable} table
   */
  constructor(task, handlers, table) {
    this.handlers = handlers;
    this.table = table;
    this.task = task;
    this.cancelForbidden = false;
    this.check = h("input", { type: "checkbox", class: "row-select" });
    this.check.addEventListener("change", () => table.select(this.task.id, this.check.checked));
    this.job = h("span", { class: "job" });
    this.scope = h("span", { class: "scope" });
    this.badge = h("span", { class: "badge" });
    this.queuePlace = h("span", { class: "queue" });
    this.bar = h("span", { class: "bar-fill" });
    this.meter = h("span", {
      class: "bar", role: "progressbar", "aria-valuemin": "0", "aria-valuemax": "100",
    }, this.bar);
    this.progressText = h("span", { class: "progress-text" });
    this.progress = h("span", { class: "progress" }, this.meter, this.progressText);
    this.cells = {
      submitter: h("td", { class: "col-submitter" }),
      worker: h("td", { class: "col-worker" }),
      created: h("td", { class: "col-created" }),
      waited: h("td", { class: "col-waited" }),
      ran: h("td", { class: "col-ran" }),
      attempt: h("td", { class: "col-attempt" }),
    };
    this.cancelButton = h("button", { type: "button", class: "danger small" }, "Cancel");
    this.rerunButton = h("button", { type: "button", class: "small" }, "Re-run");
    this.cancelButton.addEventListener("click", () => handlers.cancel(this.task, this));
    this.rerunButton.addEventListener("click", () => handlers.rerun(this.task, this));
    this.message = h("span", { class: "task-message", role: "alert" });
    this.root = h("tr", { class: "task", tabindex: "0", dataset: { taskId: task.id } },
      h("td", { class: "col-select" }, this.check),
      h("th", { scope: "row", class: "col-job" }, this.job, this.scope),
      h("td", { class: "col-status" }, this.badge, this.queuePlace, this.progress),
      ...Object.values(this.cells),
      h("td", { class: "col-actions" }, this.cancelButton, this.rerunButton, this.message),
    );
    this.root.addEventListener("click", (event) => {
      if (event.target instanceof Element && event.target.closest("button, input, a")) return;
      handlers.open(this.task, this);
    });
    this.root.addEventListener("keydown", (event) => {
      if (event.target !== this.root) return;
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        handlers.open(this.task, this);
      }
    });
    this.update(task, null);
    this.setSelected(table.selected.has(task.id));
  }

  /**
   * @param {Task} task
   * @param {Task | null} [previous] what the row showed (null: nothing yet)
   */
  update(task, previous = this.task) {
    this.task = task;
    const set = (/** @type {HTMLElement} */ el, /** @type {string} */ text) => {
      if (el.textContent !== text) el.textContent = text;
    };
    if (!previous || previous.job_name !== task.job_name) {
      const { name, scope } = jobLabel(task.job_name ?? "");
      this.job.textContent = name;
      this.scope.textContent = ` ${scope} · ${shortId(task.id)}`;
      this.check.setAttribute("aria-label", `Select ${name} ${shortId(task.id)}`);
      this.root.setAttribute("aria-label", `${name} ${shortId(task.id)}`);
      this.cancelButton.setAttribute("aria-label", `Cancel ${name} ${shortId(task.id)}`);
      this.rerunButton.setAttribute("aria-label", `Re-run ${name} ${shortId(task.id)}`);
    }
    const status = task.status ?? "";
    if (this.root.dataset.status !== status) this.root.dataset.status = status;
    set(this.badge, label(task.status));
    this.badge.dataset.status = status;
    set(this.queuePlace, task.status === "pending" && task.queue_position != null
      ? `#${task.queue_position} in queue` : "");
    this.#updateProgress(task);
    set(this.cells.submitter, this.handlers.submitterName?.(task) ?? task.submitter ?? "");
    set(this.cells.worker, task.worker_id ? shortId(task.worker_id) : "");
    this.cells.worker.title = task.worker_id ?? "";
    set(this.cells.created, clock(task.created_at));
    this.cells.created.title = task.created_at ?? "";
    set(this.cells.waited, span(task.created_at, task.started_at));
    set(this.cells.ran, span(task.started_at, task.completed_at));
    const max = task.max_attempts ? ` / ${task.max_attempts}` : "";
    set(this.cells.attempt, task.attempt ? `${task.attempt}${max}` : "");
    this.refreshActions();
  }

  /** @param {Task} task */
  #updateProgress(task) {
    // In the table: while it runs, and where a failed or cancelled one stopped.
    const shown = task.status === "running"
      || (task.progress != null && (task.status === "failed" || task.status === "cancelled"));
    this.progress.hidden = !shown;
    if (!shown) return;
    const done = task.status === "completed" ? 1 : (task.progress ?? 0);
    const percent = Math.round(Math.min(1, Math.max(0, done)) * 100);
    this.bar.style.width = `${percent}%`;
    this.meter.setAttribute("aria-valuenow", String(percent));
    const message = task.status === "completed" ? null : task.progress_message;
    this.meter.setAttribute("aria-valuetext", message ? `${percent}%, ${message}` : `${percent}%`);
    const text = message ? `${percent}% · ${message}` : `${percent}%`;
    if (this.progressText.textContent !== text) this.progressText.textContent = text;
  }

  /** Cancel while active and the viewer may; Re-run on failed and cancelled tasks. */
  refreshActions() {
    const cancellable = UNFINISHED.has(this.task.status ?? "") && !this.cancelForbidden
      && (this.handlers.mayCancel?.(this.task) ?? true);
    if (!cancellable && document.activeElement === this.cancelButton) this.root.focus();
    this.cancelButton.hidden = !cancellable;
    this.rerunButton.hidden = !RERUNNABLE.has(this.task.status ?? "");
  }

  /** @param {boolean} on */
  setSelected(on) {
    this.check.checked = on;
    this.root.classList.toggle("selected", on);
  }

  /** @param {string} text */
  showMessage(text) {
    this.message.textContent = text;
  }

  /**
   * The hub refused to cancel this task for this person: no more Cancel.
   * @param {string} reason
   */
  forbidCancel(reason) {
    this.cancelForbidden = true;
    this.refreshActions();
    this.showMessage(`You may not cancel this task: ${reason}`);
  }
}
