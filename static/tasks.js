// The room's task list: a store of tasks by id, kept up to date from REST snapshots and
// live task_status_event payloads, and its view (newest first, filtered by status). It
// keeps at most `limit` tasks: past that, the oldest go (see `#trim`).

import { h } from "./dom.js";
import { clock, duration, jobLabel, json, shortId } from "./format.js";

export const ACTIVE = new Set(["pending", "claimed", "running"]);
const RANK = { pending: 0, claimed: 1, running: 2, completed: 3, failed: 3, cancelled: 3 };
const LABELS = {
  pending: "Pending",
  claimed: "Claimed",
  running: "Running",
  completed: "Completed",
  failed: "Failed",
  cancelled: "Cancelled",
};

/** A task_status_event payload as a task (the event calls the job's full name `name`). */
export function taskFromEvent(event) {
  const { name, ...rest } = event;
  return { ...rest, job_name: name };
}

/** Is a state of a task (a REST snapshot or an event) at least as recent as what we know?
 * A response may come after the events of later changes (e.g. the submit's 202), and events
 * of one task may come from several processes (replicas, the taskiq worker) out of order.
 * The hub counts each task's writes in `version`; without it (an older hub), attempts and
 * the order of statuses decide. */
function notOlder(state, known) {
  if (!known) return true;
  if (state.version != null && known.version != null) return state.version >= known.version;
  const attempts = (state.attempt ?? 0) - (known.attempt ?? 0);
  return attempts !== 0 ? attempts > 0 : RANK[state.status] >= RANK[known.status];
}

/** The hub's order of its pages (what "Load more" continues), to the microsecond. */
function newestFirst(a, b) {
  return Date.parse(b.created_at) - Date.parse(a.created_at)
    || microseconds(b.created_at) - microseconds(a.created_at)
    || (a.id < b.id ? 1 : -1);
}

/** The microseconds of a timestamp past its milliseconds (Date.parse stops there). */
function microseconds(timestamp) {
  const fraction = /\.(\d+)/.exec(timestamp)?.[1] ?? "";
  return Number(fraction.slice(3, 6).padEnd(3, "0"));
}

export class TaskList {
  /** handlers: { cancel(task), mayCancel(task), changed(task, previous), dropped(shown),
   * ignoredOlder() } */
  constructor(listEl, emptyEl, handlers) {
    this.listEl = listEl;
    this.emptyEl = emptyEl;
    this.handlers = handlers;
    this.filter = "";
    this.tasks = new Map();
    this.views = new Map();
    this.events = 0; // events applied so far: `mark()` before a fetch, `reset(…, since)`
    this.lastEvent = new Map(); // task id -> the count of events when its last one came
    this.limit = null; // how many tasks the store keeps at most (null: all)
    this.dropped = 0; // tasks let go so far to stay within `limit`
  }

  /** A point in the stream of events; give it to `reset` to keep what comes after it. */
  mark() {
    return this.events;
  }

  /** Replace the list with a fetched page, keeping newer states we already know, and the
   * tasks an event brought or changed after `since` (a `mark()` taken before the request:
   * the page may not know them yet) while they match the filter. Items are updated in
   * place: open details, messages and the keyboard focus stay. */
  reset(items, since = Infinity) {
    const old = this.tasks;
    this.tasks = new Map();
    for (const task of items) {
      const known = old.get(task.id);
      this.tasks.set(task.id, notOlder(task, known) ? { ...known, ...task } : known);
    }
    for (const [id, task] of old) {
      if (!this.tasks.has(id) && this.lastEvent.get(id) > since && this.#visible(task)) {
        this.tasks.set(id, task);
      }
    }
    for (const [id, view] of this.views) {
      if (this.tasks.has(id)) continue;
      view.root.remove();
      this.views.delete(id);
    }
    for (const id of this.lastEvent.keys()) {
      if (!this.tasks.has(id)) this.lastEvent.delete(id);
    }
    const shown = this.#trim();
    this.render();
    if (shown != null) this.handlers.dropped?.(shown);
  }

