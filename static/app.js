// Taskhub's room page, an operator's dashboard of a room: sign in, choose a room (kept in
// the URL: /?room=lab, or #/lab), see its counts and charts, jobs, workers and tasks live
// (a filtered, sorted, paged table whose state is in the URL too), a task's details and
// log, submit from a schema-generated form, cancel and re-run (one task or in bulk).

import { Api, ApiError } from "./api.js";
import { $, announce, h, setFieldError, toast } from "./dom.js";
import { Detail } from "./detail.js";
import { jobLabel, shortId } from "./format.js";
import { renderJobs, renderPolicy, renderWorkers, tickWorkers } from "./jobs.js";
import { Live } from "./live.js";
import { Overview } from "./overview.js";
import { SchemaForm } from "./schema-form.js";
import { STATUSES, TaskTable } from "./tasks.js";

const TOKEN_KEY = "taskhub.token";
const ROOMS_KEY = "taskhub.rooms";
const SHARED_ROOMS = ["@global", "@internal"]; // their jobs are listed in every room
const PAGE = 50;
const MAX_PAGE = 500; // the hub's largest page
const QUEUE_REFRESH_MS = 250;
const SORTS = ["-created_at", "created_at", "started_at", "-started_at", "completed_at",
  "-completed_at", "status", "-status"];
const WINDOWS = ["15m", "1h", "24h"];
// Live events refresh the charts' last bucket(s) at most this often (coalesced).
const STATS_TAIL_MS = 2000;
const STATS_IDLE_MS = 15000; // and this often without events (new buckets begin)
// An event changed what the shown page should hold: read it again at most this often.
const PAGE_REFRESH_MS = 1000;
const WORKERS_REFRESH_MS = 500;
// Tasks of a shared (@global, @internal) job queue up with those of other rooms, whose
// events this room never hears: their places are read again this often while shown.
const SHARED_QUEUE_REFRESH_MS = 3000;
const CONNECTION_LABELS = {
  connecting: "Connecting…",
  connected: "Connected",
  reconnecting: "Reconnecting…",
  offline: "Offline",
};

const session = {
  api: null,
  me: null, // the signed-in user ({id, name, is_superuser}), once the hub has said
  live: null,
  room: null, // the open room, or null
};

// -- routing --------------------------------------------------------------------------

function routeFromUrl() {
  const params = new URLSearchParams(location.search);
  let room = params.get("room");
  if (!room && location.hash.startsWith("#/")) {
    try {
      room = decodeURIComponent(location.hash.slice(2));
    } catch {
      room = location.hash.slice(2); // not percent-encoded after all
    }
    if (room) history.replaceState(null, "", roomUrl(room));
  }
  return { room: room || null, job: params.get("job") };
}

/** A room's address; the open room's carries its table's filters, sort, page and open
 * task, so that it can be shared and reloaded. */
function roomUrl(room, job = null) {
  const params = new URLSearchParams({ room });
  if (job) params.set("job", job);
  if (room === session.room) {
    for (const [key, value] of tableParams()) params.set(key, value);
  }
  return `/?${params}`;
}

function validateRoom(room) {
  if (!room) return "Enter a room name.";
  if (room.length > 128) return "At most 128 characters.";
  if (/[@:]/.test(room)) return "A room name cannot contain @ or :.";
  if (room === "." || room === "..") return "A room name cannot be . or .. alone.";
  return null;
}

function show() {
  const { room, job } = routeFromUrl();
  const signedIn = Boolean(session.api);
  $("#sign-in-view").hidden = signedIn;
  $("#room-form").hidden = !signedIn;
  $("#sign-out").hidden = !signedIn;
  $("#connection").hidden = !signedIn;
  const usable = room && !validateRoom(room);
  $("#lobby-view").hidden = !signedIn || usable;
  $("#room-view").hidden = !signedIn || !usable;
  if (!signedIn) {
    closeRoom();
    document.title = "Sign in · Taskhub";
    return;
  }
  if (!usable) {
    closeRoom();
    renderRecentRooms();
    if (room) {
      $("#room-input").value = room;
      setFieldError($("#room-input"), $("#room-error"), validateRoom(room));
    }
    document.title = "Taskhub";
    return;
  }
  $("#room-input").value = room;
  setFieldError($("#room-input"), $("#room-error"), "");
  if (room !== session.room) openRoom(room);
  else if (readTableState()) loadPage();
  if (job !== roomState.selected) selectJob(job, { push: false });
  const task = new URLSearchParams(location.search).get("task");
  if (task && task !== detail.openId) detail.open(task, null);
  else if (!task && detail.openId) detail.close();
}

// -- sign in / out ----------------------------------------------------------------------

