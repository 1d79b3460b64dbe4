// @ts-check
// The URL is the page's address book: the room (/?room=lab, or #/lab), the job whose form
// is shown, the open task, and the table's filter, sort and page, so that a view can be
// shared and reloaded. `show` brings the page in line with the URL (and the session).

import { detail } from "./detail-panel.js";
import { $, setFieldError } from "./dom.js";
import { renderRecentRooms } from "./lobby.js";
import { roomIdProblem } from "./naming.js";
import { closeRoom, openRoom } from "./room.js";
import { state, tableParams } from "./state.js";
import { selectJob } from "./submit-panel.js";
import { readTableState } from "./table-controls.js";
import { loadPage } from "./tasks-panel.js";

/** The room and job the URL names. */
export function routeFromUrl() {
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

/**
 * A room's address; the open room's carries its table's filters, sort, page and open
 * task, so that it can be shared and reloaded.
 * @param {string} room
 * @param {string | null} [job]
 */
export function roomUrl(room, job = null) {
  const params = new URLSearchParams({ room });
  if (job) params.set("job", job);
  if (room === state.session.room) {
    for (const [key, value] of tableParams(state.table, state.stats.window, detail.openId)) {
      params.set(key, value);
    }
  }
  return `/?${params}`;
}

/** Show what the URL names: the sign-in form, the lobby, or a room (its job, its task). */
export function show() {
  const { room, job } = routeFromUrl();
  const signedIn = Boolean(state.session.api);
  $("#sign-in-view").hidden = signedIn;
  $("#room-form").hidden = !signedIn;
  $("#sign-out").hidden = !signedIn;
  $("#connection").hidden = !signedIn;
  const problem = room === null ? null : roomIdProblem(room);
  $("#lobby-view").hidden = !signedIn || (room !== null && !problem);
  $("#room-view").hidden = !signedIn || room === null || problem !== null;
  if (!signedIn) {
    closeRoom();
    document.title = "Sign in · Taskhub";
    return;
  }
  const input = $("#room-input", HTMLInputElement);
  if (room === null || problem) {
    closeRoom();
    renderRecentRooms();
    if (room !== null) {
      input.value = room;
      setFieldError(input, $("#room-error"), problem);
    }
    document.title = "Taskhub";
    return;
  }
  input.value = room;
  setFieldError(input, $("#room-error"), "");
  if (room !== state.session.room) openRoom(room);
  else if (readTableState()) loadPage();
  if (job !== state.room.selected) selectJob(job, { push: false });
  // Read now: opening the room closed the panel of the room before, and its task left the URL.
  const task = new URLSearchParams(location.search).get("task");
  if (task && task !== detail.openId) detail.open(task, null);
  else if (!task && detail.openId) detail.close();
}

/**
 * Go to `room` (a new history entry).
 * @param {Event | null} event what asked (its default is prevented)
 * @param {string} room
 */
export function navigate(event, room) {
  event?.preventDefault();
  history.pushState(null, "", roomUrl(room));
  show();
}

/** The open room's state into the URL (no new history entry). */
export function writeUrl() {
  if (state.session.room) {
    history.replaceState(null, "", roomUrl(state.session.room, state.room.selected));
  }
}

/**
 * The open task into the URL (or out of it).
 * @param {string | null} id
 */
export function setTaskInUrl(id) {
  if (!state.session.room) return;
  const params = new URLSearchParams(location.search);
  if (id) params.set("task", id);
  else params.delete("task");
  history.replaceState(null, "", `/?${params}`);
}
