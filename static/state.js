// @ts-check
// The page's state, all in one object (`state`): who is signed in, the open room, the task
// table's filter, sort and page, the overview's window, and what the page learnt on the
// way (user names, the last status heard of each task). The functions below it are the
// rules that read and change it; they touch no DOM (tests/page/js/ runs them in Node).
// Not here: the widgets' own state (tasks.js, detail.js, overview.js hold what they show)
// and the timers, each in the throttle (throttle.js) of the work it puts off.

import { shortId } from "./format.js";
import { STATUSES } from "./statuses.js";

/** @import { Api } from "./api.js" */
/** @import { Live } from "./live.js" */
/** @import { SchemaForm } from "./schema-form.js" */
/** @import { Job, Status, Task, TaskFilter, User, Worker } from "./types.js" */

export const PAGE = 50; // tasks on a page of the table
export const MAX_PAGE = 500; // the hub's largest page
export const SORTS = ["-created_at", "created_at", "started_at", "-started_at", "completed_at",
  "-completed_at", "status", "-status"];
export const DEFAULT_SORT = "-created_at";
export const WINDOWS = ["15m", "1h", "24h"];
export const DEFAULT_WINDOW = "1h";
const LAST_STATUS_KEEP = 20000; // tasks whose last status the page remembers
const RECENT_ROOMS_KEEP = 8;

/**
 * @typedef {object} TableState The task table's filter, sort and page (all in the URL).
 * @property {TaskFilter} filter
 * @property {string} sort
 * @property {number} offset
 * @property {number} total what the hub counted, plus the tasks events put on top since
 * @property {number} request bumped on every read of the page: an older answer is dropped
 */

/** @returns {TaskFilter} */
export function emptyFilter() {
  return { status: [], job: "", submitted_by: "", worker_id: "", q: "" };
}

export function createState() {
  return {
    session: {
      /** @type {Api | null} */
      api: null,
      /** @type {User | null} the signed-in user, once the hub has said */
      me: null,
      /** @type {Live | null} */
      live: null,
      /** @type {string | null} the open room */
      room: null,
    },
    room: {
      generation: 0, // bumped on every room change: late answers for another room are dropped
      /** @type {Job[] | null} null until the first answer */
      jobs: null,
      /** @type {Worker[]} */
      workers: [],
      /** @type {string | null} full name of the job whose form is shown */
      selected: null,
      /** @type {Job | null} that job (with its schema) */
      job: null,
      /** @type {SchemaForm | null} its form */
      form: null,
    },
    /** @type {TableState} */
    table: { filter: emptyFilter(), sort: DEFAULT_SORT, offset: 0, total: 0, request: 0 },
    // The overview: its window, the latest read of it, whether one has answered.
    stats: { window: DEFAULT_WINDOW, request: 0, loaded: false },
    /** @type {Map<string, string>} user id -> name, from the summaries (events carry none) */
    userNames: new Map(),
    /** @type {Map<string, Status>} task id -> the status last heard (for the counts table) */
    lastStatus: new Map(),
    /** @type {string[]} status changes to tell screen readers, in one message */
    announcements: [],
  };
}

/** @typedef {ReturnType<typeof createState>} PageState */

export const state = createState();

// -- the room ---------------------------------------------------------------------------

/**
 * Open `room`: what the page knew of the one before is forgotten.
 * @param {PageState} s
 * @param {string} room
 */
export function enterRoom(s, room) {
  s.session.room = room;
  s.room.generation += 1;
  s.room.jobs = null;
  s.room.selected = null;
  s.room.job = null;
  s.table.total = 0;
  s.stats.loaded = false;
  s.lastStatus.clear();
}

/**
 * Close the open room (answers still on their way are dropped).
 * @param {PageState} s
 */
export function leaveRoom(s) {
  s.session.room = null;
  s.room.generation += 1;
  s.room.selected = null;
}

/**
 * Remember the status heard of a task (past `keep` tasks, the one first heard of goes);
 * returns the status heard before, if any.
 * @param {Map<string, Status>} lastStatus
 * @param {string} id
 * @param {Status} status
 * @param {number} [keep]
 */
export function noteStatus(lastStatus, id, status, keep = LAST_STATUS_KEEP) {
  const previous = lastStatus.get(id);
  if (previous === undefined && lastStatus.size >= keep) {
    lastStatus.delete(/** @type {string} */ (lastStatus.keys().next().value)); // the first heard of
  }
  lastStatus.set(id, status);
  return previous;
}

/** @typedef {Partial<Record<Status, number>>} CountsRow a job's tasks by status */

/**
 * A job's counts after one of its tasks moved from one status to another (from null: a
 * new task); a count never goes below 0.
 * @param {CountsRow | undefined} row
 * @param {Status | null} from
 * @param {Status | null} to
 * @returns {CountsRow}
 */
export function moveCount(row, from, to) {
  const next = { ...(row ?? Object.fromEntries(STATUSES.map((s) => [s, 0]))) };
  if (from && (next[from] ?? 0) > 0) next[from] = (next[from] ?? 0) - 1;
  if (to) next[to] = (next[to] ?? 0) + 1;
  return next;
}

// -- the table's state in the URL -------------------------------------------------------

/**
 * The table's state and the overview's window as a URL has them: unknown statuses are
 * left out, an unknown sort or offset is the default, an unknown window null (the page
 * keeps the one it shows).
 * @param {URLSearchParams} params
 * @returns {{ filter: TaskFilter, sort: string, offset: number, window: string | null }}
 */
