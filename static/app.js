// @ts-check
// Taskhub's room page, an operator's dashboard of a room: sign in, choose a room (kept in
// the URL: /?room=lab, or #/lab), see its counts and charts, jobs, workers and tasks live
// (a filtered, sorted, paged table whose state is in the URL too), a task's details and
// log, submit from a schema-generated form, cancel and re-run (one task or in bulk).
//
// This module starts the page: it listens to the controls and sets the clocks. The page's
// state is in state.js; each panel's behaviour in its own module (*-panel.js, lobby.js,
// bulk.js, table-controls.js, live-events.js); router.js brings the page in line with the
// URL, session.js with the token. Those modules call one another; none runs anything when
// loaded but build its panel's widget, so the order they load in does not matter.

import { wireBulkActions } from "./bulk.js";
import { $ } from "./dom.js";
import { tickWorkers } from "./jobs.js";
import { refreshSharedQueues } from "./live-events.js";
import { onRoomForm } from "./lobby.js";
import { onRead } from "./providers-panel.js";
import { show } from "./router.js";
import { finishProviderSignIn, isSignInCallback, offerProviderSignIn } from "./provider-sign-in.js";
import { signIn, signOutByHand, start, storedToken } from "./session.js";
import { scheduleStatsTail, wireWindowSelect } from "./stats-panel.js";
import { onSubmit, resetForm } from "./submit-panel.js";
import { wireTableControls } from "./table-controls.js";

const STATS_IDLE_MS = 15000; // the charts' tail is read this often without events (new buckets)
// Tasks of a shared (@global, @internal) job queue up with those of other rooms, whose
// events this room never hears: their places are read again this often while shown.
const SHARED_QUEUE_REFRESH_MS = 3000;
const WORKERS_TICK_MS = 1000; // "seen … ago"

function init() {
  $("#sign-in-form").addEventListener("submit", signIn);
  $("#sign-out").addEventListener("click", signOutByHand);
  $("#room-form").addEventListener("submit", onRoomForm);
  $("#submit-form").addEventListener("submit", onSubmit);
  $("#reset-form").addEventListener("click", resetForm);
  $("#read-form").addEventListener("submit", onRead);
  wireTableControls();
  wireBulkActions();
  wireWindowSelect();
  window.addEventListener("popstate", show);
  const topbar = $(".topbar");
  new ResizeObserver(() => {
    document.documentElement.style.setProperty("--topbar-height", `${topbar.offsetHeight}px`);
  }).observe(topbar);
  setInterval(() => tickWorkers($("#workers")), WORKERS_TICK_MS);
  setInterval(scheduleStatsTail, STATS_IDLE_MS);
  setInterval(refreshSharedQueues, SHARED_QUEUE_REFRESH_MS);
  const token = storedToken();
  if (isSignInCallback()) finishProviderSignIn(); // back from the identity provider
  else if (token) start(token);
  else show();
  offerProviderSignIn();
}

init();