  /** Merge fetched tasks (a submit or cancel reply; with `quiet`, a further page). */
  addSnapshots(items, { quiet = false } = {}) {
    const changes = [];
    for (const task of items) {
      const known = this.tasks.get(task.id);
      if (notOlder(task, known)) changes.push(this.#store({ ...known, ...task }, known));
      else if (task.payload && !known.payload) {
        this.tasks.set(task.id, { ...known, payload: task.payload }); // an event's task
      }
    }
    const shown = this.#trim();
    this.render();
    if (!quiet) this.#announce(changes);
    if (shown != null) this.handlers.dropped?.(shown);
  }

  /** Apply a live event; returns true when the task was new to the list (and stays). */
  applyEvent(event) {
    const task = taskFromEvent(event);
    const known = this.tasks.get(task.id);
    if (known?.version != null && task.version != null && task.version < known.version) {
      return false; // a late event: the list already shows a later state
    }
    if (!known && this.#full() && this.#olderThanAll(task)) {
      // It would be the first to go; the hub has it, past the oldest task shown.
      if (this.#visible(task)) this.handlers.ignoredOlder?.();
      return false;
    }
    this.events += 1;
    this.lastEvent.set(task.id, this.events);
    const change = this.#store({ ...known, ...task }, known);
    const shown = this.#trim();
    this.render();
    this.#announce([change]);
    if (shown != null) this.handlers.dropped?.(shown);
    return !known && this.tasks.has(task.id);
  }

  has(id) {
    return this.tasks.has(id);
  }

  statusOf(id) {
    return this.tasks.get(id)?.status;
  }

  setFilter(status) {
    this.filter = status;
    this.render();
  }

  /** Is a pending task of a job whose full name passes `test` in the list? */
  hasPending(test) {
    return [...this.tasks.values()].some((t) => t.status === "pending" && test(t.job_name));
  }

  get size() {
    return [...this.tasks.values()].filter((task) => this.#visible(task)).length;
  }

  /** Store a task's new state; returns the change to announce once the list is trimmed. */
  #store(task, previous) {
    this.tasks.set(task.id, task);
    if (previous?.status === "pending" && task.status !== "pending") this.#moveQueue(previous);
    return [task, previous];
  }

  /** Tell the handlers of the changes to tasks still in the list (not of dropped ones). */
  #announce(changes) {
    for (const [task, previous] of changes) {
      if (this.tasks.has(task.id)) this.handlers.changed?.(task, previous);
    }
  }

  #full() {
    return this.limit != null && this.tasks.size >= this.limit;
  }

  #olderThanAll(task) {
    for (const other of this.tasks.values()) {
      if (newestFirst(task, other) <= 0) return false;
    }
    return true;
  }

  /** Keep at most `limit` tasks: drop those hidden by the filter first, then the oldest
   * shown, never a pinned one (open details, the keyboard focus). Returns how many of the
   * dropped were shown, or null when none went. */
  #trim() {
    if (this.limit == null || this.tasks.size <= this.limit) return null;
    const oldestFirst = [...this.tasks.values()].sort(newestFirst).reverse();
    const hidden = oldestFirst.filter((task) => !this.#visible(task));
    const visible = oldestFirst.filter((task) => this.#visible(task));
    let shown = 0;
    let dropped = 0;
    for (const task of [...hidden, ...visible]) {
      if (this.tasks.size <= this.limit) break;
      const view = this.views.get(task.id);
      if (view?.pinned) continue;
      view?.root.remove();
      this.views.delete(task.id);
      this.tasks.delete(task.id);
      this.lastEvent.delete(task.id);
      dropped += 1;
      if (this.#visible(task)) shown += 1;
    }
    this.dropped += dropped;
    return dropped ? shown : null;
  }

  /** A task left the queue: those behind it in its job's queue move up one place. */
  #moveQueue(left) {
    if (left.queue_position == null) return;
    for (const [id, other] of this.tasks) {
      if (
        other.status === "pending"
        && other.job_name === left.job_name
        && other.queue_position > left.queue_position
      ) {
        this.tasks.set(id, { ...other, queue_position: other.queue_position - 1 });
      }
    }
  }

  #visible(task) {
    return !this.filter || task.status === this.filter;
  }

  /** Show or hide every Cancel again: what the viewer may cancel became known. */
  refreshCancels() {
    for (const view of this.views.values()) view.refreshCancel();
  }

  /** Bring the DOM in line with the store, moving only items that are out of place
   * (moving an element would take the keyboard focus away from it). */
  render() {
    const visible = [...this.tasks.values()].filter((t) => this.#visible(t)).sort(newestFirst);
    const keep = new Set(visible.map((task) => task.id));
    for (const [id, view] of this.views) {
      if (!keep.has(id)) view.root.remove();
    }
    let cursor = this.listEl.firstElementChild;
    for (const task of visible) {
      let view = this.views.get(task.id);
      if (!view) {
        view = new TaskView(task, this.handlers);
        this.views.set(task.id, view);
      }
      if (view.task !== task) view.update(task); // stored tasks are replaced, never mutated
      if (view.root === cursor) cursor = cursor.nextElementSibling;
      else this.listEl.insertBefore(view.root, cursor);
    }
    this.emptyEl.hidden = visible.length > 0;
  }
}

