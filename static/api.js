// @ts-check
// The hub's REST API (/v1/joblib), with the bearer token. Errors are RFC 9457 problems.

/** @import { BulkResult, Job, LogPage, Page, Place, Problem } from "./types.js" */
/** @import { Stats, Task, TaskFilter, User, Worker } from "./types.js" */
/** @import { Provider, ProviderAnswer } from "./types.js" */

const BASE = "/v1/joblib";

/** A failed request: `status` (0 when the hub could not be reached) and the problem body. */
export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {Problem | null} [problem]
   */
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem ?? {};
  }
}

const enc = encodeURIComponent;

/**
 * A task filter as the hub takes it, in a query or the bulk endpoint's `filter` object:
 * status as a comma-separated list, empty fields left out.
 * @param {Partial<TaskFilter>} [filter]
 * @returns {Record<string, string>}
 */
export function filterQuery(filter = {}) {
  /** @type {Record<string, string>} */
  const query = {};
  if (filter.status?.length) query.status = filter.status.join(",");
  for (const key of /** @type {const} */ (["job", "submitted_by", "worker_id", "q"])) {
    const value = filter[key];
    if (value) query[key] = value;
  }
  return query;
}

/**
 * Query parameters: numbers as their digits.
 * @param {Record<string, string | number>} values
 */
function query(values) {
  return new URLSearchParams(Object.entries(values).map(([key, value]) => [key, String(value)]));
}

export class Api {
  /** @param {string} token */
  constructor(token) {
    this.token = token;
  }