async function signIn(event) {
  event.preventDefault();
  const input = $("#token-input");
  const error = $("#token-error");
  const token = input.value.trim();
  if (!token) {
    setFieldError(input, error, "Paste a token.");
    input.focus();
    return;
  }
  let me;
  try {
    me = await new Api(token).me();
  } catch (failure) {
    const refused = failure instanceof ApiError && failure.status === 401;
    setFieldError(input, error, refused ? "The hub did not accept this token." : failure.message);
    input.focus();
    return;
  }
  setFieldError(input, error, "");
  input.value = "";
  // This tab only, unless the person asks this device to remember it.
  if ($("#remember-input").checked) localStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.setItem(TOKEN_KEY, token);
  start(token, me);
  $(routeFromUrl().room ? "#main" : "#room-input").focus();
}

function signOut(message = "") {
  localStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(TOKEN_KEY);
  session.live?.close();
  session.live = null;
  session.api = null;
  setMe(null);
  show();
  if (message) setFieldError($("#token-input"), $("#token-error"), message);
  $("#token-input").focus();
}

function start(token, me = null) {
  session.api = new Api(token);
  if (me) setMe(me);
  else learnWhoIAm();
  session.live = new Live(token, {
    state: setConnection,
    taskStatus: onTaskStatus,
    taskLog: (event) => detail.onLog(event),
    jobsInvalidate: () => scheduleJobsRefresh(), // a worker came or left: jobs and workers
    synced: () => {
      if (!session.me) learnWhoIAm(); // the hub was out of reach at the start
      if (session.room) {
        refreshAll();
        detail.reloadLogs();
        detail.refreshPlace();
      }
    },
    refused: () => signOut("The hub refused this token. Sign in again."),
    joinFailed: (room, error) => toast(`Could not follow room ${room}: ${error.message}`),
  });
  setConnection("connecting");
  show();
}

/** Ask the hub who the token's user is (a stored token was never checked). */
async function learnWhoIAm() {
  const api = session.api;
  try {
    const me = await api.me();
    if (session.api === api) setMe(me);
  } catch (error) {
    if (session.api === api) signedOutBy(error); // else: asked again once live is back
  }
}

function setMe(me) {
  session.me = me;
  const label = $("#whoami");
  label.hidden = !me;
  label.textContent = me ? me.name : "";
  label.title = me ? `Signed in as ${me.name}${me.is_superuser ? " (superuser)" : ""}` : "";
  if (me) userNames.set(me.id, me.name);
  taskTable.refreshActions();
  detail.refreshPlace(); // "of yours" needs to know who the viewer is
}

/** Whether the viewer may cancel `task`, as far as the page knows: the hub lets its
 * submitter, superusers, and the owner of the worker that took it (one of the room's
 * workers). Until the hub has said who the viewer is, or for a task without `submitted_by`
 * (an older hub), Cancel is offered and the hub's 403 withdraws it. */
function mayCancel(task) {
  const me = session.me;
  if (!me || me.is_superuser || task.submitted_by === undefined) return true;
  if (task.submitted_by === me.id) return true;
  return task.worker_id != null && roomState.workers.some(
    (w) => w.id === task.worker_id && (w.owned_by ?? w.user_id) === me.id,
  );
}

const userNames = new Map(); // user id -> name, from the summaries (events carry no names)

/** The submitter's name as far as the page knows it. */
function submitterName(task) {
  if (task.submitter) return task.submitter;
  const name = userNames.get(task.submitted_by);
  return name ?? (task.submitted_by ? shortId(task.submitted_by) : "");
}

function setConnection(state, detail = "") {
  const el = $("#connection");
  el.dataset.state = state;
  el.querySelector(".label").textContent = CONNECTION_LABELS[state] ?? state;
  el.title = detail || (state === "connected" ? "Live updates are on." : "Updates are paused.");
}

/** A REST failure: 401 signs out; anything else is shown briefly. */
function failed(error, what) {
  if (!signedOutBy(error)) toast(`${what}: ${error.message}`);
}

/** Sign out when `error` is the hub refusing the token; whether it was. */
function signedOutBy(error) {
  if (!(error instanceof ApiError && error.status === 401)) return false;
  signOut("The hub no longer accepts this token. Sign in again.");
  return true;
}

// -- rooms --------------------------------------------------------------------------------

function recentRooms() {
  try {
    const rooms = JSON.parse(localStorage.getItem(ROOMS_KEY) ?? "[]");
    return Array.isArray(rooms) ? rooms.filter((r) => typeof r === "string") : [];
  } catch {
    return [];
  }
}

function rememberRoom(room) {
  const rooms = [room, ...recentRooms().filter((r) => r !== room)].slice(0, 8);
  localStorage.setItem(ROOMS_KEY, JSON.stringify(rooms));
  $("#recent-rooms").replaceChildren(...rooms.map((r) => new Option(r)));
}

