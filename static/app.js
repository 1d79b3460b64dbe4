// Taskhub's room page: sign in, choose a room (kept in the URL: /?room=lab, or #/lab),
// see its jobs, workers and tasks live, submit from a schema-generated form, cancel.

import { Api, ApiError } from "./api.js";
import { $, announce, h, setFieldError, toast } from "./dom.js";
import { jobLabel, shortId } from "./format.js";
import { renderJobs, renderWorkers } from "./jobs.js";
import { Live } from "./live.js";
import { SchemaForm } from "./schema-form.js";
import { TaskList } from "./tasks.js";

const TOKEN_KEY = "taskhub.token";
const ROOMS_KEY = "taskhub.rooms";
const SHARED_ROOMS = ["@global", "@internal"]; // their jobs are listed in every room
const PAGE = 50;
const MAX_PAGE = 500; // the hub's largest page
// The most tasks the list keeps (more only after "Load more" past it): live events of a
// busy room would otherwise grow it, and the work of every event, without end. The oldest
// go first; "Load more" brings them back.
const LIVE_KEEP = MAX_PAGE;
const QUEUE_REFRESH_MS = 250;
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

function roomUrl(room, job = null) {
  const params = new URLSearchParams({ room });
  if (job) params.set("job", job);
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
  if (job !== roomState.selected) selectJob(job, { push: false });
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
  localStorage.setItem(TOKEN_KEY, token);
  start(token, me);
  $(routeFromUrl().room ? "#main" : "#room-input").focus();
}

function signOut(message = "") {
  localStorage.removeItem(TOKEN_KEY);
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
    jobsInvalidate: () => scheduleJobsRefresh(),
    synced: () => {
      if (!session.me) learnWhoIAm(); // the hub was out of reach at the start
      if (session.room) refreshAll({ keepLoaded: true });
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
  taskList.refreshCancels();
}

/** Whether the viewer may cancel `task`, as far as the page knows: the hub lets its
 * submitter, superusers, and the owner of the worker that took it (one of the room's
 * workers). Until the hub has said who the viewer is, or for a task without `submitted_by`
 * (an older hub), Cancel is offered and the hub's 403 withdraws it. */
function mayCancel(task) {
  const me = session.me;
  if (!me || me.is_superuser || task.submitted_by === undefined) return true;
  if (task.submitted_by === me.id) return true;
  return task.worker_id != null
    && roomState.workers.some((w) => w.id === task.worker_id && w.owned_by === me.id);
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
  loaded: 0, // tasks fetched from the server so far (for "Load more"): set by setLoaded
  total: 0, // the server's count of them when last fetched
  listRequest: 0, // bumped on every refetch of the list: an older answer is dropped
  queueRefresh: null, // a timer: queue places to read again (refreshQueueSoon)
};

const taskList = new TaskList($("#tasks"), $("#tasks-empty"), {
  cancel: cancelTask,
  mayCancel,
  changed: announceTask,
  dropped: onTasksDropped,
  ignoredOlder: () => onTasksDropped(0, 1), // the hub has a task older than all shown
});

/** Tasks fetched so far; the list keeps as many (at least LIVE_KEEP). */
function setLoaded(count) {
  roomState.loaded = count;
  taskList.limit = Math.max(LIVE_KEEP, count);
}

/** The full list let its oldest tasks go (`shown` of them matched the filter): "Load more"
 * continues right after the oldest task shown, and is offered for those past it (at least
 * `atLeast`). */
function onTasksDropped(shown, atLeast = 0) {
  const older = Math.max(atLeast, roomState.total - roomState.loaded + shown);
  setLoaded(taskList.size);
  roomState.total = roomState.loaded + older;
}

function openRoom(room) {
  session.room = room;
  roomState.generation += 1;
  roomState.jobs = null;
  roomState.selected = null;
  roomState.job = null;
  setLoaded(0);
  roomState.total = 0;
  rememberRoom(room);
  document.title = `${room} · Taskhub`;
  $("#room-name").textContent = room;
  $("#jobs").replaceChildren();
  $("#jobs").setAttribute("aria-busy", "true");
  $("#submit-panel").hidden = true;
  taskList.reset([]);
  session.live.setRooms([room, ...SHARED_ROOMS]);
  refreshAll();
}

function closeRoom() {
  if (!session.room) return;
  session.room = null;
  roomState.generation += 1;
  roomState.selected = null;
  session.live?.setRooms([]);
}

/** Everything the room shows; after a reconnect (`keepLoaded`), as many tasks as shown. */
function refreshAll({ keepLoaded = false } = {}) {
  refreshJobs();
  refreshTasks({ keepLoaded });
}

let jobsTimer;

function scheduleJobsRefresh() {
  clearTimeout(jobsTimer);
  jobsTimer = setTimeout(() => session.room && refreshJobs(), 120);
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
    renderWorkers($("#workers"), roomState.workers);
    taskList.refreshCancels(); // a task its viewer's worker took may be cancelled by them
    if (roomState.selected) await loadJob(roomState.selected, { keepForm: true });
  } catch (error) {
    failed(error, "Could not load the jobs");
  }
}

