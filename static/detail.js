// @ts-check
// A task's detail panel: its payload, result, error and progress, its attempts as a
// timeline, its log (read from the hub when opened, then live from task_log events), and
// for a pending task why it waits: its place in line, its job's claim order and the
// running limit that holds it back (GET /tasks/{id}/place, read again as its job's tasks
// come and go).
// Everything the task carries goes into the DOM as text. Escape closes it; the focus
// returns to the row (or button) that opened it.

import { $, $$, h } from "./dom.js";
import { clock, duration, jobLabel, json, messageOf, ordinal, shortId } from "./format.js";
import { claimOrderText, limitTexts } from "./jobs.js";
import { RERUNNABLE, UNFINISHED, label, notOlder, taskFromEvent } from "./statuses.js";
import { throttle } from "./throttle.js";

/** @import { LogLine, LogPage, Place, Task, TaskEvent, TaskLogEvent } from "./types.js" */

/**
 * @typedef {object} DetailHandlers
 * @property {(id: string) => Promise<Task>} load
 * @property {(id: string, after: number | null) => Promise<LogPage>} logs
 * @property {(id: string) => Promise<Place>} [place] where a pending task stands
 * @property {(task: Task) => Promise<Task>} cancel
 * @property {(task: Task) => Promise<Task>} rerun
 * @property {(task: Task) => boolean} [mayCancel]
 * @property {(task: Task) => string} [submitterName]
 * @property {(task: Task) => boolean} [isMine] the viewer submitted it
 * @property {(id: string) => void} openTask
 * @property {() => void} [closed]
 */

const LOG_KEEP = 2000; // lines the panel keeps (the oldest go)
// A task of the open pending task's job came, went or ended: its place is read again after
// this long (a burst of events, one read).
const PLACE_SOON_MS = 250;
// And this often while it is shown and the page seen: tasks of other rooms (a shared job's)
// move it too, and this room hears none of their events.
const PLACE_POLL_MS = 5000;

