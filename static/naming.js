// @ts-check
// The hub's naming rules the page needs before it asks the hub (app/rules/naming.py): a room
// named in the URL is opened (joined live, its lists read) or the lobby says what is wrong
// with it, and the room form answers as the person types. The hub checks again: its answer
// is the authority. tests/page/js/naming.test.mjs holds this copy to the table of room ids
// tests/rules/test_naming.py checks the hub's rule with (tests/rules/room_ids.json).

export const GLOBAL_ROOM = "@global";
export const INTERNAL_ROOM = "@internal";
/** The rooms whose jobs every room sees (and whose events the page follows too). */
export const SHARED_ROOMS = [GLOBAL_ROOM, INTERNAL_ROOM];
export const MAX_ROOM_ID_LENGTH = 128;
const UNADDRESSABLE_ROOM_IDS = [".", ".."]; // URL dot-segments

/**
 * What is wrong with `room` as a room id, in words; null when the hub takes it (like
 * validate_room_id: @global, @internal, or non-empty without @ and :, not . or .., at most
 * MAX_ROOM_ID_LENGTH code points).
 * @param {string} room
 * @returns {string | null}
 */
export function roomIdProblem(room) {
  if (SHARED_ROOMS.includes(room)) return null;
  if (!room) return "Enter a room name.";
  if (/[@:]/.test(room)) return "A room name cannot contain @ or :.";
  if (UNADDRESSABLE_ROOM_IDS.includes(room)) return "A room name cannot be . or .. alone.";
  if ([...room].length > MAX_ROOM_ID_LENGTH) return `At most ${MAX_ROOM_ID_LENGTH} characters.`;
  return null;
}

/**
 * The room a job's full name (`room:category:name`) belongs to.
 * @param {string} fullName
 */
export function jobRoom(fullName) {
  return fullName.split(":")[0];
}

/**
 * Whether a job belongs to a shared room (@global or @internal).
 * @param {string} fullName
 */
export function isSharedJob(fullName) {
  return SHARED_ROOMS.includes(jobRoom(fullName));
}

/**
 * Whether a job is one of the hub's own (@internal), run by no worker.
 * @param {string} fullName
 */
export function isInternalJob(fullName) {
  return jobRoom(fullName) === INTERNAL_ROOM;
}
