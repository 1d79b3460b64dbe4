// @ts-check
// What a task_status_event of the open room changes: its row and panel, the counts table,
// the workers (a slot taken or freed), the queue places of the pending tasks shown, the
// charts' tail, and what screen readers hear. Every follow-up read is throttled: events
// come in bursts.

import { detail } from "./detail-panel.js";
import { announce } from "./dom.js";
import { jobLabel, shortId } from "./format.js";
import { scheduleWorkersRefresh } from "./jobs-panel.js";
import { isSharedJob } from "./naming.js";
import { api, signedOutBy } from "./session.js";
import { MAX_PAGE, noteStatus, state } from "./state.js";
import { overview, scheduleStatsTail } from "./stats-panel.js";
import { taskTable } from "./tasks-panel.js";
import { throttle } from "./throttle.js";

/** @import { Task, TaskEvent } from "./types.js" */

const ANNOUNCE_MS = 500; // status changes within this long are announced as one message
const QUEUE_REFRESH_MS = 250;

/** @param {TaskEvent} event */
export function onTaskStatus(event) {
  if (event.room_id !== state.session.room) return;
  taskTable.push(event);
  detail.onStatus(event);
  // The counts table: a change of status moves one task from a column to another.
  const previous = state.lastStatus.get(event.id);
  if (previous !== event.status) {
    if (previous || event.status === "pending") {
      overview.applyDelta(event.name, previous ?? null, event.status);
    }
    noteStatus(state.lastStatus, event.id, event.status);
    if (event.status !== "pending") scheduleWorkersRefresh(); // taken, or its slot freed
    // Queue places of the pending tasks shown move when one joins or leaves the queue.
    // (A task the page never saw may have left it too: it was older than the page.)
    const queueMoved = previous === "pending" || event.status === "pending" || !previous;
    if (queueMoved && showsPending()) queueRefresh.schedule();
  }
  scheduleStatsTail();
}

const announcement = throttle(() => {
  const messages = state.announcements.splice(0);
  announce(messages.length === 1 ? messages[0] : `${messages.length} tasks changed status.`);
}, { delay: ANNOUNCE_MS });

/**
 * Tell screen readers of a shown task's new status; a burst becomes one message.
 * @param {Task} task
 * @param {Task} previous
 */
export function announceTask(task, previous) {
  if (!previous || previous.status === task.status) return;
  const { name } = jobLabel(task.job_name ?? "");
  state.announcements.push(`Task ${name} ${shortId(task.id)} is ${task.status}.`);
  announcement.schedule();
}

/**
 * Whether the table shows a pending task (of a job `test` accepts).
 * @param {(jobName: string) => boolean} [test]
 */
function showsPending(test = () => true) {
  return [...taskTable.rows.values()].some(
    (row) => row.task.status === "pending" && test(row.task.job_name ?? ""),
  );
}

/** A task joined or left a queue: the places of the others may have moved in ways an event
 * does not say (a higher priority goes ahead of them), so read them again from the hub, at
 * most once per QUEUE_REFRESH_MS however many events come. Only the rows shown change. */
const queueRefresh = throttle(() => readQueuePlaces(), { delay: QUEUE_REFRESH_MS });

async function readQueuePlaces() {
  const room = state.session.room;
  if (!room) return;
  const { generation } = state.room;
  try {
    const page = await api().taskSummaries(room, { status: ["pending"] }, {
      sort: "created_at", limit: MAX_PAGE,
    });
    if (generation === state.room.generation) taskTable.updateShown(page.items);
  } catch (error) {
    signedOutBy(error);
  }
}

/** Pending tasks of shared jobs wait behind tasks of other rooms, which this room hears
 * nothing of: read their places again now and then while one is shown and the page is seen. */
export function refreshSharedQueues() {
  if (!state.session.room || document.hidden) return;
  if (showsPending(isSharedJob)) queueRefresh.schedule();
}
