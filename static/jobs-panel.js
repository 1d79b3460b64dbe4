// @ts-check
// The open room's jobs and workers (jobs.js draws them), and the table's job and worker
// filters, which offer them. Read on open and after a reconnect; read again when a worker
// comes or goes (jobs_invalidate) and, the workers alone, when a task is taken or ends.

import { openDetail } from "./detail-panel.js";
import { $, replaceOptions } from "./dom.js";
import { jobLabel, shortId } from "./format.js";
import { renderJobs, renderWorkers } from "./jobs.js";
import { api, failed, signedOutBy } from "./session.js";
import { state } from "./state.js";
import { loadJob, selectJob, updateJobNote } from "./submit-panel.js";
import { taskTable } from "./tasks-panel.js";
import { throttle } from "./throttle.js";

const JOBS_QUIET_MS = 120; // jobs_invalidate comes in bursts: read once they pause
const WORKERS_REFRESH_MS = 500;

const jobsRefresh = throttle(() => state.session.room && refreshJobs(), {
  delay: JOBS_QUIET_MS, restart: true,
});

/** A worker came or left: read the jobs and workers again once the burst is over. */
export function scheduleJobsRefresh() {
  jobsRefresh.schedule();
}

const workersRefresh = throttle(() => readWorkers(), { delay: WORKERS_REFRESH_MS });

/** Read the workers again soon (a task was taken or ended: their slots changed). */
export function scheduleWorkersRefresh() {
  workersRefresh.schedule();
}

async function readWorkers() {
  const room = state.session.room;
  if (!room) return;
  const { generation } = state.room;
  try {
    const workers = await api().workers(room);
    if (generation !== state.room.generation) return;
    state.room.workers = workers.items;
    drawWorkers();
  } catch (error) {
    signedOutBy(error);
  }
}

/** Jobs, workers, and the selected job's schema (it may have changed). */
export async function refreshJobs() {
  const room = state.session.room;
  if (!room) return;
  const { generation } = state.room;
  try {
    const [jobs, workers] = await Promise.all([api().jobs(room), api().workers(room)]);
    if (generation !== state.room.generation) return;
    state.room.jobs = jobs.items;
    state.room.workers = workers.items;
    drawJobs();
    drawWorkers();
    taskTable.refreshActions(); // a task its viewer's worker took may be cancelled by them
    if (state.room.selected) await loadJob(state.room.selected, { keepForm: true });
  } catch (error) {
    failed(error, "Could not load the jobs");
  }
}

function drawWorkers() {
  const { workers } = state.room;
  renderWorkers($("#workers"), workers, {
    openTask: (id) => openDetail(id, document.activeElement),
  });
  replaceOptions($("#filter-worker", HTMLSelectElement), [new Option("Any worker", ""), ...workers.map(
    (worker) => new Option(`${shortId(worker.id)}${worker.owner ? ` (${worker.owner})` : ""}`, worker.id),
  )]);
}

/** The job list (the selected job pressed) and the job filter's options. */
export function drawJobs() {
  const { jobs, selected } = state.room;
  const room = state.session.room;
  if (!jobs || !room) return; // still loading
  renderJobs($("#jobs"), jobs, {
    room,
    selected,
    onSelect: (fullName) => selectJob(fullName === state.room.selected ? null : fullName),
  });
  replaceOptions($("#filter-job", HTMLSelectElement), [new Option("Any job", ""), ...jobs
    .map((job) => job.full_name).sort()
    .map((name) => new Option(`${jobLabel(name).name} (${jobLabel(name).scope})`, name))]);
  updateJobNote();
}
