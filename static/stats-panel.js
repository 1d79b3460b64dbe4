// @ts-check
// The open room's overview (overview.js): the whole window is read on open, on a change of
// window and after a reconnect; live events only read its tail again (the buckets from the
// last one on), at most every STATS_TAIL_MS.

import { $ } from "./dom.js";
import { messageOf } from "./format.js";
import { Overview } from "./overview.js";
import { writeUrl } from "./router.js";
import { api, signedOutBy } from "./session.js";
import { state } from "./state.js";
import { throttle } from "./throttle.js";

// Live events refresh the charts' last bucket(s) at most this often (coalesced).
const STATS_TAIL_MS = 2000;

export const overview = new Overview($("#charts"), $("#counts tbody"));

/** Live events: read the charts' tail soon; never the whole window again. */
const tail = throttle(() => readStatsTail(), { interval: STATS_TAIL_MS });

/** The whole window (a room opened, the window changed, a reconnect). */
export async function loadStats() {
  const room = state.session.room;
  if (!room) return;
  const { stats } = state;
  const { generation } = state.room;
  stats.request += 1;
  const request = stats.request;
  try {
    const answer = await api().stats(room, stats.window);
    if (generation !== state.room.generation || request !== stats.request) return;
    stats.loaded = true;
    tail.ran();
    overview.setStats(answer);
    $("#stats-note").textContent = "";
  } catch (error) {
    if (request !== stats.request || signedOutBy(error)) return;
    $("#stats-note").textContent = `The hub gave no figures: ${messageOf(error)}`;
  }
}

/** Something happened in the room: its figures' tail is read again (once the window is). */
export function scheduleStatsTail() {
  if (state.session.room && state.stats.loaded) tail.schedule();
}

async function readStatsTail() {
  const room = state.session.room;
  const { stats } = state;
  if (!room || !stats.loaded) return;
  const { generation } = state.room;
  const request = stats.request;
  try {
    const answer = await api().stats(room, stats.window, overview.tailSince);
    if (generation !== state.room.generation || request !== stats.request) return;
    overview.mergeTail(answer);
  } catch (error) {
    signedOutBy(error);
  }
}

/** The window select: another window is read whole (and kept in the URL). */
export function wireWindowSelect() {
  const select = $("#window-select", HTMLSelectElement);
  select.addEventListener("change", () => {
    state.stats.window = select.value;
    writeUrl();
    loadStats();
  });
}