function renderRecentRooms() {
  const rooms = recentRooms();
  $("#recent-rooms").replaceChildren(...rooms.map((r) => new Option(r)));
  const open = (room) => (event) => {
    if (event.metaKey || event.ctrlKey || event.shiftKey) return; // a new tab or window
    navigate(event, room);
  };
  $("#recent-list").replaceChildren(
    ...rooms.map((r) => h("li", {}, h("a", { href: roomUrl(r), onclick: open(r) }, r))),
  );
  if (!rooms.length) $("#recent-list").append(h("li", { class: "empty" }, "None yet."));
}

function navigate(event, room) {
  event?.preventDefault();
  history.pushState(null, "", roomUrl(room));
  show();
}

function onRoomForm(event) {
  event.preventDefault();
  const input = $("#room-input");
  const room = input.value.trim();
  const problem = validateRoom(room);
  setFieldError(input, $("#room-error"), problem);
  if (problem) {
    input.focus();
    return;
  }
  navigate(null, room);
}

// -- the open room ---------------------------------------------------------------------------

const roomState = {
  generation: 0, // bumped on every room change: late answers for another room are dropped
  jobs: null, // null until the first answer
  workers: [],
  selected: null, // full name of the job whose form is shown
  job: null, // that job (with its schema)
  form: null, // its SchemaForm
};

// The table's state (in the URL): filter, sort, page.
const table = {
  filter: { status: [], job: "", submitted_by: "", worker_id: "", q: "" },
  sort: "-created_at",
  offset: 0,
  total: 0,
  request: 0, // bumped on every read of the page: an older answer is dropped
  refreshTimer: null,
  lastRefresh: 0,
};

// The overview's state: the window, and the coalesced reads of the charts' tail.
const stats = { window: "1h", request: 0, tailTimer: null, lastTail: 0, loaded: false };
const lastStatus = new Map(); // task id -> the status last heard (for the counts table)
const LAST_STATUS_KEEP = 20000;

const taskTable = new TaskTable($("#tasks"), {
  open: (task, row) => openDetail(task.id, row.root, task),
  cancel: cancelTask,
  rerun: rerunTask,
  mayCancel,
  submitterName,
  selection: onSelection,
  changed: announceTask,
  added: (tasks) => {
    table.total += tasks.length;
    updateTaskCount();
  },
  outOfPage: () => schedulePageRefresh(),
});
taskTable.matches = matchesFilter;

const overview = new Overview($("#charts"), $("#counts tbody"));

const detail = new Detail($("#detail"), $("#detail-body"), $("#detail-close"), {
  load: (id) => session.api.task(id),
  logs: (id, after) => session.api.logs(id, after),
  place: (id) => session.api.place(id),
  isMine: (task) => Boolean(session.me && task.submitted_by && task.submitted_by === session.me.id),
  cancel: (task) => session.api.cancel(task.id),
  rerun: (task) => session.api.rerun(task.id),
  mayCancel,
  submitterName,
  openTask: (id) => openDetail(id, document.activeElement),
  closed: () => setTaskInUrl(null),
});

function openDetail(id, from, known = null) {
  detail.open(id, from, known);
  setTaskInUrl(id);
}

function setTaskInUrl(id) {
  if (!session.room) return;
  const params = new URLSearchParams(location.search);
  if (id) params.set("task", id);
  else params.delete("task");
  history.replaceState(null, "", `/?${params}`);
}

/** The table's state as URL parameters (only what differs from the defaults). */
function tableParams() {
  const params = [];
  const { filter } = table;
  if (filter.status.length) params.push(["status", filter.status.join(",")]);
  if (filter.job) params.push(["tjob", filter.job]);
  if (filter.submitted_by) params.push(["by", filter.submitted_by]);
  if (filter.worker_id) params.push(["worker", filter.worker_id]);
  if (filter.q) params.push(["q", filter.q]);
  if (table.sort !== "-created_at") params.push(["sort", table.sort]);
  if (table.offset) params.push(["offset", String(table.offset)]);
  if (stats.window !== "1h") params.push(["window", stats.window]);
  const task = detail?.openId;
  if (task) params.push(["task", task]);
  return params;
}

/** Read the table's state from the URL into `table` and the controls; whether it changed. */
function readTableState() {
  const params = new URLSearchParams(location.search);
  const before = JSON.stringify([table.filter, table.sort, table.offset]);
  const status = (params.get("status") ?? "").split(",").filter((s) => STATUSES.includes(s));
  table.filter = {
    status,
    job: params.get("tjob") ?? "",
    submitted_by: params.get("by") ?? "",
    worker_id: params.get("worker") ?? "",
    q: params.get("q") ?? "",
  };
  const sort = params.get("sort");
  table.sort = SORTS.includes(sort) ? sort : "-created_at";
  table.offset = Math.max(0, Number.parseInt(params.get("offset") ?? "0", 10) || 0);
  const windowParam = params.get("window");
  const windowChanged = WINDOWS.includes(windowParam ?? "1h") && (windowParam ?? "1h") !== stats.window;
  if (windowChanged) {
    stats.window = windowParam ?? "1h";
    $("#window-select").value = stats.window;
    if (session.room) loadStats();
  }
  showTableState();
  return before !== JSON.stringify([table.filter, table.sort, table.offset]);
}