/** One task's list item; built once, then updated in place. */
class TaskView {
  constructor(task, handlers) {
    const id = `task-${task.id}`;
    this.title = h("h3", { id: `${id}-title`, class: "task-title", tabindex: "-1" });
    this.badge = h("span", { class: "badge" });
    this.queue = h("span", { class: "queue" });
    this.bar = h("span", { class: "bar-fill" });
    this.meter = h("div", {
      class: "bar",
      role: "progressbar",
      "aria-valuemin": "0",
      "aria-valuemax": "100",
      "aria-labelledby": `${id}-title`,
    }, this.bar);
    this.progressText = h("span", { class: "progress-text" });
    this.progress = h("div", { class: "progress" }, this.meter, this.progressText);
    this.times = h("dl", { class: "meta" });
    this.outcome = h("div", { class: "outcome" });
    this.payload = h("pre", { class: "json" });
    this.cancelButton = h("button", { type: "button", class: "danger small" }, "Cancel");
    this.cancelButton.addEventListener("click", () => handlers.cancel(this.task, this));
    this.mayCancel = handlers.mayCancel ?? (() => true);
    this.message = h("p", { class: "task-message", role: "alert" });
    this.details = h("details", { class: "payload" }, h("summary", {}, "Payload"), this.payload);
    this.root = h(
      "li",
      { class: "task", id, "aria-labelledby": `${id}-title`, dataset: { taskId: task.id } },
      h("div", { class: "task-head" }, this.title, this.badge, this.queue),
      this.progress,
      this.times,
      this.outcome,
      h("div", { class: "task-foot" }, this.details, this.cancelButton),
      this.message,
    );
  }

  update(task) {
    this.task = task;
    const { name, scope } = jobLabel(task.job_name);
    this.root.dataset.status = task.status;
    this.title.replaceChildren(h("span", { class: "job" }, name), " ",
      h("span", { class: "scope" }, `${scope} · ${shortId(task.id)}`));
    this.badge.textContent = LABELS[task.status] ?? task.status;
    this.badge.dataset.status = task.status;
    this.queue.textContent = task.status === "pending" && task.queue_position != null
      ? `#${task.queue_position} in queue` : "";
    this.#updateProgress(task);
    this.#updateTimes(task);
    this.#updateOutcome(task);
    if (task.payload) this.payload.textContent = json(task.payload);
    this.details.hidden = !task.payload;
    this.cancelButton.setAttribute("aria-label", `Cancel ${name} ${shortId(task.id)}`);
    this.refreshCancel();
  }

  /** Offer Cancel while the task is active and the viewer may cancel it. */
  refreshCancel() {
    this.#setCancellable(ACTIVE.has(this.task.status) && this.mayCancel(this.task));
  }

  /** Kept however old: the person is reading (open details) or using (focus) it. */
  get pinned() {
    return this.details.open || this.root.contains(document.activeElement);
  }

  showMessage(text) {
    this.message.textContent = text;
  }

  /** The hub refused to cancel this task for this person: no more Cancel. (The page offers
   * Cancel only where the viewer may, as far as it knows: see `mayCancel` in app.js.) */
  forbidCancel(reason) {
    this.cancelForbidden = true;
    this.#setCancellable(false);
    this.showMessage(`You may not cancel this task: ${reason}`);
  }

  #updateProgress(task) {
    const shown = task.status === "running" || (task.progress != null && task.status !== "pending");
    this.progress.hidden = !shown;
    if (!shown) return;
    const done = task.status === "completed" ? 1 : (task.progress ?? 0);
    const percent = Math.round(Math.min(1, Math.max(0, done)) * 100);
    this.bar.style.width = `${percent}%`;
    this.meter.setAttribute("aria-valuenow", String(percent));
    // A completed task's last message ("1 s left") no longer holds; a failed one's says
    // where it stopped.
    const message = task.status === "completed" ? null : task.progress_message;
    this.meter.setAttribute("aria-valuetext", message ? `${percent}%, ${message}` : `${percent}%`);
    this.progressText.textContent = message ? `${percent}% · ${message}` : `${percent}%`;
  }

  #updateTimes(task) {
    const rows = [["Created", clock(task.created_at)]];
    if (task.started_at) {
      const waited = duration(task.created_at, task.started_at);
      rows.push(["Started", `${clock(task.started_at)} (waited ${waited})`]);
    }
    if (task.completed_at) {
      const from = task.started_at ?? task.created_at;
      const verb = task.started_at ? "ran" : "after";
      const took = duration(from, task.completed_at);
      rows.push(["Finished", `${clock(task.completed_at)} (${verb} ${took})`]);
    }
    if (task.worker_id) rows.push(["Worker", shortId(task.worker_id)]);
    if ((task.attempt ?? 0) > 1) rows.push(["Attempt", String(task.attempt)]);
    this.times.replaceChildren(
      ...rows.map(([term, value]) => h("div", {}, h("dt", {}, term), h("dd", {}, value))),
    );
  }

  #updateOutcome(task) {
    let content = null;
    if (task.error) {
      content = h("div", { class: "error-box" },
        h("strong", {}, "Error"), h("pre", {}, task.error));
    } else if (task.status === "completed" && task.result !== undefined) {
      content = h("div", { class: "result-box" },
        h("strong", {}, "Result"), h("pre", { class: "json" }, json(task.result)));
    }
    const key = content ? content.textContent : "";
    if (this.outcome.dataset.key === key) return;
    this.outcome.dataset.key = key;
    this.outcome.replaceChildren(...(content ? [content] : []));
  }

  #setCancellable(cancellable) {
    if (!cancellable && document.activeElement === this.cancelButton) this.title.focus();
    this.cancelButton.hidden = !cancellable || this.cancelForbidden;
  }
}