export function tableFromParams(params) {
  const status = /** @type {Status[]} */ ((params.get("status") ?? "").split(",")
    .filter((s) => /** @type {string[]} */ (STATUSES).includes(s)));
  const sort = params.get("sort") ?? "";
  const window = params.get("window") ?? DEFAULT_WINDOW;
  return {
    filter: {
      status,
      job: params.get("tjob") ?? "",
      submitted_by: params.get("by") ?? "",
      worker_id: params.get("worker") ?? "",
      q: params.get("q") ?? "",
    },
    sort: SORTS.includes(sort) ? sort : DEFAULT_SORT,
    offset: Math.max(0, Number.parseInt(params.get("offset") ?? "0", 10) || 0),
    window: WINDOWS.includes(window) ? window : null,
  };
}

/**
 * The table's state as URL parameters, only what differs from the defaults (the inverse of
 * `tableFromParams`), and the open task.
 * @param {Pick<TableState, "filter" | "sort" | "offset">} table
 * @param {string} window
 * @param {string | null} [task]
 * @returns {[string, string][]}
 */
export function tableParams(table, window, task = null) {
  /** @type {[string, string][]} */
  const params = [];
  const { filter } = table;
  if (filter.status.length) params.push(["status", filter.status.join(",")]);
  if (filter.job) params.push(["tjob", filter.job]);
  if (filter.submitted_by) params.push(["by", filter.submitted_by]);
  if (filter.worker_id) params.push(["worker", filter.worker_id]);
  if (filter.q) params.push(["q", filter.q]);
  if (table.sort !== DEFAULT_SORT) params.push(["sort", table.sort]);
  if (table.offset) params.push(["offset", String(table.offset)]);
  if (window !== DEFAULT_WINDOW) params.push(["window", window]);
  if (task) params.push(["task", task]);
  return params;
}

/**
 * Whether two table states read the same page.
 * @param {Pick<TableState, "filter" | "sort" | "offset">} a
 * @param {Pick<TableState, "filter" | "sort" | "offset">} b
 */
export function sameTable(a, b) {
  const key = (/** @type {typeof a} */ t) => JSON.stringify([t.filter, t.sort, t.offset]);
  return key(a) === key(b);
}

/**
 * The sort after a click on `key`'s column: newest first on the first click of a time
 * column; then the other way round.
 * @param {string} sort
 * @param {string} key
 */
export function nextSort(sort, key) {
  const descending = `-${key}`;
  return sort === descending ? key : descending;
}

/**
 * `key`'s column as aria-sort says it.
 * @param {string} sort
 * @param {string} key
 * @returns {"ascending" | "descending" | "none"}
 */
export function ariaSort(sort, key) {
  return sort === key ? "ascending" : sort === `-${key}` ? "descending" : "none";
}

/**
 * The offset `delta` pages away (never before the first).
 * @param {number} offset
 * @param {number} delta
 */
export function pageOffset(offset, delta) {
  return Math.max(0, offset + delta * PAGE);
}

/**
 * Does a task (from an event) match the filter, as far as the page can tell? A search (q)
 * needs the hub: then no new task joins the page before it is read again.
 * @param {TaskFilter} filter
 * @param {Task} task
 * @param {string | undefined} me the viewer's user id ("me" in the filter), if known
 */
export function matchesFilter(filter, task, me) {
  if (filter.status.length && !(task.status && filter.status.includes(task.status))) return false;
  if (filter.job && task.job_name !== filter.job) return false;
  if (filter.submitted_by) {
    const wanted = filter.submitted_by === "me" ? me : filter.submitted_by;
    if (task.submitted_by !== wanted) return false;
  }
  if (filter.worker_id && task.worker_id !== filter.worker_id) return false;
  return !filter.q;
}

// -- the viewer ---------------------------------------------------------------------------

/**
 * Whether the viewer may cancel `task`, as far as the page knows: the hub lets its
 * submitter, superusers, and the owner of the worker that took it (one of the room's
 * workers). Until the hub has said who the viewer is, or for a task without `submitted_by`
 * (an older hub), Cancel is offered and the hub's 403 withdraws it.
 * @param {User | null} me
 * @param {Task} task
 * @param {Worker[]} workers
 */
export function mayCancel(me, task, workers) {
  if (!me || me.is_superuser || task.submitted_by === undefined) return true;
  if (task.submitted_by === me.id) return true;
  return task.worker_id != null && workers.some(
    (w) => w.id === task.worker_id && (w.owned_by ?? w.user_id) === me.id,
  );
}

/**
 * A task's submitter's name as far as the page knows it: the summary's, else one learnt
 * from another task, else the short form of the user id.
 * @param {Map<string, string>} userNames
 * @param {Task} task
 */
export function nameOfSubmitter(userNames, task) {
  if (task.submitter) return task.submitter;
  const name = task.submitted_by ? userNames.get(task.submitted_by) : undefined;
  return name ?? (task.submitted_by ? shortId(task.submitted_by) : "");
}

// -- recent rooms -------------------------------------------------------------------------

/**
 * The recent rooms as stored (anything else stored there: none).
 * @param {string | null} stored
 * @returns {string[]}
 */
export function parseRecentRooms(stored) {
  try {
    const rooms = JSON.parse(stored ?? "[]");
    return Array.isArray(rooms) ? rooms.filter((r) => typeof r === "string") : [];
  } catch {
    return [];
  }
}

/**
 * `room` first, then the others, at most RECENT_ROOMS_KEEP.
 * @param {string[]} rooms
 * @param {string} room
 */
export function withRecentRoom(rooms, room) {
  return [room, ...rooms.filter((r) => r !== room)].slice(0, RECENT_ROOMS_KEEP);
}
