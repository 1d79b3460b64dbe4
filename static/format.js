// Formatting of ids, job names, times and JSON for display.

/** The last 8 hex digits of a UUID (a UUIDv7 starts with its time, so they differ more). */
export const shortId = (id) => String(id ?? "").replaceAll("-", "").slice(-8);

/** "room:category:name" → { name, category, room, scope: "category · room" }. */
export function jobLabel(fullName) {
  const [room = "", category = "", ...rest] = String(fullName).split(":");
  const name = rest.join(":") || fullName;
  return { name, category, room, scope: room.startsWith("@") ? `${category} · ${room}` : category };
}

/** Local wall-clock time with seconds. */
export function clock(iso) {
  if (!iso) return "";
  const parts = { hour: "2-digit", minute: "2-digit", second: "2-digit" };
  return new Date(iso).toLocaleTimeString([], parts);
}

/** "0.42 s", "3.1 s", "2 min 5 s" between two ISO timestamps. */
export function duration(fromIso, toIso) {
  const seconds = Math.max(0, (Date.parse(toIso) - Date.parse(fromIso)) / 1000);
  if (seconds < 1) return `${seconds.toFixed(2)} s`;
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
}

/** "just now", "12 s ago", "3 min ago", … */
export function ago(iso, now = Date.now()) {
  const seconds = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (seconds < 5) return "just now";
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  return `${Math.floor(seconds / 3600)} h ago`;
}

export const json = (value) => JSON.stringify(value, null, 2);

/** 1 → "1st", 2 → "2nd", 3 → "3rd", 11 → "11th", 22 → "22nd". */
export function ordinal(n) {
  const teens = n % 100 >= 11 && n % 100 <= 13;
  const suffix = teens ? "th" : ({ 1: "st", 2: "nd", 3: "rd" }[n % 10] ?? "th");
  return `${n}${suffix}`;
}
