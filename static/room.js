// @ts-check
// Opening and closing a room: what the page shows of the room before is cleared, the live
// connection follows the room (and the shared rooms, whose jobs every room sees), and
// everything is read from the hub.

import { detail } from "./detail-panel.js";
import { $ } from "./dom.js";
import { refreshJobs } from "./jobs-panel.js";
import { rememberRoom } from "./lobby.js";
import { clearMembers, refreshMembers } from "./members-panel.js";
import { SHARED_ROOMS } from "./naming.js";
import { clearProviders, refreshProviders } from "./providers-panel.js";
import { enterRoom, leaveRoom, state } from "./state.js";
import { loadStats } from "./stats-panel.js";
import { readTableState } from "./table-controls.js";
import { loadPage, taskTable } from "./tasks-panel.js";

/** @param {string} room */
export function openRoom(room) {
  enterRoom(state, room);
  rememberRoom(room);
  document.title = `${room} · Taskhub`;
  $("#room-name").textContent = room;
  $("#jobs").replaceChildren();
  $("#jobs").setAttribute("aria-busy", "true");
  $("#submit-panel").hidden = true;
  clearProviders();
  clearMembers();
  $("#bulk-result").textContent = "";
  detail.close();
  taskTable.clearSelection();
  taskTable.setPage([]);
  readTableState();
  state.session.live?.setRooms([room, ...SHARED_ROOMS]);
  refreshAll();
}

export function closeRoom() {
  if (!state.session.room) return;
  leaveRoom(state);
  detail.close();
  state.session.live?.setRooms([]);
}

/** Everything the room shows (on open, and after a reconnect). */
export function refreshAll() {
  refreshJobs();
  refreshProviders();
  refreshMembers();
  loadPage();
  loadStats();
}
