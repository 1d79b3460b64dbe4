// @ts-check
// The room's job list (its own jobs, then @global and @internal ones, with worker
// counts) and its worker list.

import { $$, h } from "./dom.js";
import { ago, shortId } from "./format.js";
import { GLOBAL_ROOM, INTERNAL_ROOM, isInternalJob, jobRoom } from "./naming.js";

/** @import { Job, Place, Worker } from "./types.js" */

const GROUPS = [
  ["room", "In this room"],
  [GLOBAL_ROOM, "Global"],
  [INTERNAL_ROOM, "Run by the hub"],
];

/**
 * @param {Job} job
 * @param {string} room
 */
function groupOf(job, room) {
  const owner = jobRoom(job.full_name);
  return owner === room ? "room" : owner;
}

/** @param {Job} job */
function workerCount(job) {
  if (isInternalJob(job.full_name)) return { text: "server-side", idle: false };
  const n = job.workers.length;
  return { text: n === 1 ? "1 worker" : n ? `${n} workers` : "no worker", idle: n === 0 };
}

/** @type {Record<string, string>} */
const ORDERS = {
  fifo: "Oldest first",
  "fair-by-submitter": "Fair: one task per submitter in turn",
  "fair-by-room": "Fair: one task per room in turn",
};

/**
 * A job's claim order in words ("Oldest first", "Fair: one task per submitter in turn").
 * @param {string | null | undefined} order
 */
export function claimOrderText(order) {
  return ORDERS[order ?? "fifo"] ?? `Order: ${order}`;
}

/**
 * A job's running limits in words (none: []): "At most 2 running per submitter".
 * @param {Pick<Place, "max_running_per_submitter" | "max_running_per_room">} limits
 */
export function limitTexts({ max_running_per_submitter: perSubmitter, max_running_per_room: perRoom }) {
  const texts = [];
  if (perSubmitter != null) texts.push(`At most ${perSubmitter} running per submitter`);
  if (perRoom != null) texts.push(`At most ${perRoom} running per room`);
  return texts;
}

/**
 * Show a job's sharing policy (claim order, then its limits, if any) in `container`.
 * @param {HTMLElement} container
 * @param {Job | null} job
 */
export function renderPolicy(container, job) {
  if (!job) {
    container.replaceChildren();
    container.hidden = true;
    return;
  }
  container.replaceChildren(
    h("span", { class: "visually-hidden" }, "Sharing: "),
    h("span", { class: "policy-order", dataset: { order: job.claim_order ?? "fifo" } },
      claimOrderText(job.claim_order)),
    ...limitTexts({
      max_running_per_submitter: job.max_running_per_submitter ?? null,
      max_running_per_room: job.max_running_per_room ?? null,
    }).map((text) => h("span", { class: "policy-limit" }, text)),
  );
  container.hidden = false;
}

/**
 * Render the jobs into `container` as toggle buttons; `onSelect(full_name)` on click.
 * @param {HTMLElement} container
 * @param {Job[]} jobs
 * @param {{ room: string, selected: string | null, onSelect: (fullName: string) => void }} options
 */
export function renderJobs(container, jobs, { room, selected, onSelect }) {
  const focused = document.activeElement instanceof HTMLElement ? document.activeElement.dataset.job : undefined;
  const sections = [];
  for (const [key, title] of GROUPS) {
    const members = jobs
      .filter((job) => groupOf(job, room) === key)
      .sort((a, b) => a.full_name.localeCompare(b.full_name));
    if (!members.length) continue;
    const items = members.map((job) => {
      const count = workerCount(job);
      const button = h(
        "button",
        {
          type: "button",
          class: count.idle ? "job-button no-worker" : "job-button",
          "aria-pressed": String(job.full_name === selected),
          dataset: { job: job.full_name },
          onclick: () => onSelect(job.full_name),
        },
        h("span", { class: "job-name" }, job.name),
        h("span", { class: "job-category" }, job.category),
        h("span", { class: count.idle ? "count idle" : "count" }, count.text),
      );
      return h("li", {}, button);
    });
    sections.push(h("h3", { class: "small-title" }, title), h("ul", { class: "job-list" }, items));
  }
  if (!sections.length) {
    sections.push(h("p", { class: "empty" }, "No jobs yet. Start a worker for this room:"),
      h("pre", { class: "command" }, `taskhub worker module:Class --room ${room} --token …`));
  }
  container.replaceChildren(...sections);
  container.setAttribute("aria-busy", "false");
  if (focused) $$(`[data-job="${CSS.escape(focused)}"]`, HTMLElement, container)[0]?.focus();
}

/** Render the workers serving jobs visible from the room: owner, jobs, last heartbeat
 * (relative: `tickWorkers` keeps it current), slots used and free, the tasks each runs
 * now (buttons opening their details).
 * @param {HTMLElement} container
 * @param {Worker[]} workers
 * @param {{ openTask?: (id: string) => void }} [options]
 */
export function renderWorkers(container, workers, { openTask } = {}) {
  if (!workers.length) {
    container.replaceChildren(h("li", { class: "empty" }, "No worker is connected."));
    return;
  }
  container.replaceChildren(...workers.map((worker) => {
    const running = worker.running ?? [];
    const used = worker.used ?? running.length;
    const slots = worker.slots ?? 0;
    const bar = h("span", { class: "bar-fill" });
    if (slots) bar.style.width = `${Math.round(Math.min(1, used / slots) * 100)}%`;
    const jobs = (worker.jobs ?? []).map((job) => (typeof job === "string" ? job : job.full_name ?? job.name ?? ""));
    const jobNames = jobs.map((job) => job.split(":").slice(2).join(":") || job);
    const slotText = slots ? `${used} of ${slots} slots used, ${Math.max(0, slots - used)} free`
      : `${used} running`;
    return h("li", { class: "worker", dataset: { workerId: worker.id } },
      h("div", { class: "worker-head" },
        h("span", { class: "dot ok", "aria-hidden": "true" }),
        h("code", { title: worker.id }, shortId(worker.id)),
        h("span", { class: "owner" }, worker.owner ?? ""),
        h("span", { class: "seen", dataset: { at: worker.last_heartbeat ?? "" } },
          worker.last_heartbeat ? `seen ${ago(worker.last_heartbeat)}` : "")),
      h("div", { class: "worker-jobs", title: jobs.join(", ") },
        jobNames.length ? jobNames.join(", ")
          : (worker.job_count === 1 ? "1 job" : `${worker.job_count ?? 0} jobs`)),
      h("div", { class: "slots" },
        slots ? h("span", {
          class: "bar", role: "meter", "aria-valuemin": "0", "aria-valuemax": String(slots),
          "aria-valuenow": String(used), "aria-label": "Slots used",
        }, bar) : null,
        h("span", { class: "slot-text" }, slotText)),
      running.length ? h("ul", { class: "running", "aria-label": "Running now" },
        ...running.map((id) => h("li", {}, h("button", {
          type: "button", class: "link", dataset: { taskId: id },
          onclick: () => openTask?.(id),
        }, shortId(id))))) : null);
  }));
}

/**
 * Bring every "seen … ago" up to date (once a second).
 * @param {HTMLElement} container
 */
export function tickWorkers(container) {
  const now = Date.now();
  for (const el of $$(".seen[data-at]", HTMLElement, container)) {
    if (!el.dataset.at) continue;
    const text = `seen ${ago(el.dataset.at, now)}`;
    if (el.textContent !== text) el.textContent = text;
  }
}
