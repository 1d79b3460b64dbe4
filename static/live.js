// @ts-check
// The Socket.IO connection: authenticates with the token, keeps the wanted rooms joined
// (again after every reconnect) and reports its state: connecting / connected /
// reconnecting / offline. When the hub dropped events this page read too slowly (a
// `resync`), what it shows is read again, as after a reconnect.

import { io } from "socket.io-client";

import { throttle } from "./throttle.js";

/** @import { TaskEvent, TaskLogEvent } from "./types.js" */

/** @typedef {"connecting" | "connected" | "reconnecting" | "offline"} ConnectionState */

// While the hub keeps dropping events for this page (a tab too slow for a burst), read
// everything again at most this often.
const RESYNC_INTERVAL_MS = 2000;

/**
 * @typedef {object} LiveHandlers
 * @property {(state: ConnectionState, detail: string) => void} [state]
 * @property {(event: TaskEvent) => void} [taskStatus]
 * @property {(event: unknown) => void} [jobsInvalidate]
 * @property {(event: unknown) => void} [providersInvalidate]
 * @property {(event: TaskLogEvent) => void} [taskLog]
 * @property {() => void} [synced] rooms (re)joined after a connect, or events dropped for
 *   this socket (`resync`): refetch what may be missed
 * @property {(message: string) => void} [refused] the hub refused the token
 * @property {(room: string, error: Error) => void} [joinFailed]
 */

export class Live {
  /**
   * @param {string} token
   * @param {LiveHandlers} handlers
   */
  constructor(token, handlers) {
    this.handlers = handlers;
    /** @type {Set<string>} */
    this.rooms = new Set();
    /** @type {ConnectionState} */
    this.state = "connecting";
    this.socket = io({ auth: { token }, reconnectionDelayMax: 4000 });
    this.socket.on("connect", () => this.#connected());
    this.socket.on("disconnect", (reason) => this.#disconnected(reason));
    this.socket.on("connect_error", (error) => this.#failed(error));
    this.socket.on("task_status_event", (event) => handlers.taskStatus?.(event));
    this.socket.on("jobs_invalidate", (event) => handlers.jobsInvalidate?.(event));
    this.socket.on("providers_invalidate", (event) => handlers.providersInvalidate?.(event));
    this.socket.on("task_log", (event) => handlers.taskLog?.(event));
    this.resync = throttle(() => handlers.synced?.(), { interval: RESYNC_INTERVAL_MS });
    this.socket.on("resync", () => this.resync.schedule());
    this.onOnline = () => this.#setState(this.socket.connected ? "connected" : "reconnecting");
    this.onOffline = () => this.#setState("offline", "This device is offline.");
    window.addEventListener("online", this.onOnline);
    window.addEventListener("offline", this.onOffline);
    if (!navigator.onLine) this.onOffline();
  }

  /**
   * Join exactly these rooms (room:{id} on the hub); leaves the others.
   * @param {string[]} ids
   */
  async setRooms(ids) {
    const wanted = new Set(ids);
    const leaving = [...this.rooms].filter((id) => !wanted.has(id));
    const joining = [...wanted].filter((id) => !this.rooms.has(id));
    this.rooms = wanted;
    if (!this.socket.connected) return; // joined on connect
    for (const id of leaving) this.socket.emit("room_leave", { room_id: id });
    await Promise.all(joining.map((id) => this.#join(id)));
  }

  close() {
    window.removeEventListener("online", this.onOnline);
    window.removeEventListener("offline", this.onOffline);
    this.socket.removeAllListeners();
    this.resync.cancel();
    this.socket.disconnect();
  }

  /** @param {string} id */
  async #join(id) {
    try {
      /** @type {{ status?: number, detail?: string, title?: string } | null} */
      const ack = await this.socket.timeout(5000).emitWithAck("room_join", { room_id: id });
      if (ack?.status) throw new Error(ack.detail || ack.title);
    } catch (error) {
      this.handlers.joinFailed?.(id, error instanceof Error ? error : new Error(String(error)));
    }
  }

  async #connected() {
    await Promise.all([...this.rooms].map((id) => this.#join(id)));
    if (!this.socket.connected) return;
    this.#setState("connected");
    this.handlers.synced?.();
  }

  /** @param {string} reason */
  #disconnected(reason) {
    if (reason === "io client disconnect") return;
    if (reason === "io server disconnect") {
      // The hub closed this socket (e.g. it restarts); Socket.IO does not retry by itself.
      setTimeout(() => this.socket.connect(), 1000);
    }
    this.#setState(navigator.onLine ? "reconnecting" : "offline");
  }

  /** @param {Error} error */
  #failed(error) {
    if (!this.socket.active) {
      // Refused by the hub's connect handler: the token is not (or no longer) valid.
      this.#setState("offline", "The hub refused the token.");
      this.handlers.refused?.(error.message);
      return;
    }
    this.#setState(navigator.onLine ? "reconnecting" : "offline");
  }

  /**
   * @param {ConnectionState} state
   * @param {string} [detail]
   */
  #setState(state, detail = "") {
    if (state === this.state && !detail) return;
    this.state = state;
    this.handlers.state?.(state, detail);
  }
}
