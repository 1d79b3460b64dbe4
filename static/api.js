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

  task(id) {
    return this.request("GET", `/tasks/${enc(id)}`);
  }

  submit(room, fullName, payload) {
    return this.request("POST", `/rooms/${enc(room)}/tasks/${enc(fullName)}`, { payload });
  }

  cancel(id) {
    return this.request("PATCH", `/tasks/${enc(id)}`, { status: "cancelled" });
  }
}
