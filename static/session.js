// @ts-check
// Signing in and out: the token (this tab's session storage, or this device's local storage
// when asked), who its user is, the live connection and its state in the top bar. A 401
// from the hub anywhere signs out (`signedOutBy`), and so does a JWT's expiry. A token from
// the identity provider (provider-sign-in.js) is kept the same way, and signing out by hand
// signs out at the provider too.

import { Api, ApiError } from "./api.js";
import { detail } from "./detail-panel.js";
import { $, setFieldError, toast } from "./dom.js";
import { messageOf } from "./format.js";
import { scheduleJobsRefresh } from "./jobs-panel.js";
import { onTaskStatus } from "./live-events.js";
import { Live } from "./live.js";
import { endSessionUrl, expiryOf, forgetSignIn, keptSignIn } from "./oidc.js";
import { scheduleProvidersRefresh } from "./providers-panel.js";
import { refreshAll } from "./room.js";
import { routeFromUrl, show } from "./router.js";
import { mayCancel, nameOfSubmitter, state } from "./state.js";
import { taskTable } from "./tasks-panel.js";

/** @import { ConnectionState } from "./live.js" */
/** @import { Task, User } from "./types.js" */

const TOKEN_KEY = "taskhub.token";
/** @type {Record<ConnectionState, string>} */
const CONNECTION_LABELS = {
  connecting: "Connecting…",
  connected: "Connected",
  reconnecting: "Reconnecting…",
  offline: "Offline",
};
const EXPIRED = "Your sign-in has expired. Sign in again.";
const MAX_TIMER_MS = 2 ** 31 - 1; // setTimeout's longest wait (~24.8 days)
/** @type {ReturnType<typeof setTimeout> | undefined} */
let expiryTimer;

/** The REST client of the session; only asked for while signed in. */
export function api() {
  const client = state.session.api;
  if (!client) throw new Error("Not signed in.");
  return client;
}

/** The token this tab (or this device) keeps, if any. */
export function storedToken() {
  return sessionStorage.getItem(TOKEN_KEY) ?? localStorage.getItem(TOKEN_KEY);
}

/**
 * The sign-in form: ask the hub who the token's user is, then keep the token and start.
 * @param {SubmitEvent} event
 */
export async function signIn(event) {
  event.preventDefault();
  const input = $("#token-input", HTMLInputElement);
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
    setFieldError(input, error, refused ? "The hub did not accept this token." : messageOf(failure));
    input.focus();
    return;
  }
  setFieldError(input, error, "");
  input.value = "";
  keepToken(token, $("#remember-input", HTMLInputElement).checked);
  start(token, me);
  $(routeFromUrl().room ? "#main" : "#room-input").focus();
}

/**
 * Keep `token` in this tab only, unless the person asks this device to remember it; the
 * storage it is kept in.
 * @param {string} token
 * @param {boolean} remember
 */
export function keepToken(token, remember) {
  const storage = remember ? localStorage : sessionStorage;
  storage.setItem(TOKEN_KEY, token);
  return storage;
}

/**
 * Forget the token and show the sign-in form (with `message` under it, if any).
 * @param {string} [message]
 */
export function signOut(message = "") {
  localStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(TOKEN_KEY);
  forgetSignIn();
  clearTimeout(expiryTimer);
  state.session.live?.close();
  state.session.live = null;
  state.session.api = null;
  setMe(null);
  show();
  if (message) setFieldError($("#token-input"), $("#token-error"), message);
  $("#token-input").focus();
}

/** The Sign out button: sign out, and at the identity provider when the token came from one
 * (its sign-out page sends the browser back here). */
export async function signOutByHand() {
  const provided = keptSignIn();
  signOut();
  if (!provided) return;
  try {
    const url = await endSessionUrl(provided);
    if (url) location.assign(url);
  } catch (error) {
    toast(`Signed out here; the identity provider could not be reached: ${messageOf(error)}`);
  }
}

/**
 * Use `token`: the REST client, the live connection, and the view the URL names.
 * @param {string} token
 * @param {User | null} [me] who its user is, when the hub has just said
 */
export function start(token, me = null) {
  signOutAt(expiryOf(token));
  state.session.api = new Api(token);
  if (me) setMe(me);
  else learnWhoIAm();
  state.session.live = new Live(token, {
    state: setConnection,
    taskStatus: onTaskStatus,
    taskLog: (event) => detail.onLog(event),
    jobsInvalidate: () => scheduleJobsRefresh(), // a worker came or left: jobs and workers
    providersInvalidate: () => scheduleProvidersRefresh(), // a provider came, changed or left
    synced: () => {
      if (!state.session.me) learnWhoIAm(); // the hub was out of reach at the start
      if (state.session.room) {
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

/**
 * Sign out when the token expires (a JWT's `exp`; null: never).
 * @param {number | null} expiry milliseconds since the epoch
 */
function signOutAt(expiry) {
  clearTimeout(expiryTimer);
  if (expiry === null) return;
  const left = expiry - Date.now();
  expiryTimer = setTimeout(
    () => (left > MAX_TIMER_MS ? signOutAt(expiry) : signOut(EXPIRED)),
    Math.min(Math.max(left, 0), MAX_TIMER_MS),
  );
}

/** Ask the hub who the token's user is (a stored token was never checked). */
async function learnWhoIAm() {
  const api = state.session.api;
  if (!api) return;
  try {
    const me = await api.me();
    if (state.session.api === api) setMe(me);
  } catch (error) {
    if (state.session.api === api) signedOutBy(error); // else: asked again once live is back
  }
}

/** @param {User | null} me */
function setMe(me) {
  state.session.me = me;
  const label = $("#whoami");
  label.hidden = !me;
  label.textContent = me ? me.name : "";
  label.title = me ? `Signed in as ${me.name}${me.is_superuser ? " (superuser)" : ""}` : "";
  if (me) state.userNames.set(me.id, me.name);
  taskTable.refreshActions();
  detail.refreshPlace(); // "of yours" needs to know who the viewer is
}

/**
 * The connection's state in the top bar.
 * @param {ConnectionState} connection
 * @param {string} [why]
 */
function setConnection(connection, why = "") {
  const el = $("#connection");
  el.dataset.state = connection;
  $(".label", HTMLElement, el).textContent = CONNECTION_LABELS[connection] ?? connection;
  el.title = why || (connection === "connected" ? "Live updates are on." : "Updates are paused.");
}

/**
 * A REST failure: 401 signs out; anything else is shown briefly.
 * @param {unknown} error
 * @param {string} what
 */
export function failed(error, what) {
  if (!signedOutBy(error)) toast(`${what}: ${messageOf(error)}`);
}

/**
 * Sign out when `error` is the hub refusing the token; whether it was.
 * @param {unknown} error
 */
export function signedOutBy(error) {
  if (!(error instanceof ApiError && error.status === 401)) return false;
  signOut("The hub no longer accepts this token. Sign in again.");
  return true;
}

/**
 * Whether the viewer may cancel `task`, as far as the page knows (see state.js).
 * @param {Task} task
 */
export function viewerMayCancel(task) {
  return mayCancel(state.session.me, task, state.room.workers);
}

/**
 * Whether the viewer submitted `task`.
 * @param {Task} task
 */
export function isMine(task) {
  const me = state.session.me;
  return Boolean(me && task.submitted_by && task.submitted_by === me.id);
}

/**
 * The submitter's name as far as the page knows it.
 * @param {Task} task
 */
export function submitterName(task) {
  return nameOfSubmitter(state.userNames, task);
}