function drawJobs() {
  if (!roomState.jobs) return; // still loading
  renderJobs($("#jobs"), roomState.jobs, {
    room: session.room,
    selected: roomState.selected,
    onSelect: (fullName) => selectJob(fullName === roomState.selected ? null : fullName),
  });
  updateJobNote();
}

/** Read the list again for the current room and filter: the first page, or with
 * `keepLoaded` as many tasks as were loaded (a reconnect must not undo "Load more").
 * Only the answer to the latest request is used (filter changes may overtake). */
async function refreshTasks({ keepLoaded = false } = {}) {
  const { generation } = roomState;
  roomState.listRequest += 1;
  const request = roomState.listRequest;
  const since = taskList.mark(); // events from now on may be newer than the answer
  const wanted = keepLoaded ? Math.max(PAGE, roomState.loaded) : PAGE;
  try {
    const { items, total } = await fetchTasks(taskList.filter, wanted);
    if (generation !== roomState.generation || request !== roomState.listRequest) return;
    if (keepLoaded && roomState.loaded > wanted) {
      // "Load more" brought more while this was read: read as many again (this answer
      // would take them back).
      refreshTasks({ keepLoaded: true });
      return;
    }
    setLoaded(items.length);
    roomState.total = total;
    taskList.reset(items, since); // tasks events brought meanwhile may make it drop some
    updateTaskCount();
  } catch (error) {
    failed(error, "Could not load the tasks");
  }
}

/** The newest `wanted` tasks with `status` (in pages of at most MAX_PAGE). */
async function fetchTasks(status, wanted) {
  const items = [];
  let total = 0;
  while (items.length < wanted) {
    const limit = Math.min(MAX_PAGE, wanted - items.length);
    const page = await session.api.tasks(session.room, { status, limit, offset: items.length });
    items.push(...page.items);
    total = page.total;
    if (page.items.length < limit) break;
  }
  return { items, total };
}

async function loadMoreTasks() {
  const { generation, listRequest } = roomState;
  try {
    const page = await session.api.tasks(session.room, {
      status: taskList.filter,
      limit: PAGE,
      offset: roomState.loaded,
    });
    // A refetch since (filter change, reconnect) has replaced what this page continues.
    if (generation !== roomState.generation || listRequest !== roomState.listRequest) return;
    setLoaded(roomState.loaded + page.items.length); // the list keeps them
    roomState.total = page.total;
    taskList.addSnapshots(page.items, { quiet: true });
    updateTaskCount();
  } catch (error) {
    failed(error, "Could not load more tasks");
  }
}

/** "N tasks", and "Load more" while the server's page said there are more. */
function updateTaskCount(total = roomState.total) {
  roomState.total = total;
  const shown = taskList.size;
  $("#tasks-count").textContent = shown === 1 ? "1 task" : `${shown} tasks`;
  $("#tasks-more").hidden = roomState.loaded >= total;
}