/** The controls show `table`'s state. */
function showTableState() {
  const form = $("#task-filters");
  for (const box of form.querySelectorAll("input[name=status]")) {
    box.checked = table.filter.status.includes(box.value);
  }
  ensureOption($("#filter-job"), table.filter.job);
  $("#filter-job").value = table.filter.job;
  ensureOption($("#filter-submitter"), table.filter.submitted_by);
  $("#filter-submitter").value = table.filter.submitted_by;
  ensureOption($("#filter-worker"), table.filter.worker_id);
  $("#filter-worker").value = table.filter.worker_id;
  if ($("#filter-q") !== document.activeElement) $("#filter-q").value = table.filter.q;
  for (const th of document.querySelectorAll("#task-table th[data-sort]")) {
    const key = th.dataset.sort;
    const state = table.sort === key ? "ascending" : table.sort === `-${key}` ? "descending" : "none";
    th.setAttribute("aria-sort", state);
  }
}

/** A <select> offers `value` even when the lists the page read do not (yet). */
function ensureOption(select, value) {
  if (!value || [...select.options].some((option) => option.value === value)) return;
  select.append(new Option(value.length > 20 ? shortId(value) : value, value));
}

/** The filter changed in the controls: back to the first page, into the URL, read. */
function onFilterChange() {
  const form = $("#task-filters");
  table.filter = {
    status: [...form.querySelectorAll("input[name=status]:checked")].map((box) => box.value),
    job: $("#filter-job").value,
    submitted_by: $("#filter-submitter").value,
    worker_id: $("#filter-worker").value,
    q: $("#filter-q").value.trim(),
  };
  table.offset = 0;
  taskTable.clearSelection();
  writeUrl();
  loadPage();
}

function writeUrl() {
  if (session.room) history.replaceState(null, "", roomUrl(session.room, roomState.selected));
}

/** Does a task (from an event) match the filter, as far as the page can tell? A search
 * (q) needs the hub: then no new task joins the page before it is read again. */
function matchesFilter(task) {
  const { filter } = table;
  if (filter.status.length && !filter.status.includes(task.status)) return false;
  if (filter.job && task.job_name !== filter.job) return false;
  if (filter.submitted_by) {
    const wanted = filter.submitted_by === "me" ? session.me?.id : filter.submitted_by;
    if (task.submitted_by !== wanted) return false;
  }
  if (filter.worker_id && task.worker_id !== filter.worker_id) return false;
  return !filter.q;
}

function openRoom(room) {
  session.room = room;
  roomState.generation += 1;
  roomState.jobs = null;
  roomState.selected = null;
  roomState.job = null;
  table.total = 0;
  stats.loaded = false;
  lastStatus.clear();
  rememberRoom(room);
  document.title = `${room} · Taskhub`;
  $("#room-name").textContent = room;
  $("#jobs").replaceChildren();
  $("#jobs").setAttribute("aria-busy", "true");
  $("#submit-panel").hidden = true;
  $("#bulk-result").textContent = "";
  detail.close();
  taskTable.clearSelection();
  taskTable.setPage([]);
  readTableState();
  session.live.setRooms([room, ...SHARED_ROOMS]);
  refreshAll();
}

function closeRoom() {
  if (!session.room) return;
  session.room = null;
  roomState.generation += 1;
  roomState.selected = null;
  detail.close();
  session.live?.setRooms([]);
}

/** Everything the room shows (on open, and after a reconnect). */
function refreshAll() {
  refreshJobs();
  loadPage();
  loadStats();
}

let jobsTimer;

function scheduleJobsRefresh() {
  clearTimeout(jobsTimer);
  jobsTimer = setTimeout(() => session.room && refreshJobs(), 120);
}

let workersTimer = null;

/** Read the workers again soon (a worker came or left, a task was taken or ended). */
function scheduleWorkersRefresh() {
  if (workersTimer) return;
  workersTimer = setTimeout(async () => {
    workersTimer = null;
    if (!session.room) return;
    const { generation } = roomState;
    try {
      const workers = await session.api.workers(session.room);
      if (generation !== roomState.generation) return;
      roomState.workers = workers.items;
      drawWorkers();
    } catch (error) {
      signedOutBy(error);
    }
  }, WORKERS_REFRESH_MS);
}

