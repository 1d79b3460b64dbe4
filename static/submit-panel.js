// @ts-check
// The submit panel: the selected job (in the URL: ?job=), its sharing policy, and a form
// generated from its schema (schema-form.js). The form's own checks answer at once; the
// hub's 422 has the last word, its errors shown next to the fields they name.

import { ApiError } from "./api.js";
import { $, h, toast } from "./dom.js";
import { jobLabel, messageOf, shortId } from "./format.js";
import { drawJobs } from "./jobs-panel.js";
import { renderPolicy } from "./jobs.js";
import { isInternalJob } from "./naming.js";
import { roomUrl } from "./router.js";
import { SchemaForm } from "./schema-form.js";
import { api, failed, signedOutBy } from "./session.js";
import { state } from "./state.js";
import { eventFromTask } from "./statuses.js";
import { taskTable } from "./tasks-panel.js";

/**
 * Show `fullName`'s form (null: none); with push, a new history entry.
 * @param {string | null} fullName
 * @param {{ push?: boolean }} [options]
 */
export async function selectJob(fullName, { push = true } = {}) {
  state.room.selected = fullName || null;
  const room = state.session.room;
  if (push && room) history.pushState(null, "", roomUrl(room, state.room.selected));
  drawJobs();
  if (!fullName) {
    $("#submit-panel").hidden = true;
    state.room.job = null;
    renderPolicy($("#job-policy"), null);
    return;
  }
  await loadJob(fullName, { keepForm: false });
}

/**
 * Fetch the job and (re)build its form; with keepForm, only when its schema changed.
 * @param {string} fullName
 * @param {{ keepForm: boolean }} options
 */
export async function loadJob(fullName, { keepForm }) {
  const room = state.session.room;
  if (!room) return;
  const { generation } = state.room;
  let job;
  try {
    job = await api().job(room, fullName);
  } catch (error) {
    if (generation !== state.room.generation || fullName !== state.room.selected) return;
    if (error instanceof ApiError && error.status === 404) {
      showJobMissing(fullName, keepForm);
      return;
    }
    failed(error, "Could not load the job");
    return;
  }
  if (generation !== state.room.generation || fullName !== state.room.selected) return;
  const sameSchema = JSON.stringify(job.schema) === JSON.stringify(state.room.job?.schema);
  state.room.job = job;
  updateJobNote();
  renderPolicy($("#job-policy"), job); // it may change when the job is registered again
  if (keepForm && sameSchema && state.room.form) return;
  const { name, scope } = jobLabel(job.full_name);
  $("#submit-job-name").textContent = name;
  $("#submit-job-name").title = job.full_name;
  $("#job-description").textContent = job.schema?.description || `${scope} job ${job.full_name}`;
  showForm(new SchemaForm(job.schema, "payload"));
  $("#submit-status").textContent = "";
  $("#submit-panel").hidden = false;
}

/** @param {SchemaForm} form */
function showForm(form) {
  state.room.form = form;
  $("#form-fields").replaceChildren(form.element);
  showFormErrors([]);
}

/**
 * The selected job is not (or no longer) visible from the room.
 * @param {string} fullName
 * @param {boolean} keepForm
 */
function showJobMissing(fullName, keepForm) {
  if (keepForm) {
    updateJobNote(); // the form stays: submitting explains what happened
    return;
  }
  state.room.job = null;
  $("#submit-panel").hidden = true;
  renderPolicy($("#job-policy"), null);
  toast(`The job ${fullName} is not offered in this room.`);
}

/** A note over the form when no worker serves the selected job. */
export function updateJobNote() {
  const note = $("#job-note");
  const { jobs, selected } = state.room;
  const listed = jobs?.find((job) => job.full_name === selected);
  let text = "";
  if (jobs && selected && !listed) {
    text = "No worker offers this job now; submitting will fail.";
  } else if (listed && !isInternalJob(listed.full_name) && !listed.workers.length) {
    text = "No worker serves this job right now: tasks wait in the queue until one does.";
  }
  note.textContent = text;
  note.hidden = !text;
}

/** @param {string[]} messages errors that belong to no field */
function showFormErrors(messages) {
  const box = $("#form-errors");
  box.replaceChildren(...messages.map((message) => h("p", {}, message)));
  box.hidden = !messages.length;
}

/** @param {SubmitEvent} event */
export async function onSubmit(event) {
  event.preventDefault();
  const { form, job } = state.room;
  const room = state.session.room;
  if (!form || !job || !room) return;
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
  const button = event.submitter instanceof HTMLButtonElement
    ? event.submitter : $("#submit-form button[type=submit]", HTMLButtonElement);
  button.disabled = true;
  status.textContent = "Submitting…";
  try {
    const task = await api().submit(room, job.full_name, value);
    taskTable.push(eventFromTask(task));
    status.textContent = `Submitted task ${shortId(task.id)}.`;
  } catch (error) {
    if (error instanceof ApiError && error.status === 422 && error.problem.errors) {
      showFormErrors(form.showServerErrors(error.problem.errors));
      status.textContent = "The hub rejected the input; see the highlighted fields.";
    } else if (!signedOutBy(error)) {
      showFormErrors([messageOf(error)]);
      status.textContent = "The task was not submitted.";
    }
  } finally {
    button.disabled = false;
  }
}

/** The form again, with the schema's defaults. */
export function resetForm() {
  const { job } = state.room;
  if (!job) return;
  showForm(new SchemaForm(job.schema, "payload"));
  $("#submit-status").textContent = "Form reset to the defaults.";
}