  /**
   * The answer's JSON (null for a 204); an ApiError for anything but a 2xx.
   * @param {string} method
   * @param {string} path
   * @param {unknown} [body]
   * @returns {Promise<any>}
   */
  async request(method, path, body) {
    /** @type {Record<string, string>} */
    const headers = { Authorization: `Bearer ${this.token}`, Accept: "application/json" };
    /** @type {RequestInit} */
    const init = { method, headers };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(BASE + path, init);
    } catch {
      throw new ApiError(0, { title: "Network error", detail: "The hub could not be reached." });
    }
    if (response.status === 204) return null;
    const data = await response.json().catch(() => null);
    if (!response.ok) throw new ApiError(response.status, data ?? { title: response.statusText });
    return data;
  }

  /** The token's user: `{id, name, is_superuser}`, or null from a hub too old to say (a
   * replica of the version before, mid-upgrade: the token is checked all the same); a 401
   * when the hub refuses the token.
   * @returns {Promise<User | null>} */
  async me() {
    try {
      return await this.request("GET", "/users/me");
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 404)) throw error;
      await this.request("GET", "/workers?limit=1"); // any authenticated read
      return null;
    }
  }

  /**
   * @param {string} room
   * @returns {Promise<Page<Job>>}
   */
  jobs(room) {
    return this.request("GET", `/rooms/${enc(room)}/jobs?limit=500`);
  }

  /**
   * @param {string} room
   * @param {string} fullName
   * @returns {Promise<Job>}
   */
  job(room, fullName) {
    return this.request("GET", `/rooms/${enc(room)}/jobs/${enc(fullName)}`);
  }

  /**
   * @param {string} room
   * @returns {Promise<Page<Worker>>}
   */
  workers(room) {
    return this.request("GET", `/rooms/${enc(room)}/workers?limit=500`);
  }

  /** A page of the room's tasks without payload and result (`view=summary`), filtered
   * (`{status: [..], job, submitted_by, worker_id, q}`) and sorted (`-created_at`, …).
   * @param {string} room
   * @param {Partial<TaskFilter>} filter
   * @param {{ sort?: string, limit?: number, offset?: number }} [page]
   * @returns {Promise<Page<Task>>}
   */
  taskSummaries(room, filter, { sort = "-created_at", limit = 50, offset = 0 } = {}) {
    const params = query({ view: "summary", sort, limit, offset, ...filterQuery(filter) });
    return this.request("GET", `/rooms/${enc(room)}/tasks?${params}`);
  }

  /**
   * The room's counts and per-bucket figures over `window` (from `since` only, if given).
   * @param {string} room
   * @param {string} window
   * @param {string | null} [since]
   * @returns {Promise<Stats>}
   */
  stats(room, window, since = null) {
    const params = query(since ? { window, since } : { window });
    return this.request("GET", `/rooms/${enc(room)}/stats?${params}`);
  }

  /**
   * @param {string} id
   * @param {number | null} [after]
   * @param {number} [limit]
   * @returns {Promise<LogPage>}
   */
  logs(id, after = null, limit = 500) {
    const params = query(after != null ? { limit, after } : { limit });
    return this.request("GET", `/tasks/${enc(id)}/logs?${params}`);
  }

  /**
   * @param {string} id
   * @returns {Promise<Task>} the new task
   */
  rerun(id) {
    return this.request("POST", `/tasks/${enc(id)}/rerun`);
  }

  /**
   * Cancel or re-run `ids`, or every task matching `filter`; with dryRun, only count.
   * @param {string} room
   * @param {"cancel" | "rerun"} action
   * @param {{ ids?: string[] | null, filter?: Partial<TaskFilter> | null, dryRun?: boolean }} target
   * @returns {Promise<BulkResult>}
   */
  bulk(room, action, { ids = null, filter = null, dryRun = false }) {
    const selection = ids ? { ids } : { filter: filterQuery(filter ?? {}) };
    const body = { action, dry_run: dryRun, ...selection };
    return this.request("POST", `/rooms/${enc(room)}/tasks/bulk`, body);
  }

  /**
   * @param {string} id
   * @returns {Promise<Task>}
   */
  task(id) {
    return this.request("GET", `/tasks/${enc(id)}`);
  }

  /** Where a task stands in its job's queue and why it waits: `{status, queue_position,
   * claim_order, max_running_per_submitter, max_running_per_room, held_back}`, held_back
   * null or `{scope: "submitter" | "room", running, limit}`.
   * @param {string} id
   * @returns {Promise<Place>}
   */
  place(id) {
    return this.request("GET", `/tasks/${enc(id)}/place`);
  }

  /**
   * @param {string} room
   * @param {string} fullName
   * @param {unknown} payload
   * @returns {Promise<Task>}
   */
  submit(room, fullName, payload) {
    return this.request("POST", `/rooms/${enc(room)}/tasks/${enc(fullName)}`, { payload });
  }

  /**
   * @param {string} room
   * @returns {Promise<Page<Provider>>}
   */
  providers(room) {
    return this.request("GET", `/rooms/${enc(room)}/providers?limit=500`);
  }

  /**
   * Read from a provider (its answer for `params`), waiting up to `wait` seconds for it.
   * @param {string} room
   * @param {string} fullName
   * @param {Record<string, string>} params
   * @param {number} [wait]
   * @returns {Promise<ProviderAnswer>}
   */
  async read(room, fullName, params, wait = 10) {
    const path = `${BASE}/rooms/${enc(room)}/providers/${enc(fullName)}?${query(params)}`;
    let response;
    try {
      response = await fetch(path, {
        headers: { Authorization: `Bearer ${this.token}`, Prefer: `wait=${wait}` },
      });
    } catch {
      throw new ApiError(0, { title: "Network error", detail: "The hub could not be reached." });
    }
    const contentType = (response.headers.get("content-type") ?? "").split(";")[0].trim();
    if (!response.ok) {
      const problem = await response.json().catch(() => null);
      throw new ApiError(response.status, problem ?? { title: response.statusText });
    }
    const blob = await response.blob();
    if (contentType === "application/json") {
      return { contentType, json: JSON.parse(await blob.text()), size: blob.size };
    }
    return { contentType, blob, size: blob.size };
  }

  /**
   * @param {string} id
   * @returns {Promise<Task>}
   */
  cancel(id) {
    return this.request("PATCH", `/tasks/${enc(id)}`, { status: "cancelled" });
  }
}
