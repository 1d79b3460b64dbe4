// @ts-check
// A task's statuses as the page names them (app/rules/states.py), and which of two states
// of one task is the newer.

/** @import { Status, Task, TaskEvent } from "./types.js" */

/** @type {Status[]} */
export const STATUSES = ["pending", "claimed", "running", "completed", "failed", "cancelled"];
/** Statuses a task never leaves: states.py's TERMINAL_STATUSES. @type {ReadonlySet<string>} */
export const TERMINAL = new Set(["completed", "failed", "cancelled"]);
/** Not terminal (pending, claimed, running): such a task may still be cancelled. This is
 * not states.py's ACTIVE_STATUSES, which leaves pending out. @type {ReadonlySet<string>} */
export const UNFINISHED = new Set(STATUSES.filter((status) => !TERMINAL.has(status)));
/** The ends a task may be re-run from. @type {ReadonlySet<string>} */
export const RERUNNABLE = new Set(["failed", "cancelled"]);

/** @type {Record<Status, string>} */
export const LABELS = {
  pending: "Pending",
  claimed: "Claimed",
  running: "Running",
  completed: "Completed",
  failed: "Failed",
  cancelled: "Cancelled",
};

/** How far along its attempt a status is (the order of the transition matrix). */
const RANK = { pending: 0, claimed: 1, running: 2, completed: 3, failed: 3, cancelled: 3 };

/**
 * A status's label, or the status itself when the page does not know it.
 * @param {string | undefined} status
 */
export function label(status) {
  return status === undefined ? "" : LABELS[/** @type {Status} */ (status)] ?? status;
}

/**
 * A task_status_event payload as a task (the event calls the job's full name `name`).
 * @param {TaskEvent} event
 * @returns {Task}
 */
export function taskFromEvent(event) {
  const { name, ...rest } = event;
  return { ...rest, job_name: name };
}

/**
 * A task from a REST answer as the event that tells it (what TaskTable.push takes).
 * @param {Task} task
 * @returns {TaskEvent}
 */
export function eventFromTask(task) {
  return /** @type {TaskEvent} */ ({ ...task, name: task.job_name });
}

/**
 * Is a state of a task (a REST snapshot or an event) at least as recent as what we know?
 * Events of one task may come from several processes out of order: the hub counts each
 * task's writes in `version`; without it (an older hub), attempts and the order of statuses
 * decide.
 * @param {Partial<Task>} state
 * @param {Partial<Task> | null | undefined} known
 */
export function notOlder(state, known) {
  if (!known) return true;
  if (state.version != null && known.version != null) return state.version >= known.version;
  const attempts = (state.attempt ?? 0) - (known.attempt ?? 0);
  if (attempts !== 0) return attempts > 0;
  const rank = state.status === undefined ? undefined : RANK[state.status];
  const knownRank = known.status === undefined ? undefined : RANK[known.status];
  // An unknown status is not known to be newer (nor older).
  return rank !== undefined && knownRank !== undefined && rank >= knownRank;
}
