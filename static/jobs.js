// The room's job list (its own jobs, then @global and @internal ones, with worker
// counts) and its worker list.

import { h } from "./dom.js";
import { ago, shortId } from "./format.js";

const GROUPS = [
  ["room", "In this room"],
  ["@global", "Global"],
  ["@internal", "Run by the hub"],
];

function groupOf(job, room) {
  const owner = job.full_name.split(":")[0];
  return owner === room ? "room" : owner;
}

function workerCount(job) {
  if (job.full_name.startsWith("@internal:")) return { text: "server-side", idle: false };
  const n = job.workers.length;
  return { text: n === 1 ? "1 worker" : `${n} workers`, idle: n === 0 };
}

/** Render the jobs into `container` as toggle buttons; `onSelect(full_name)` on click. */
export function renderJobs(container, jobs, { room, selected, onSelect }) {
  const focused = document.activeElement?.dataset?.job;
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
          class: "job-button",
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
  if (focused) container.querySelector(`[data-job="${CSS.escape(focused)}"]`)?.focus();
}

/** Render the workers serving jobs visible from the room. */
export function renderWorkers(container, workers) {
  if (!workers.length) {
    container.replaceChildren(h("li", { class: "empty" }, "No worker is connected."));
    return;
  }
  container.replaceChildren(
    ...workers.map((worker) =>
      h("li", { class: "worker", dataset: { workerId: worker.id } },
        h("span", { class: "dot ok", "aria-hidden": "true" }),
        h("code", { title: worker.id }, shortId(worker.id)),
        h("span", {}, worker.job_count === 1 ? "1 job" : `${worker.job_count} jobs`),
        h("span", { class: "seen" }, `seen ${ago(worker.last_heartbeat)}`)),
    ),
  );
}
