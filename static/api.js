// The hub's REST API (/v1/joblib), with the bearer token. Errors are RFC 9457 problems.

const BASE = "/v1/joblib";

/** A failed request: `status` (0 when the hub could not be reached) and the problem body. */
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem ?? {};
  }
}

const enc = encodeURIComponent;

/** A task filter as query parameters (status as a comma-separated list); empty ones left out. */
export function filterQuery(filter = {}) {
  const query = {};
  if (filter.status?.length) query.status = filter.status.join(",");
  for (const key of ["job", "submitted_by", "worker_id", "q"]) {
    if (filter[key]) query[key] = filter[key];
  }
  return query;
}

/** A task filter as the bulk endpoint's `filter` object (status comma-separated too). */
function filterBody(filter = {}) {
  const body = {};
  if (filter.status?.length) body.status = filter.status.join(",");
  for (const key of ["job", "submitted_by", "worker_id", "q"]) {
    if (filter[key]) body[key] = filter[key];
  }
  return body;
}

export class Api {
  constructor(token) {
    this.token = token;
  }

  async request(method, path, body) {
    const headers = { Authorization: `Bearer ${this.token}`, Accept: "application/json" };
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
   * when the hub refuses the token. */
  async me() {
    try {
      return await this.request("GET", "/users/me");
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 404)) throw error;
      await this.request("GET", "/workers?limit=1"); // any authenticated read
      return null;
    }
  }

  jobs(room) {
    return this.request("GET", `/rooms/${enc(room)}/jobs?limit=500`);
  }

  job(room, fullName) {
    return this.request("GET", `/rooms/${enc(room)}/jobs/${enc(fullName)}`);
  }

  workers(room) {
    return this.request("GET", `/rooms/${enc(room)}/workers?limit=500`);
  }

  tasks(room, { status = "", limit = 50, offset = 0 } = {}) {
    const query = new URLSearchParams({ limit, offset });
    if (status) query.set("status", status);
    return this.request("GET", `/rooms/${enc(room)}/tasks?${query}`);
  }

  /** A page of the room's tasks without payload and result (`view=summary`), filtered
   * (`{status: [..], job, submitted_by, worker_id, q}`) and sorted (`-created_at`, …). */
  taskSummaries(room, filter, { sort = "-created_at", limit = 50, offset = 0 } = {}) {
    const query = new URLSearchParams({ view: "summary", sort, limit, offset });
    for (const [key, value] of Object.entries(filterQuery(filter))) query.set(key, value);
    return this.request("GET", `/rooms/${enc(room)}/tasks?${query}`);
  }

  /** The room's counts and per-bucket figures over `window` (from `since` only, if given). */
  stats(room, window, since = null) {
    const query = new URLSearchParams({ window });
    if (since) query.set("since", since);
    return this.request("GET", `/rooms/${enc(room)}/stats?${query}`);
  }

  logs(id, after = null, limit = 500) {
    const query = new URLSearchParams({ limit });
    if (after != null) query.set("after", after);
    return this.request("GET", `/tasks/${enc(id)}/logs?${query}`);
  }

  rerun(id) {
    return this.request("POST", `/tasks/${enc(id)}/rerun`);
  }

  /** Cancel or re-run `ids`, or every task matching `filter`; with dryRun, only count. */
  bulk(room, action, { ids = null, filter = null, dryRun = false }) {
    const body = { action, dry_run: dryRun };
    if (ids) body.ids = ids;
    else body.filter = filterBody(filter);
    return this.request("POST", `/rooms/${enc(room)}/tasks/bulk`, body);
  }

  task(id) {
    return this.request("GET", `/tasks/${enc(id)}`);
  }

  /** Where a task stands in its job's queue and why it waits: `{status, queue_position,
   * claim_order, max_running_per_submitter, max_running_per_room, held_back}`, held_back
   * null or `{scope: "submitter" | "room", running, limit}`. */
  place(id) {
    return this.request("GET", `/tasks/${enc(id)}/place`);
  }

  submit(room, fullName, payload) {
    return this.request("POST", `/rooms/${enc(room)}/tasks/${enc(fullName)}`, { payload });
  }

  cancel(id) {
    return this.request("PATCH", `/tasks/${enc(id)}`, { status: "cancelled" });
  }
}
