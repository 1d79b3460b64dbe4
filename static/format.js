// @ts-check
// Formatting of ids, job names, times, counts and JSON for display.

/**
 * The last 8 hex digits of a UUID (a UUIDv7 starts with its time, so they differ more).
 * @param {string | null | undefined} id
 */
export const shortId = (id) => String(id ?? "").replaceAll("-", "").slice(-8);

/**
 * "room:category:name" → { name, category, room, scope: "category · room" }.
 * @param {string} fullName
 */
export function jobLabel(fullName) {
  const [room = "", category = "", ...rest] = String(fullName).split(":");
  const name = rest.join(":") || fullName;
  return { name, category, room, scope: room.startsWith("@") ? `${category} · ${room}` : category };
}

/**
 * Local wall-clock time with seconds.
 * @param {string | null | undefined} iso
 */
export function clock(iso) {
  if (!iso) return "";
  /** @type {Intl.DateTimeFormatOptions} */
  const parts = { hour: "2-digit", minute: "2-digit", second: "2-digit" };
  return new Date(iso).toLocaleTimeString([], parts);
}

/**
 * "0.42 s", "3.1 s", "2 min 5 s" between two ISO timestamps.
 * @param {string} fromIso
 * @param {string} toIso
 */
export function duration(fromIso, toIso) {
  const seconds = Math.max(0, (Date.parse(toIso) - Date.parse(fromIso)) / 1000);
  if (seconds < 1) return `${seconds.toFixed(2)} s`;
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
}

/**
 * "just now", "12 s ago", "3 min ago", …
 * @param {string} iso
 * @param {number} [now]
 */
export function ago(iso, now = Date.now()) {
  const seconds = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (seconds < 5) return "just now";
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  return `${Math.floor(seconds / 3600)} h ago`;
}

/** @param {unknown} value */
export const json = (value) => JSON.stringify(value, null, 2);

/**
 * 1 → "1st", 2 → "2nd", 3 → "3rd", 11 → "11th", 22 → "22nd".
 * @param {number} n
 */
export function ordinal(n) {
  const teens = n % 100 >= 11 && n % 100 <= 13;
  /** @type {Record<number, string>} */
  const suffixes = { 1: "st", 2: "nd", 3: "rd" };
  const suffix = teens ? "th" : (suffixes[n % 10] ?? "th");
  return `${n}${suffix}`;
}

/**
 * "1 task", "3 tasks" (`plural` defaults to `singular` + "s").
 * @param {number} n
 * @param {string} singular
 * @param {string} [plural]
 */
export function count(n, singular, plural = `${singular}s`) {
  return `${n} ${n === 1 ? singular : plural}`;
}

/**
 * The table's selection in words: "No task selected.", "1 task selected.", "3 tasks selected."
 * @param {number} n
 */
export function selectionText(n) {
  return n === 0 ? "No task selected." : `${count(n, "task")} selected.`;
}

/**
 * Where the shown page is: "51–100 of 230" (nothing when it shows no task).
 * @param {number} offset
 * @param {number} shown
 * @param {number} total
 */
export function pageRange(offset, shown, total) {
  return shown ? `${offset + 1}–${offset + shown} of ${total}` : "";
}

/**
 * The message of something thrown (an Error's, else the thing as text).
 * @param {unknown} error
 */
export function messageOf(error) {
  return error instanceof Error ? error.message : String(error);
}