/** Jobs, workers, and the selected job's schema (it may have changed). */
async function refreshJobs() {
  const { generation } = roomState;
  const room = session.room;
  try {
    const [jobs, workers] = await Promise.all([session.api.jobs(room), session.api.workers(room)]);
    if (generation !== roomState.generation) return;
    roomState.jobs = jobs.items;
    roomState.workers = workers.items;
    drawJobs();
    drawWorkers();
    taskTable.refreshActions(); // a task its viewer's worker took may be cancelled by them
    if (roomState.selected) await loadJob(roomState.selected, { keepForm: true });
  } catch (error) {
    failed(error, "Could not load the jobs");
  }
}

function drawWorkers() {
  renderWorkers($("#workers"), roomState.workers, {
    openTask: (id) => openDetail(id, document.activeElement),
  });
  const select = $("#filter-worker");
  const current = select.value;
  select.replaceChildren(new Option("Any worker", ""), ...roomState.workers.map(
    (worker) => new Option(`${shortId(worker.id)}${worker.owner ? ` (${worker.owner})` : ""}`, worker.id),
  ));
  ensureOption(select, current);
  select.value = current;
}

function drawJobs() {
  if (!roomState.jobs) return; // still loading
  renderJobs($("#jobs"), roomState.jobs, {
    room: session.room,
    selected: roomState.selected,
    onSelect: (fullName) => selectJob(fullName === roomState.selected ? null : fullName),
  });
  const select = $("#filter-job");
  const current = select.value;
  select.replaceChildren(new Option("Any job", ""), ...roomState.jobs
    .map((job) => job.full_name).sort()
    .map((name) => new Option(`${jobLabel(name).name} (${jobLabel(name).scope})`, name)));
  ensureOption(select, current);
  select.value = current;
  updateJobNote();
}

// -- the table ----------------------------------------------------------------------------------

/** Read the shown page again (filter, sort and page from `table`); only the answer to the
 * latest request is used. */
async function loadPage() {
  if (!session.room) return;
  const { generation } = roomState;
  table.request += 1;
  const request = table.request;
  table.lastRefresh = Date.now();
  taskTable.newOnTop = table.offset === 0 && table.sort === "-created_at";
  const since = taskTable.mark(); // events from now on may be newer than the answer
  $("#task-table").setAttribute("aria-busy", "true");
  try {
    const page = await session.api.taskSummaries(session.room, table.filter, {
      sort: table.sort, limit: PAGE, offset: table.offset,
    });
    if (generation !== roomState.generation || request !== table.request) return;
    for (const task of page.items) {
      if (task.submitter && task.submitted_by) userNames.set(task.submitted_by, task.submitter);
      rememberStatus(task.id, task.status);
    }
    drawSubmitters();
    taskTable.limit = PAGE;
    const late = taskTable.setPage(page.items, since);
    table.total = page.total + late;
    updateTaskCount();
    // A task heard of after the request may be in its total too (committed before the read,
    // yet below its page): read again once the events let up, when none is late.
    if (late) schedulePageRefresh();
  } catch (error) {
    if (request === table.request) failed(error, "Could not load the tasks");
  } finally {
    if (request === table.request) $("#task-table").setAttribute("aria-busy", "false");
  }
}

/** The submitter filter offers everyone whose tasks the page has seen. */
function drawSubmitters() {
  const select = $("#filter-submitter");
  const current = select.value;
  const others = [...userNames].filter(([id]) => id !== session.me?.id)
    .sort((a, b) => a[1].localeCompare(b[1]));
  const wanted = ["", "me", ...others.map(([id]) => id)];
  const have = [...select.options].map((option) => option.value);
  if (wanted.length === have.length && wanted.every((value, i) => value === have[i])) return;
  select.replaceChildren(new Option("Anyone", ""), new Option("Mine", "me"),
    ...others.map(([id, name]) => new Option(name, id)));
  ensureOption(select, current);
  select.value = current;
}

/** Events changed what the page should hold: read it again, at most once per
 * PAGE_REFRESH_MS however many come. */
function schedulePageRefresh() {
  if (table.refreshTimer) return;
  const wait = Math.max(0, table.lastRefresh + PAGE_REFRESH_MS - Date.now());
  table.refreshTimer = setTimeout(() => {
    table.refreshTimer = null;
    loadPage();
  }, wait);
}

function updateTaskCount() {
  const shown = taskTable.size;
  const { total, offset } = table;
  $("#tasks-count").textContent = total === 1 ? "1 task" : `${total} tasks`;
  $("#tasks-count").dataset.total = String(total);
  $("#page-info").textContent = shown ? `${offset + 1}–${offset + shown} of ${total}` : "";
  $("#page-prev").disabled = offset === 0;
  $("#page-next").disabled = offset + shown >= total;
  $("#tasks-empty").hidden = shown > 0;
}

function goToPage(delta) {
  table.offset = Math.max(0, table.offset + delta * PAGE);
  taskTable.clearSelection();
  writeUrl();
  loadPage();
}

function onSort(key) {
  // Newest first on the first click of a time column; then the other way round.
  const descending = `-${key}`;
  table.sort = table.sort === descending ? key : descending;
  table.offset = 0;
  showTableState();
  writeUrl();
  loadPage();
}

