// @ts-check
// The open room's visibility (a badge beside its name) and, for who may manage it, its
// members: each user or group with its role, a form to add one or change its role, a
// button to remove one, and the room made private or open again. Read when the room opens
// and after a reconnect. The elements are made here: the page's markup stays as it is.

import { $, h } from "./dom.js";
import { messageOf } from "./format.js";
import { api, signedOutBy } from "./session.js";
import { state } from "./state.js";

/**
 * @typedef {{ room_id: string, visibility: "open" | "private", role: string | null,
 *   actions: string[] }} RoomAccess
 * @typedef {{ kind: "user" | "group", subject: string, role: string, name: string | null,
 *   created_at: string }} Member
 */

export const ROLES = /** @type {const} */ (["viewer", "member", "maintainer"]);
const enc = encodeURIComponent;

/** The badge after the room's name, made once. */
function badge() {
  let el = document.getElementById("room-visibility");
  if (!el) {
    el = h("span", { id: "room-visibility", class: "visibility-badge" });
    $("#room-name").after(" ", el);
  }
  return el;
}

/** The members panel, made once, after the providers panel. */
function panel() {
  let el = document.getElementById("members-panel");
  if (!el) {
    el = h("section", { id: "members-panel", class: "panel", "aria-labelledby": "members-title", hidden: true },
      h("h2", { id: "members-title" }, "Members"),
      h("p", { id: "members-note", class: "hint", role: "status" }),
      h("ul", { id: "members", class: "members" }),
      memberForm(),
      h("button", { type: "button", id: "visibility-toggle", class: "quiet", onclick: toggleVisibility }));
    $("#providers-panel").after(el);
  }
  return el;
}

function memberForm() {
  return h("form", { id: "member-form", class: "member-form", novalidate: true, onsubmit: addMember },
    h("label", { for: "member-kind" }, "Add"),
    h("select", { id: "member-kind", "aria-label": "User or group" },
      h("option", { value: "user" }, "user id"), h("option", { value: "group" }, "group")),
    h("input", { id: "member-subject", required: true, "aria-label": "User id or group name" }),
    h("select", { id: "member-role", "aria-label": "Role" },
      ...ROLES.map((role) => h("option", { value: role }, role))),
    h("button", { type: "submit", class: "primary" }, "Add"));
}

/** The label a room's access shows: its visibility, and the viewer's role if it has one.
 * @param {RoomAccess} access */
export function visibilityLabel(access) {
  if (access.visibility === "open") return "open";
  return access.role ? `private · ${access.role}` : "private";
}

/** Forget the room left. */
export function clearMembers() {
  badge().textContent = "";
  panel().hidden = true;
  $("#members").replaceChildren();
}

/** Read the room's access, and its members when the viewer may manage them. */
export async function refreshMembers() {
  const room = state.session.room;
  if (!room) return;
  const { generation } = state.room;
  try {
    /** @type {RoomAccess} */
    const access = await api().request("GET", `/rooms/${enc(room)}`);
    if (generation !== state.room.generation) return;
    badge().textContent = visibilityLabel(access);
    // In an open room anyone may make it private (and becomes its maintainer).
    const managing = access.actions.includes("manage");
    panel().hidden = !managing;
    $("#visibility-toggle").textContent =
      access.visibility === "private" ? "Open this room to everyone" : "Make this room private";
    if (!managing) {
      $("#members").replaceChildren();
      return;
    }
    $("#member-form").hidden = false;
    /** @type {{ items: Member[] }} */
    const page = await api().request("GET", `/rooms/${enc(room)}/members`);
    if (generation !== state.room.generation) return;
    drawMembers(room, page.items);
  } catch (error) {
    if (signedOutBy(error)) return;
    badge().textContent = "";
  }
}

/**
 * @param {string} room
 * @param {Member[]} members
 */
function drawMembers(room, members) {
  $("#members").replaceChildren(...members.map((member) => h("li", { class: "member" },
    h("span", { class: "member-name" },
      member.kind === "group" ? `group ${member.subject}` : member.name ?? member.subject),
    h("select", {
      "aria-label": `Role of ${member.name ?? member.subject}`,
      value: member.role,
      onchange: (/** @type {Event} */ event) => putMember(room, member.kind, member.subject,
        /** @type {HTMLSelectElement} */ (event.target).value),
    }, ...ROLES.map((role) => h("option", { value: role }, role))),
    h("button", {
      type: "button",
      class: "quiet",
      onclick: () => removeMember(room, member.kind, member.subject),
    }, "Remove"))));
}

/** @param {SubmitEvent} event */
async function addMember(event) {
  event.preventDefault();
  const room = state.session.room;
  const subject = $("#member-subject", HTMLInputElement).value.trim();
  if (!room || !subject) return;
  const kind = $("#member-kind", HTMLSelectElement).value;
  await putMember(room, kind, subject, $("#member-role", HTMLSelectElement).value);
  $("#member-subject", HTMLInputElement).value = "";
}

/**
 * @param {string} room
 * @param {string} kind
 * @param {string} subject
 * @param {string} role
 */
async function putMember(room, kind, subject, role) {
  await change(() => api().request("PUT", `/rooms/${enc(room)}/members/${kind}/${enc(subject)}`, { role }));
}

/**
 * @param {string} room
 * @param {string} kind
 * @param {string} subject
 */
async function removeMember(room, kind, subject) {
  await change(() => api().request("DELETE", `/rooms/${enc(room)}/members/${kind}/${enc(subject)}`));
}

async function toggleVisibility() {
  const room = state.session.room;
  if (!room) return;
  const visibility = badge().textContent?.startsWith("private") ? "open" : "private";
  await change(() => api().request("PUT", `/rooms/${enc(room)}`, { visibility }));
}

/** Make a change, then show the room as it is now (or why the change was refused).
 * @param {() => Promise<unknown>} request */
async function change(request) {
  const note = $("#members-note");
  note.textContent = "";
  try {
    await request();
  } catch (error) {
    if (signedOutBy(error)) return;
    note.textContent = messageOf(error);
  }
  await refreshMembers();
}
