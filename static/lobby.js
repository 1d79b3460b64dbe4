// @ts-check
// Choosing a room: the room form in the top bar (checked as the hub would before the page
// goes there) and the rooms this device opened lately (local storage).

import { $, h, setFieldError } from "./dom.js";
import { roomIdProblem } from "./naming.js";
import { navigate, roomUrl } from "./router.js";
import { parseRecentRooms, withRecentRoom } from "./state.js";

const ROOMS_KEY = "taskhub.rooms";

function recentRooms() {
  return parseRecentRooms(localStorage.getItem(ROOMS_KEY));
}

/**
 * Put `room` first in the recent rooms (and the room form's suggestions).
 * @param {string} room
 */
export function rememberRoom(room) {
  const rooms = withRecentRoom(recentRooms(), room);
  localStorage.setItem(ROOMS_KEY, JSON.stringify(rooms));
  $("#recent-rooms").replaceChildren(...rooms.map((r) => new Option(r)));
}

/** The lobby's list of recent rooms, as links (a plain click stays in this tab). */
export function renderRecentRooms() {
  const rooms = recentRooms();
  $("#recent-rooms").replaceChildren(...rooms.map((r) => new Option(r)));
  const open = (/** @type {string} */ room) => (/** @type {MouseEvent} */ event) => {
    if (event.metaKey || event.ctrlKey || event.shiftKey) return; // a new tab or window
    navigate(event, room);
  };
  $("#recent-list").replaceChildren(
    ...rooms.map((r) => h("li", {}, h("a", { href: roomUrl(r), onclick: open(r) }, r))),
  );
  if (!rooms.length) $("#recent-list").append(h("li", { class: "empty" }, "None yet."));
}

/**
 * The room form: go to the room typed, or say what is wrong with its name.
 * @param {SubmitEvent} event
 */
export function onRoomForm(event) {
  event.preventDefault();
  const input = $("#room-input", HTMLInputElement);
  const room = input.value.trim();
  const problem = roomIdProblem(room);
  setFieldError(input, $("#room-error"), problem);
  if (problem) {
    input.focus();
    return;
  }
  navigate(null, room);
}