function rememberStatus(id, status) {
  if (lastStatus.size > LAST_STATUS_KEEP) lastStatus.delete(lastStatus.keys().next().value);
  lastStatus.set(id, status);
}

function onTaskStatus(event) {
  if (event.room_id !== session.room) return;
  taskTable.push(event);
  detail.onStatus(event);
  // The counts table: a change of status moves one task from a column to another.
  const previous = lastStatus.get(event.id);
  if (previous !== event.status) {
    if (previous || event.status === "pending") overview.applyDelta(event.name, previous ?? null, event.status);
    rememberStatus(event.id, event.status);
    if (event.status !== "pending") scheduleWorkersRefresh(); // taken, or its slot freed
    // Queue places of the pending tasks shown move when one joins or leaves the queue.
    // (A task the page never saw may have left it too: it was older than the page.)
    const queueMoved = previous === "pending" || event.status === "pending" || !previous;
    if (queueMoved && showsPending()) refreshQueueSoon();
  }
  scheduleStatsTail();
}

// -- the overview ---------------------------------------------------------------------------------

/** The whole window (a room opened, the window changed, a reconnect). */
async function loadStats() {
  if (!session.room) return;
  const { generation } = roomState;
  stats.request += 1;
  const request = stats.request;
  try {
    const answer = await session.api.stats(session.room, stats.window);
    if (generation !== roomState.generation || request !== stats.request) return;
    stats.loaded = true;
    stats.lastTail = Date.now();
    overview.setStats(answer);
    $("#stats-note").textContent = "";
  } catch (error) {
    if (request !== stats.request || signedOutBy(error)) return;
    $("#stats-note").textContent = `The hub gave no figures: ${error.message}`;
  }
}

/** Live events: read the charts' tail (from the last bucket on) at most every
 * STATS_TAIL_MS, never the whole window again. */
function scheduleStatsTail() {
  if (stats.tailTimer || !stats.loaded) return;
  const wait = Math.max(0, stats.lastTail + STATS_TAIL_MS - Date.now());
  stats.tailTimer = setTimeout(readStatsTail, wait);
}

async function readStatsTail() {
  stats.tailTimer = null;
  if (!session.room || !stats.loaded) return;
  const { generation } = roomState;
  const request = stats.request;
  stats.lastTail = Date.now();
  try {
    const answer = await session.api.stats(session.room, stats.window, overview.tailSince);
    if (generation !== roomState.generation || request !== stats.request) return;
    overview.mergeTail(answer);
  } catch (error) {
    signedOutBy(error);
  }
}

// -- selection and bulk actions ---------------------------------------------------------------

function onSelection(ids, shown) {
  const count = ids.length;
  $("#selection-count").textContent = count === 0 ? "No task selected."
    : count === 1 ? "1 task selected." : `${count} tasks selected.`;
  for (const button of document.querySelectorAll("#bulk-bar [data-scope=ids]")) {
    button.disabled = count === 0;
  }
  const all = $("#select-page");
  all.checked = count > 0 && count >= shown;
  all.indeterminate = count > 0 && count < shown;
}

const BULK_VERBS = { cancel: ["Cancel", "cancelled"], rerun: ["Re-run", "re-run"] };

/** Count what a bulk action would act on (dry run), ask in a dialog, then do it. */
async function bulkAction(action, scope, opener) {
  const ids = scope === "ids" ? [...taskTable.selected] : null;
  const target = ids ? { ids } : { filter: table.filter };
  const [verb, done] = BULK_VERBS[action];
  let dry;
  try {
    dry = await session.api.bulk(session.room, action, { ...target, dryRun: true });
  } catch (error) {
    failed(error, `Could not count the tasks to ${verb.toLowerCase()}`);
    return;
  }
  const dialog = $("#bulk-dialog");
  const what = ids ? "selected" : "matching the filter";
  $("#bulk-dialog-title").textContent = `${verb} tasks`;
  const refusedText = dry.refused ? ` ${dry.refused} of them would be refused.` : "";
  $("#bulk-dialog-text").textContent = `${verb} ${dry.matched} ${dry.matched === 1 ? "task" : "tasks"} ${what}?${refusedText}`;
  $("#bulk-dialog-text").dataset.matched = String(dry.matched);
  $("#bulk-confirm").textContent = `${verb} ${dry.matched}`;
  $("#bulk-confirm").disabled = dry.matched === 0;
  dialog.returnValue = "";
  dialog.showModal();
  $(dry.matched ? "#bulk-confirm" : "#bulk-dismiss").focus();
  const answer = await new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue), { once: true });
  });
  opener?.focus();
  if (answer !== "confirm") return;
  try {
    const result = await session.api.bulk(session.room, action, target);
    const message = `${result.succeeded} of ${result.matched} ${done}; ${result.refused} refused.`;
    const out = $("#bulk-result");
    out.textContent = message;
    out.dataset.succeeded = String(result.succeeded);
    out.dataset.refused = String(result.refused);
    announce(message);
    taskTable.clearSelection();
    loadPage();
  } catch (error) {
    failed(error, `Could not ${verb.toLowerCase()} the tasks`);
  }
}