function onTaskStatus(event) {
  if (event.room_id !== session.room) return;
  const known = taskList.statusOf(event.id);
  const isNew = taskList.applyEvent(event); // false too for an old task a full list ignores
  updateTaskCount();
  if (isNew) fillPayload(event.id, roomState.generation); // events carry no payload
  // A task the list did not know (older than the loaded pages, or dropped from the list)
  // may have left the queue too: the places of those behind it moved all the same.
  const leftQueue = known === "pending" || (!known && event.status !== "pending");
  if (event.status === "pending" || (leftQueue && taskList.hasPending((n) => n === event.name))) {
    refreshQueueSoon();
  }
}

async function fillPayload(id, generation) {
  try {
    const task = await session.api.task(id);
    // Not for a task the list has dropped since (it would come back).
    if (generation === roomState.generation && taskList.has(id)) {
      taskList.addSnapshots([task], { quiet: true });
    }
  } catch (error) {
    // The payload is only shown in the task's details (the live state is already there),
    // but a token the hub no longer accepts signs the page out.
    signedOutBy(error);
  }
}

/** A task joined or left a queue: the places of the others may have moved in ways an event
 * does not say (a higher priority goes ahead of them), so read them again from the hub,
 * at most once per QUEUE_REFRESH_MS however many events come. */
function refreshQueueSoon() {
  if (roomState.queueRefresh) return;
  const { generation } = roomState;
  roomState.queueRefresh = setTimeout(async () => {
    roomState.queueRefresh = null;
    try {
      const page = await session.api.tasks(session.room, { status: "pending", limit: MAX_PAGE });
      if (generation !== roomState.generation) return;
      // New places for the tasks shown; the list does not grow by the others.
      const shown = page.items.filter((task) => taskList.has(task.id));
      taskList.addSnapshots(shown, { quiet: true });
    } catch (error) {
      signedOutBy(error);
    }
  }, QUEUE_REFRESH_MS);
}

/** Pending tasks of shared jobs wait behind tasks of other rooms, which this room hears
 * nothing of: read their places again now and then, while the page is seen. */
function refreshSharedQueues() {
  const shared = (name) => SHARED_ROOMS.some((room) => name.startsWith(`${room}:`));
  if (session.room && !document.hidden && taskList.hasPending(shared)) refreshQueueSoon();
}

function announceTask(task, previous) {
  const { name } = jobLabel(task.job_name);
  const subject = `${name} ${shortId(task.id)}`;
  if (!previous) announce(`New task ${subject}: ${task.status}.`);
  else if (previous.status !== task.status) announce(`Task ${subject} is ${task.status}.`);
}

async function cancelTask(task, view) {
  view.showMessage("");
  try {
    taskList.addSnapshots([await session.api.cancel(task.id)]);
  } catch (error) {
    if (error instanceof ApiError && error.status === 403) view.forbidCancel(error.message);
    else if (!signedOutBy(error)) view.showMessage(`Could not cancel: ${error.message}`);
  }
}

// -- the submit form ------------------------------------------------------------------------

async function selectJob(fullName, { push = true } = {}) {
  roomState.selected = fullName || null;
  if (push && session.room) history.pushState(null, "", roomUrl(session.room, roomState.selected));
  drawJobs();
  if (!fullName) {
    $("#submit-panel").hidden = true;
    roomState.job = null;
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
    taskList.addSnapshots([task]);
    updateTaskCount();
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
  $("#tasks-more").addEventListener("click", loadMoreTasks);
  $("#status-filter").addEventListener("change", (event) => {
    taskList.setFilter(event.target.value);
    refreshTasks();
  });
  window.addEventListener("popstate", show);
  // Relative "seen … ago" times of the workers.
  setInterval(() => session.room && renderWorkers($("#workers"), roomState.workers), 5000);
  setInterval(refreshSharedQueues, SHARED_QUEUE_REFRESH_MS);
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) start(token);
  else show();
}

init();
