// @ts-check
// The open room's task panel (detail.js) wired to the hub and the URL (?task=).

import { Detail } from "./detail.js";
import { $ } from "./dom.js";
import { setTaskInUrl } from "./router.js";
import { api, isMine, submitterName, viewerMayCancel } from "./session.js";

/** @import { Task } from "./types.js" */

export const detail = new Detail($("#detail"), $("#detail-body"), $("#detail-close"), {
  load: (id) => api().task(id),
  logs: (id, after) => api().logs(id, after),
  place: (id) => api().place(id),
  isMine,
  cancel: (task) => api().cancel(task.id),
  rerun: (task) => api().rerun(task.id),
  mayCancel: viewerMayCancel,
  submitterName,
  openTask: (id) => openDetail(id, document.activeElement),
  closed: () => setTaskInUrl(null),
});

/**
 * Open a task's panel (and put it in the URL); `from` gets the focus back on close.
 * @param {string} id
 * @param {Element | null} from
 * @param {Task | null} [known] what the page knows of it already
 */
export function openDetail(id, from, known = null) {
  detail.open(id, from, known);
  setTaskInUrl(id);
}