// -- one task -----------------------------------------------------------------------------------

const pendingAnnouncements = [];
let announceTimer = null;

/** Tell screen readers of a shown task's new status; a burst becomes one message. */
function announceTask(task, previous) {
  if (!previous || previous.status === task.status) return;
  const { name } = jobLabel(task.job_name);
  pendingAnnouncements.push(`Task ${name} ${shortId(task.id)} is ${task.status}.`);
  if (announceTimer) return;
  announceTimer = setTimeout(() => {
    announceTimer = null;
    const messages = pendingAnnouncements.splice(0);
    announce(messages.length === 1 ? messages[0] : `${messages.length} tasks changed status.`);
  }, 500);
}

async function cancelTask(task, row) {
  row.showMessage("");
  try {
    const updated = await session.api.cancel(task.id);
    taskTable.push({ ...updated, name: updated.job_name });
  } catch (error) {
    if (error instanceof ApiError && error.status === 403) row.forbidCancel(error.message);
    else if (!signedOutBy(error)) row.showMessage(`Could not cancel: ${error.message}`);
  }
}

async function rerunTask(task, row) {
  row.showMessage("");
  try {
    const created = await session.api.rerun(task.id);
    row.showMessage(`Re-run as ${shortId(created.id)}.`);
    schedulePageRefresh();
  } catch (error) {
    if (!signedOutBy(error)) row.showMessage(`Could not re-run: ${error.message}`);
  }
}

function showsPending(test = () => true) {
  return [...taskTable.rows.values()].some(
    (row) => row.task.status === "pending" && test(row.task.job_name),
  );
}

let queueTimer = null;

/** A task joined or left a queue: the places of the others may have moved in ways an event
 * does not say (a higher priority goes ahead of them), so read them again from the hub, at
 * most once per QUEUE_REFRESH_MS however many events come. Only the rows shown change. */
function refreshQueueSoon() {
  if (queueTimer) return;
  const { generation } = roomState;
  queueTimer = setTimeout(async () => {
    queueTimer = null;
    if (!session.room) return;
    try {
      const page = await session.api.taskSummaries(session.room, { status: ["pending"] }, {
        sort: "created_at", limit: MAX_PAGE,
      });
      if (generation === roomState.generation) taskTable.updateShown(page.items);
    } catch (error) {
      signedOutBy(error);
    }
  }, QUEUE_REFRESH_MS);
}

/** Pending tasks of shared jobs wait behind tasks of other rooms, which this room hears
 * nothing of: read their places again now and then while one is shown and the page is seen. */
function refreshSharedQueues() {
  if (!session.room || document.hidden) return;
  const shared = (name) => SHARED_ROOMS.some((room) => name.startsWith(`${room}:`));
  if (showsPending(shared)) refreshQueueSoon();
}

// -- the submit form ------------------------------------------------------------------------

async function selectJob(fullName, { push = true } = {}) {
  roomState.selected = fullName || null;
  if (push && session.room) history.pushState(null, "", roomUrl(session.room, roomState.selected));
  drawJobs();
  if (!fullName) {
    $("#submit-panel").hidden = true;
    roomState.job = null;
    renderPolicy($("#job-policy"), null);
    return;
  }
  await loadJob(fullName, { keepForm: false });
}

/** Fetch the job and (re)build its form; with keepForm, only when its schema changed. */
async function loadJob(fullName, { keepForm }) {
  const { generation } = roomState;
  let job;
  try {
    job = await session.api.job(session.room, fullName);
  } catch (error) {
    if (generation !== roomState.generation || fullName !== roomState.selected) return;
    if (error instanceof ApiError && error.status === 404) {
      showJobMissing(fullName, keepForm);
      return;
    }
    failed(error, "Could not load the job");
    return;
  }
  if (generation !== roomState.generation || fullName !== roomState.selected) return;
  const sameSchema = JSON.stringify(job.schema) === JSON.stringify(roomState.job?.schema);
  roomState.job = job;
  updateJobNote();
  renderPolicy($("#job-policy"), job); // it may change when the job is registered again
  if (keepForm && sameSchema && roomState.form) return;
  const { name, scope } = jobLabel(job.full_name);
  $("#submit-job-name").textContent = name;
  $("#submit-job-name").title = job.full_name;
  $("#job-description").textContent = job.schema?.description || `${scope} job ${job.full_name}`;
  roomState.form = new SchemaForm(job.schema, "payload");
  $("#form-fields").replaceChildren(roomState.form.element);
  showFormErrors([]);
  $("#submit-status").textContent = "";
  $("#submit-panel").hidden = false;
}

