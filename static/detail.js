// A task's detail panel: its payload, result, error and progress, its attempts as a
// timeline, and its log (read from the hub when opened, then live from task_log events).
// Everything the task carries goes into the DOM as text. Escape closes it; the focus
// returns to the row (or button) that opened it.

import { h } from "./dom.js";
import { clock, duration, jobLabel, json, shortId } from "./format.js";
import { ACTIVE, LABELS, RERUNNABLE, notOlder, taskFromEvent } from "./tasks.js";

const LOG_KEEP = 2000; // lines the panel keeps (the oldest go)

export class Detail {
  /** handlers: { load(id) → task, logs(id, after) → {items, next}, cancel(task),
   *   rerun(task), mayCancel(task), submitterName(task), openTask(id), closed() } */
  constructor(panel, body, closeButton, handlers) {
    this.panel = panel;
    this.body = body;
    this.handlers = handlers;
    this.task = null;
    this.returnFocus = null;
    this.lines = new Map(); // log line id -> line
    this.request = 0;
    closeButton.addEventListener("click", () => this.close());
    panel.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        this.close();
      }
    });
  }

  get openId() {
    return this.panel.hidden ? null : this.task?.id ?? null;
  }

  /** Open `id`'s details; `from` gets the focus back on close. */
  async open(id, from = document.activeElement, known = null) {
    this.request += 1;
    const request = this.request;
    this.returnFocus = from;
    this.task = known ? { ...known, id } : { id };
    this.lines = new Map();
    this.panel.hidden = false;
    this.panel.dataset.taskId = id;
    this.#render();
    this.panel.focus();
    try {
      const task = await this.handlers.load(id);
      if (request !== this.request) return;
      this.task = notOlder(task, this.task) ? { ...this.task, ...task } : { ...task, ...this.task };
      this.#render();
    } catch (error) {
      if (request === this.request) this.#message(`Could not load the task: ${error.message}`);
    }
    await this.#loadLogs(request);
  }

  close() {
    if (this.panel.hidden) return;
    this.request += 1;
    this.panel.hidden = true;
    delete this.panel.dataset.taskId;
    this.task = null;
    const back = this.returnFocus;
    this.returnFocus = null;
    if (back?.isConnected) back.focus();
    this.handlers.closed?.();
  }

  /** Read the log again (after a reconnect: lines may have been missed). */
  async reloadLogs() {
    if (this.openId) await this.#loadLogs(this.request);
  }

  /** A task_status_event: the open task's state, if it is this one. */
  onStatus(event) {
    if (event.id !== this.openId) return;
    const task = taskFromEvent(event);
    if (!notOlder(task, this.task)) return;
    this.task = { ...this.task, ...task };
    this.#render();
  }

  /** A task_log event: its lines, if of the open task. */
  onLog(event) {
    if (event.task_id !== this.openId) return;
    this.#addLines(event.lines ?? []);
  }

  async #loadLogs(request) {
    let after = null;
    try {
      for (let page = 0; page < 20; page += 1) {
        const answer = await this.handlers.logs(this.task.id, after);
        if (request !== this.request) return;
        this.#addLines(answer.items ?? []);
        if (answer.next == null || !(answer.items ?? []).length) break;
        after = answer.next;
      }
      this.logStatus.textContent = this.lines.size ? "" : "No log lines yet.";
    } catch (error) {
      if (request === this.request) this.logStatus.textContent = `Log not available: ${error.message}`;
    }
  }

  #addLines(lines) {
    let added = false;
    for (const line of lines) {
      if (this.lines.has(line.id)) continue;
      this.lines.set(line.id, line);
      added = true;
    }
    if (!added) return;
    const sorted = [...this.lines.values()].sort((a, b) => a.id - b.id);
    while (sorted.length > LOG_KEEP) this.lines.delete(sorted.shift().id);
    const stick = this.logList.scrollTop + this.logList.clientHeight >= this.logList.scrollHeight - 4;
    this.logList.replaceChildren(...sorted.map(logLine));
    if (stick) this.logList.scrollTop = this.logList.scrollHeight;
    this.logStatus.textContent = "";
    this.#renderTimeline();
  }

  #message(text) {
    this.status.textContent = text;
  }

  #render() {
    const task = this.task;
    const { name, scope } = jobLabel(task.job_name ?? "");
    this.panel.querySelector("#detail-title").textContent = task.job_name
      ? `${name} ${shortId(task.id)}` : `Task ${shortId(task.id)}`;
    this.status = h("p", { class: "task-message", role: "alert" });
    const actions = h("div", { class: "detail-actions" });
    if (ACTIVE.has(task.status) && (this.handlers.mayCancel?.(task) ?? true)) {
      actions.append(h("button", {
        type: "button", class: "danger small", onclick: () => this.#act("cancel"),
      }, "Cancel task"));
    }
    if (RERUNNABLE.has(task.status)) {
      actions.append(h("button", {
        type: "button", class: "small", onclick: () => this.#act("rerun"),
      }, "Re-run task"));
    }
    const facts = [
      ["Status", LABELS[task.status] ?? task.status ?? "…"],
      ["Job", task.job_name ? `${name} (${scope})` : ""],
      ["Id", task.id],
      ["Submitted by", this.handlers.submitterName?.(task) ?? task.submitter ?? ""],
      ["Worker", task.worker_id ? shortId(task.worker_id) : ""],
      ["Attempt", task.attempt ? `${task.attempt}${task.max_attempts ? ` of ${task.max_attempts}` : ""}` : ""],
    ].filter(([, value]) => value);
    const meta = h("dl", { class: "meta detail-meta" },
      ...facts.map(([term, value]) => h("div", {}, h("dt", {}, term), h("dd", {}, value))));
    if (task.rerun_of) {
      meta.append(h("div", {}, h("dt", {}, "Re-run of"), h("dd", {},
        h("button", { type: "button", class: "link", onclick: () => this.handlers.openTask(task.rerun_of) },
          shortId(task.rerun_of)))));
    }
    const progress = task.progress != null || task.status === "running"
      ? h("p", { class: "detail-progress" },
        `Progress ${Math.round((task.status === "completed" ? 1 : task.progress ?? 0) * 100)}%`
        + (task.progress_message && task.status !== "completed" ? ` · ${task.progress_message}` : ""))
      : null;
    this.timeline = h("ol", { class: "timeline", "aria-label": "Attempts" });
    this.logList = h("ol", { class: "log", "aria-label": "Log", tabindex: "0" });
    this.logStatus = h("p", { class: "hint log-status", role: "status" }, "Loading the log…");
    const sections = [
      h("div", { class: "detail-top" },
        h("span", { class: "badge", dataset: { status: task.status ?? "" } }, LABELS[task.status] ?? ""),
        actions),
      this.status,
      meta,
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
    const focusedText = this.body.contains(document.activeElement)
      ? document.activeElement.textContent : null;
    this.body.replaceChildren(...sections.filter(Boolean));
    if (focusedText != null) {
      const same = [...this.body.querySelectorAll("button")].find((b) => b.textContent === focusedText);
      (same ?? this.panel).focus();
    }
    this.#renderTimeline();
  }

  /** Created → started → ended, per attempt as far as the record (and the log's attempt
   * numbers) tell: earlier attempts show their first and last log lines. */
  #renderTimeline() {
    const task = this.task;
    if (!this.timeline || !task) return;
    const items = [];
    if (task.created_at) items.push(["Created", clock(task.created_at), ""]);
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
    } else if (ACTIVE.has(task.status)) {
      items.push([task.status === "claimed" ? "Claimed" : "Waiting", "", task.worker_id ? `by ${shortId(task.worker_id)}` : ""]);
    }
    if (task.completed_at) {
      const from = task.started_at ?? task.created_at;
      items.push([LABELS[task.status] ?? "Ended", clock(task.completed_at),
        from ? `after ${duration(from, task.completed_at)}` : ""]);
    }
    this.timeline.replaceChildren(...items.map(([what, when, note]) => h("li", {},
      h("strong", {}, what), " ", h("time", {}, when), note ? h("span", { class: "hint" }, ` ${note}`) : null)));
  }

  async #act(action) {
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
      this.#message(`Could not ${action === "rerun" ? "re-run" : "cancel"}: ${error.message}`);
    }
  }
}

function logLine(line) {
  return h("li", { class: "log-line", dataset: { level: String(line.level ?? "").toLowerCase(), id: String(line.id) } },
    h("time", { datetime: line.at }, clock(line.at)),
    h("span", { class: "level" }, line.level ?? ""),
    line.logger ? h("span", { class: "logger" }, line.logger) : null,
    h("span", { class: "message" }, line.message ?? ""),
    line.dropped ? h("span", { class: "dropped" }, ` (${line.dropped} lines dropped before)`) : null);
}