export class Detail {
  /**
   * @param {HTMLElement} panel
   * @param {HTMLElement} body
   * @param {HTMLElement} closeButton
   * @param {DetailHandlers} handlers
   */
  constructor(panel, body, closeButton, handlers) {
    this.panel = panel;
    this.body = body;
    this.handlers = handlers;
    /** @type {Task | null} */
    this.task = null;
    /** @type {Element | null} */
    this.returnFocus = null;
    /** @type {Map<number, LogLine>} log line id -> line */
    this.lines = new Map();
    this.request = 0;
    /** @type {Place | null} the open task's GET place answer, while it is pending */
    this.place = null;
    this.placeRequest = 0; // bumped on every read of the place: an older answer is dropped
    this.placeSoon = throttle(() => this.#loadPlace(), { delay: PLACE_SOON_MS });
    this.placeShown = ""; // what the place box shows (rebuilt only when that changes)
    // Built by #render: the panel's parts that change without a rebuild.
    this.status = h("p");
    this.timeline = h("ol");
    this.logList = h("ol");
    this.logStatus = h("p");
    this.placeBox = h("div");
    closeButton.addEventListener("click", () => this.close());
    panel.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        this.close();
      }
    });
    setInterval(() => {
      if (this.#waiting() && !document.hidden) this.placeSoon.schedule();
    }, PLACE_POLL_MS);
  }

  get openId() {
    return this.panel.hidden ? null : this.task?.id ?? null;
  }

  /**
   * Open `id`'s details; `from` gets the focus back on close.
   * @param {string} id
   * @param {Element | null} [from]
   * @param {Task | null} [known] what the page knows of it already
   */
  async open(id, from = document.activeElement, known = null) {
    this.request += 1;
    const request = this.request;
    this.returnFocus = from;
    /** @type {Task} */
    let task = known ? { ...known, id } : { id };
    this.task = task;
    this.lines = new Map();
    this.#forgetPlace();
    this.panel.hidden = false;
    this.panel.dataset.taskId = id;
    this.#render();
    this.panel.focus();
    try {
      const loaded = await this.handlers.load(id);
      if (request !== this.request) return;
      task = notOlder(loaded, task) ? { ...task, ...loaded } : { ...loaded, ...task };
      this.task = task;
      this.#render();
      this.#loadPlace();
    } catch (error) {
      if (request === this.request) this.#message(`Could not load the task: ${messageOf(error)}`);
    }
    await this.#loadLogs(task.id, request);
  }

  close() {
    if (this.panel.hidden) return;
    this.request += 1;
    this.panel.hidden = true;
    delete this.panel.dataset.taskId;
    this.task = null;
    this.#forgetPlace();
    const back = this.returnFocus;
    this.returnFocus = null;
    if (back instanceof HTMLElement && back.isConnected) back.focus();
    this.handlers.closed?.();
  }

  /** Read the log again (after a reconnect: lines may have been missed). */
  async reloadLogs() {
    const id = this.openId;
    if (id) await this.#loadLogs(id, this.request);
  }

  /** Read again where the open task stands, if it waits (after a reconnect). */
  refreshPlace() {
    this.#loadPlace();
  }

  /**
   * A task_status_event: the open task's state, if it is this one; another task of its
   * job moves its place (or frees a share) while it waits.
   * @param {TaskEvent} event
   */
  onStatus(event) {
    if (!this.openId || !this.task) return;
    if (event.id !== this.openId) {
      if (this.#waiting() && event.name === this.task.job_name) this.placeSoon.schedule();
      return;
    }
    const task = taskFromEvent(event);
    if (!notOlder(task, this.task)) return;
    this.task = { ...this.task, ...task };
    if (this.task.status !== "pending") this.#forgetPlace();
    this.#render();
    if (this.#waiting()) this.placeSoon.schedule();
  }

  #waiting() {
    return Boolean(this.openId) && this.task?.status === "pending";
  }

  #forgetPlace() {
    this.place = null;
    this.placeRequest += 1;
    this.placeSoon.cancel();
  }

  async #loadPlace() {
    this.placeSoon.cancel();
    if (!this.#waiting() || !this.handlers.place || !this.task) return;
    this.placeRequest += 1;
    const request = this.placeRequest;
    const id = this.task.id;
    let place = null;
    try {
      place = await this.handlers.place(id);
    } catch {
      // An older hub, or the task is gone: the panel says nothing of its place.
    }
    if (request !== this.placeRequest || id !== this.openId) return;
    this.place = place;
    this.#renderPlace();
  }

  /** Its place in line, the claim order, the job's limits, and what holds it back. */
  #renderPlace() {
    const box = this.placeBox;
    if (!box) return;
    const place = this.place;
    /** @type {[string, string][]} */
    const lines = [];
    if (this.task?.status === "pending" && place?.status === "pending") {
      const where = place.queue_position != null ? [`${ordinal(place.queue_position)} in line`] : [];
      lines.push(["place-line", [...where, claimOrderText(place.claim_order)].join(" · ")]);
      const limits = limitTexts(place);
      if (limits.length) lines.push(["hint place-limits", limits.join(" · ")]);
      if (place.held_back) lines.push(["held-back", this.#heldBackText(place.held_back)]);
    }
    const shown = JSON.stringify(lines);
    if (shown === this.placeShown) return; // a poll that found nothing new: no announcement
    this.placeShown = shown;
    box.hidden = !lines.length;
    box.replaceChildren(...(lines.length ? [h("h3", { class: "small-title" }, "Why it waits")] : []),
      ...lines.map(([cls, text]) => h("p", { class: cls }, text)));
  }

  /** @param {NonNullable<Place["held_back"]>} heldBack */
  #heldBackText({ scope, running, limit }) {
    const whose = scope === "room" ? "of this room's tasks"
      : this.task && this.handlers.isMine?.(this.task) ? "of yours" : "of this submitter's tasks";
    return `Limited: ${running} ${whose} running (limit ${limit})`;
  }

  /**
   * A task_log event: its lines, if of the open task.
   * @param {TaskLogEvent} event
   */
  onLog(event) {
    if (event.task_id !== this.openId) return;
    this.#addLines(event.lines ?? []);
  }

  /**
   * @param {string} id the open task's
   * @param {number} request
   */
  async #loadLogs(id, request) {
    /** @type {number | null} */
    let after = null;
    try {
      for (let page = 0; page < 20; page += 1) {
        const answer = await this.handlers.logs(id, after);
        if (request !== this.request) return;
        this.#addLines(answer.items ?? []);
        if (answer.next == null || !(answer.items ?? []).length) break;
        after = answer.next;
      }
      this.logStatus.textContent = this.lines.size ? "" : "No log lines yet.";
    } catch (error) {
      if (request === this.request) this.logStatus.textContent = `Log not available: ${messageOf(error)}`;
    }
  }

  /** @param {LogLine[]} lines */
  #addLines(lines) {
    let added = false;
    for (const line of lines) {
      if (this.lines.has(line.id)) continue;
      this.lines.set(line.id, line);
      added = true;
    }
    if (!added) return;
    const sorted = [...this.lines.values()].sort((a, b) => a.id - b.id);
    for (const old of sorted.splice(0, Math.max(0, sorted.length - LOG_KEEP))) this.lines.delete(old.id);
    const stick = this.logList.scrollTop + this.logList.clientHeight >= this.logList.scrollHeight - 4;
    this.logList.replaceChildren(...sorted.map(logLine));
    if (stick) this.logList.scrollTop = this.logList.scrollHeight;
    this.logStatus.textContent = "";
    this.#renderTimeline();
  }

  /** @param {string} text */
  #message(text) {
    this.status.textContent = text;
  }

  #render() {
    const task = this.task;
    if (!task) return;
    const { name, scope } = jobLabel(task.job_name ?? "");
    $("#detail-title", HTMLElement, this.panel).textContent = task.job_name
      ? `${name} ${shortId(task.id)}` : `Task ${shortId(task.id)}`;
    this.status = h("p", { class: "task-message", role: "alert" });
    const actions = h("div", { class: "detail-actions" });
    if (UNFINISHED.has(task.status ?? "") && (this.handlers.mayCancel?.(task) ?? true)) {
      actions.append(h("button", {
        type: "button", class: "danger small", onclick: () => this.#act("cancel"),
      }, "Cancel task"));
    }
    if (RERUNNABLE.has(task.status ?? "")) {
      actions.append(h("button", {
        type: "button", class: "small", onclick: () => this.#act("rerun"),
      }, "Re-run task"));
    }
    const facts = [
      ["Status", label(task.status) || "…"],
      ["Job", task.job_name ? `${name} (${scope})` : ""],
      ["Id", task.id],
      ["Submitted by", this.handlers.submitterName?.(task) ?? task.submitter ?? ""],
      ["Worker", task.worker_id ? shortId(task.worker_id) : ""],
      ["Attempt", task.attempt ? `${task.attempt}${task.max_attempts ? ` of ${task.max_attempts}` : ""}` : ""],
    ].filter(([, value]) => value);
    const meta = h("dl", { class: "meta detail-meta" },
      ...facts.map(([term, value]) => h("div", {}, h("dt", {}, term), h("dd", {}, value))));
    const rerunOf = task.rerun_of;
    if (rerunOf) {
      meta.append(h("div", {}, h("dt", {}, "Re-run of"), h("dd", {},
        h("button", { type: "button", class: "link", onclick: () => this.handlers.openTask(rerunOf) },
          shortId(rerunOf)))));
    }
    const progress = task.progress != null || task.status === "running"
      ? h("p", { class: "detail-progress" },
        `Progress ${Math.round((task.status === "completed" ? 1 : task.progress ?? 0) * 100)}%`
        + (task.progress_message && task.status !== "completed" ? ` · ${task.progress_message}` : ""))
      : null;
    this.timeline = h("ol", { class: "timeline", "aria-label": "Attempts" });
    this.logList = h("ol", { class: "log", "aria-label": "Log", tabindex: "0" });
    this.logStatus = h("p", { class: "hint log-status", role: "status" }, "Loading the log…");
    this.placeBox = h("div", { class: "task-place", "aria-live": "polite", hidden: true });
    this.placeShown = "";
    /** @type {(HTMLElement | null)[]} */
    const sections = [
      h("div", { class: "detail-top" },
        h("span", { class: "badge", dataset: { status: task.status ?? "" } }, label(task.status)),
        actions),
      this.status,
      meta,
      this.placeBox,
      progress,
      h("h3", { class: "small-title" }, "Timeline"), this.timeline,
    ];
    if (task.error) {
      sections.push(h("div", { class: "error-box" }, h("strong", {}, "Error"),
        h("pre", { class: "detail-error" }, task.error)));
    }
    if (task.status === "completed" && task.result !== undefined) {
      sections.push(h("div", { class: "result-box" }, h("strong", {}, "Result"),
        h("pre", { class: "json detail-result" }, json(task.result))));
    }
    if (task.payload !== undefined) {
      sections.push(h("details", { class: "payload", open: true }, h("summary", {}, "Payload"),
        h("pre", { class: "json detail-payload" }, json(task.payload))));
    }
    sections.push(h("h3", { class: "small-title" }, "Log"), this.logStatus, this.logList);
    const previous = [...this.lines.values()].sort((a, b) => a.id - b.id);
    this.logList.replaceChildren(...previous.map(logLine));
    if (previous.length) this.logStatus.textContent = "";
    // Keep the focus where it was when the body is rebuilt (a live update).
    const focused = document.activeElement;
    const focusedText = focused && this.body.contains(focused) ? focused.textContent : null;
    this.body.replaceChildren(...sections.filter((section) => section !== null));
    if (focusedText != null) {
      const same = $$("button", HTMLButtonElement, this.body).find((b) => b.textContent === focusedText);
      (same ?? this.panel).focus();
    }
    this.#renderPlace();
    this.#renderTimeline();
  }

  /** Created → started → ended, per attempt as far as the record (and the log's attempt
   * numbers) tell: earlier attempts show their first and last log lines. */
  #renderTimeline() {
    const task = this.task;
    if (!this.timeline || !task) return;
    /** @type {[string, string, string][]} */
    const items = [];
    if (task.created_at) items.push(["Created", clock(task.created_at), ""]);
    /** @type {Map<number, { first: string, last: string }>} */
    const byAttempt = new Map();
    for (const line of this.lines.values()) {
      const span = byAttempt.get(line.attempt) ?? { first: line.at, last: line.at };
      if (line.at < span.first) span.first = line.at;
      if (line.at > span.last) span.last = line.at;
      byAttempt.set(line.attempt, span);
    }
    const current = task.attempt ?? 0;
    for (let attempt = 1; attempt < current; attempt += 1) {
      const span = byAttempt.get(attempt);
      items.push([`Attempt ${attempt}`, span ? `${clock(span.first)} – ${clock(span.last)}` : "", "ended, retried"]);
    }
    if (task.started_at) {
      const waited = task.created_at ? ` (waited ${duration(task.created_at, task.started_at)})` : "";
      items.push([current > 0 ? `Attempt ${current} started` : "Started", clock(task.started_at) + waited,
        task.worker_id ? `on worker ${shortId(task.worker_id)}` : ""]);
    } else if (UNFINISHED.has(task.status ?? "")) {
      items.push([task.status === "claimed" ? "Claimed" : "Waiting", "", task.worker_id ? `by ${shortId(task.worker_id)}` : ""]);
    }
    if (task.completed_at) {
      const from = task.started_at ?? task.created_at;
      items.push([label(task.status) || "Ended", clock(task.completed_at),
        from ? `after ${duration(from, task.completed_at)}` : ""]);
    }
    this.timeline.replaceChildren(...items.map(([what, when, note]) => h("li", {},
      h("strong", {}, what), " ", h("time", {}, when), note ? h("span", { class: "hint" }, ` ${note}`) : null)));
  }

  /** @param {"cancel" | "rerun"} action */
  async #act(action) {
    if (!this.task) return;
    this.#message("");
    try {
      const task = await this.handlers[action](this.task);
      if (action === "rerun" && task?.id) {
        this.#message(`Re-run as task ${shortId(task.id)}.`);
        this.status.append(" ", h("button", {
          type: "button", class: "link", onclick: () => this.handlers.openTask(task.id),
        }, "Open it"));
      } else if (task && notOlder(task, this.task)) {
        this.task = { ...this.task, ...task };
        this.#render();
      }
    } catch (error) {
      this.#message(`Could not ${action === "rerun" ? "re-run" : "cancel"}: ${messageOf(error)}`);
    }
  }
}

/** @param {LogLine} line */
function logLine(line) {
  return h("li", { class: "log-line", dataset: { level: String(line.level ?? "").toLowerCase(), id: String(line.id) } },
    h("time", { datetime: line.at }, clock(line.at)),
    h("span", { class: "level" }, line.level ?? ""),
    line.logger ? h("span", { class: "logger" }, line.logger) : null,
    h("span", { class: "message" }, line.message ?? ""),
    line.dropped ? h("span", { class: "dropped" }, ` (${line.dropped} lines dropped before)`) : null);
}