/** The selected job is not (or no longer) visible from the room. */
function showJobMissing(fullName, keepForm) {
  if (keepForm) {
    updateJobNote(); // the form stays: submitting explains what happened
    return;
  }
  roomState.job = null;
  $("#submit-panel").hidden = true;
  renderPolicy($("#job-policy"), null);
  toast(`The job ${fullName} is not offered in this room.`);
}

function updateJobNote() {
  const note = $("#job-note");
  const listed = roomState.jobs?.find((job) => job.full_name === roomState.selected);
  let text = "";
  if (roomState.jobs && roomState.selected && !listed) {
    text = "No worker offers this job now; submitting will fail.";
  } else if (listed && !listed.full_name.startsWith("@internal:") && !listed.workers.length) {
    text = "No worker serves this job right now: tasks wait in the queue until one does.";
  }
  note.textContent = text;
  note.hidden = !text;
}

function showFormErrors(messages) {
  const box = $("#form-errors");
  box.replaceChildren(...messages.map((message) => h("p", {}, message)));
  box.hidden = !messages.length;
}

async function onSubmit(event) {
  event.preventDefault();
  const { form, job } = roomState;
  if (!form || !job) return;
  const status = $("#submit-status");
  showFormErrors([]);
  const { value, errors } = form.read();
  if (errors.length) {
    showFormErrors(form.showErrors(errors));
    const count = errors.length;
    status.textContent = count === 1
      ? "1 field needs attention."
      : `${count} fields need attention.`;
    return;
  }
  form.clearErrors();
  const button = event.submitter ?? $("#submit-form button[type=submit]");
  button.disabled = true;
  status.textContent = "Submitting…";
  try {
    const task = await session.api.submit(session.room, job.full_name, value);
    taskTable.push({ ...task, name: task.job_name });
    status.textContent = `Submitted task ${shortId(task.id)}.`;
  } catch (error) {
    if (error instanceof ApiError && error.status === 422 && error.problem.errors) {
      showFormErrors(form.showServerErrors(error.problem.errors));
      status.textContent = "The hub rejected the input; see the highlighted fields.";
    } else if (!signedOutBy(error)) {
      showFormErrors([error.message]);
      status.textContent = "The task was not submitted.";
    }
  } finally {
    button.disabled = false;
  }
}

function resetForm() {
  if (!roomState.job) return;
  roomState.form = new SchemaForm(roomState.job.schema, "payload");
  $("#form-fields").replaceChildren(roomState.form.element);
  showFormErrors([]);
  $("#submit-status").textContent = "Form reset to the defaults.";
}

// -- start ---------------------------------------------------------------------------------------

function init() {
  $("#sign-in-form").addEventListener("submit", signIn);
  $("#sign-out").addEventListener("click", () => signOut());
  $("#room-form").addEventListener("submit", onRoomForm);
  $("#submit-form").addEventListener("submit", onSubmit);
  $("#reset-form").addEventListener("click", resetForm);
  $("#task-filters").addEventListener("change", (event) => {
    if (event.target.id !== "filter-q") onFilterChange();
  });
  $("#task-filters").addEventListener("submit", (event) => {
    event.preventDefault();
    onFilterChange();
  });
  let searchTimer;
  $("#filter-q").addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(onFilterChange, 300); // debounced: one read per pause
  });
  for (const th of document.querySelectorAll("#task-table th[data-sort]")) {
    th.querySelector("button").addEventListener("click", () => onSort(th.dataset.sort));
  }
  $("#select-page").addEventListener("change", (event) => taskTable.selectPage(event.target.checked));
  for (const button of document.querySelectorAll("#bulk-bar [data-bulk]")) {
    button.addEventListener("click", () => bulkAction(button.dataset.bulk, button.dataset.scope, button));
  }
  $("#page-prev").addEventListener("click", () => goToPage(-1));
  $("#page-next").addEventListener("click", () => goToPage(1));
  $("#window-select").addEventListener("change", (event) => {
    stats.window = event.target.value;
    writeUrl();
    loadStats();
  });
  window.addEventListener("popstate", show);
  const topbar = $(".topbar");
  new ResizeObserver(() => {
    document.documentElement.style.setProperty("--topbar-height", `${topbar.offsetHeight}px`);
  }).observe(topbar);
  setInterval(() => tickWorkers($("#workers")), 1000); // "seen … ago", ticking
  setInterval(() => session.room && stats.loaded && scheduleStatsTail(), STATS_IDLE_MS);
  setInterval(refreshSharedQueues, SHARED_QUEUE_REFRESH_MS);
  const token = sessionStorage.getItem(TOKEN_KEY) ?? localStorage.getItem(TOKEN_KEY);
  if (token) start(token);
  else show();
}

init();
